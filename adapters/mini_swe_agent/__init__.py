"""mini-swe-agent: .traj.json parsing, reruns by the pinned package itself, rebuild, continuation via its Python API."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from replayer.adapters.base import (
    COMMAND,
    Adapter,
    Continuation,
    Ended,
    Launch,
    Rebuild,
    continued_file,
    copy_continued,
    last_event,
    write_continue_spec,
)
from replayer.adapters.forms import NativeForm
from replayer.adapters.mini_swe_agent import bundle, config
from replayer.adapters.mini_swe_agent import session as native_format
from replayer.adapters.mini_swe_agent.rerun import MiniRerunner, companion_argv
from replayer.adapters.sandbox_paths import AGENT_HOME, CONTINUE_SPEC_PATH, PLACEHOLDER_KEY, local_url
from replayer.bridges.chat import ChatPrefixGate
from replayer.floor import cwdinfer
from replayer.floor.foreign import Folder
from replayer.floor.io import MAX_INPUT_BYTES, read_input, write_bytes_atomic
from replayer.floor.limits import Budgets
from replayer.floor.pins import release
from replayer.floor.results import AgentStatus
from replayer.floor.rundirs import RunDirs
from replayer.floor.trajectory import Observation, ToolCall, ToolKind, Trajectory
from replayer.sandboxes.base import Sandbox

TRAJECTORY = "trajectory.traj.json"
CONTINUED = "continued.traj.json"
_STATUS: dict[str, AgentStatus] = {"Submitted": "completed", "LimitsExceeded": "max_steps"}


WORK = "mini"
"""The companion's socket and spec: a folder of the run's state (RunDirs.work)."""


class MiniSweAgentContinuation(Continuation):
    format: native_format.Format
    api_calls: int
    instance_cost: float


class MiniSweAgentAdapter(Adapter[native_format.Native, MiniSweAgentContinuation]):
    continuation_type = MiniSweAgentContinuation
    native_type = native_format.Native
    name = bundle.NAME
    oldest_own_version = "1.5.0"
    """The first release that records its version (`info.mini_version`); the companion drives the 1.x API
    (`get_observation`, `save_traj`) and the 2.x one (`execute_actions`, `InterruptAgentFlow`)."""
    probe_native = "trajectory.traj.json"
    probe_recordings = ("mini_swe_agent/toolcall", "mini_swe_agent/v1*", "mini_swe_agent/versions/*/probe")
    probe_shell = {"bash": {"command": COMMAND, "description": "Probe command"}}
    probe_submit = f"echo {native_format.SUBMIT_WORD}"

    def probe_text_action(self, version: str, step: int, command: str) -> str | None:
        fence = "bash" if release(version) < (2,) else "mswea_bash_command"
        return f"THOUGHT: step {step}.\n\n```{fence}\n{command}\n```"

    forms = (
        NativeForm(
            "trajectory", native_format.looks_like_trajectory, "`save_traj`: *.traj.json of every release"
        ),
        NativeForm(
            "message list", native_format.looks_like_messages, "a run's messages alone, saved as a list"
        ),
    )

    def parse(self, path: Path, task: str | None = None) -> Trajectory:
        traj = native_format.parse(path)
        return traj.model_copy(update={"runs_as": config.runs_as(self.native(traj))})

    def own_text(self, tool: str, text: str) -> str | None:
        return native_format.own_text(text)

    def inferred_cwd(self, trajectory: Trajectory) -> str | None:
        """An interactive run or a bare list records no environment cwd: every command runs in a fresh
        shell, so a run that works in a directory starts its commands with `cd DIR &&`."""
        return cwdinfer.cd_target(str(c.input.get("command", "")) for s in trajectory.steps for c in s.calls)

    def substitution(self, trajectory: Trajectory) -> str | None:
        return config.substitution(self.native(trajectory))

    def classify(self, call: ToolCall, trajectory: Trajectory) -> tuple[ToolKind, str | None]:
        reason = config.rerun_refusal(self.native(trajectory))
        return ("unknown", reason) if reason else ("rerun", None)

    def sandbox_binds(self, trajectory: Trajectory, dirs: RunDirs) -> dict[str, tuple[Path, bool]]:
        return {AGENT_HOME: (dirs.home, False), **bundle.binds(dirs.work(WORK))}

    def rerunner(
        self, trajectory: Trajectory, sandbox: Sandbox, dirs: RunDirs, budgets: Budgets
    ) -> MiniRerunner:
        return MiniRerunner(trajectory, sandbox, dirs.work(WORK))

    def rebuild(
        self, trajectory: Trajectory, after_step: int, observations: dict[str, Observation], dest: Path
    ) -> Rebuild[MiniSweAgentContinuation]:
        native = self.native(trajectory)
        messages = copy.deepcopy(native_format.prefix_messages(native, after_step))
        for call_id, fresh in observations.items():
            at = native.observation_index.get(call_id)
            if at is None or at >= len(messages):
                continue
            if native.format == "mini-swe-agent-1.1":
                messages[at] = {**messages[at], "content": fresh.content, "extra": fresh.structured}
            else:  # 1.x observations are {role, content} (+ timestamp from 1.16)
                messages[at] = {**messages[at], "content": fresh.content}
                if "timestamp" in messages[at]:
                    stamp = (fresh.structured or {}).get("timestamp", messages[at]["timestamp"])
                    messages[at]["timestamp"] = stamp
        n_calls, cost = native_format.calls_and_cost(messages)
        home = dest / "home"
        path = home / TRAJECTORY
        write_bytes_atomic(
            path, json.dumps(self._document(native, messages, n_calls, cost), indent=2).encode()
        )
        if config.rerun_refusal(native) is None:
            spec = config.companion_spec(native, output_path=f"{AGENT_HOME}/{CONTINUED}")
            write_continue_spec(home, {**spec, "trajectory": f"{AGENT_HOME}/{TRAJECTORY}"})
        if native.format == "mini-swe-agent-1.1":
            expected = native_format.to_wire(messages)
        else:  # what the version that continues sends
            expected = native_format.to_wire_1x(messages, bundle.version())
        return Rebuild(
            native_files=[path],
            expected_prefix=expected,
            agent_home=home,
            continuation=MiniSweAgentContinuation(
                format=native.format, api_calls=n_calls, instance_cost=cost
            ),
        )

    @staticmethod
    def _document(
        native: native_format.Native, messages: list[dict[str, Any]], n_calls: int, cost: float
    ) -> Any:
        if native.format == "bare-list":
            return messages
        doc = copy.deepcopy({k: v for k, v in native.data.items() if k != "messages"})
        info = doc.setdefault("info", {})
        info["model_stats"] = {**info.get("model_stats", {}), "instance_cost": cost, "api_calls": n_calls}
        info["exit_status"] = ""  # the run has not ended at the boundary
        info["submission"] = ""
        doc["messages"] = messages
        return doc

    def continued_prefix(self, result_dir: Path, model: str | None = None) -> list[dict[str, Any]] | None:
        with continued_file(result_dir, TRAJECTORY) as path:
            if path is None:
                return None
            document = json.loads(read_input(path))
        messages = document.get("messages", [])
        if document.get("trajectory_format") == "mini-swe-agent-1":
            version = str(document.get("info", {}).get("mini_version") or bundle.version())
            return native_format.to_wire_1x(messages, version)
        return native_format.to_wire([m for m in messages if m.get("role") != "exit"])

    def chat_tools(self, native: Path) -> list[dict[str, Any]]:
        """The bash tool in tool-call mode; none for the text-based models (actions in the text)."""
        with Folder.open(native) as folder:  # a result's folder: it may be a download
            document = json.loads(folder.read(f"home/{TRAJECTORY}", MAX_INPUT_BYTES))
        if not isinstance(document, dict) or document.get("trajectory_format") != "mini-swe-agent-1.1":
            return []  # 1.x and bare lists: actions in the text
        if document.get("info", {}).get("config", {}).get("model_type") != config.TOOLCALL:
            return []
        return super().chat_tools(native)

    # continuation -------------------------------------------------------------------------
    def gate(
        self, rebuild: Rebuild[MiniSweAgentContinuation], prompt: str | None, keep_prompt: bool
    ) -> ChatPrefixGate:
        appended = [{"role": "user", "content": prompt}] if keep_prompt else []
        return ChatPrefixGate(rebuild.expected_prefix + appended)

    def default_model(self, trajectory: Trajectory) -> str | None:
        return config.model_name(self.native(trajectory))

    def continuation_refusal(self, trajectory: Trajectory, model: str | None) -> str | None:
        return config.continuation_refusal(self.native(trajectory), model)

    def continue_command(self, trajectory: Trajectory, launch: Launch) -> tuple[list[str], dict[str, str]]:
        assert launch.model
        argv = companion_argv("continue", CONTINUE_SPEC_PATH)
        argv += ["--model", launch.model, "--api-base", local_url(launch.port)]
        argv += ["--key", PLACEHOLDER_KEY]
        if launch.max_steps is not None:
            argv += ["--max-steps", str(launch.max_steps)]
        if launch.keep_prompt and launch.prompt is not None:
            argv += ["--prompt", launch.prompt]
        return argv, bundle.base_env()

    def reported_status(self, trajectory: Trajectory, stdout: bytes, continued: Path) -> AgentStatus:
        exit_event = last_event(stdout, "exit")
        return _STATUS.get(str(exit_event.get("exit_status")), "agent_error") if exit_event else "agent_error"

    def finish_continuation(self, ended: Ended[MiniSweAgentContinuation]) -> dict[str, str]:
        return copy_continued(ended.home / CONTINUED, ended.dest, TRAJECTORY, "continued_trajectory")
