"""mini-swe-agent: .traj.json parsing, reruns by the pinned package itself, rebuild, continuation via its Python API."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import orjson

from adapters.base import Launch, Rebuild, copy_continued, stdout_events
from adapters.mini_swe_agent import bundle, config
from adapters.mini_swe_agent import trajectory as native_format
from adapters.mini_swe_agent.rerun import MiniRerunner, companion_argv
from bridges.chat import ChatDialect, ChatPrefixGate
from replayer.io import write_bytes_atomic
from replayer.models import AgentStatus, Budgets, Observation, ToolCall, ToolKind, Trajectory
from replayer.rundirs import RunDirs
from sandboxes.base import Sandbox

TRAJECTORY = "trajectory.traj.json"
CONTINUED = "continued.traj.json"
SPEC = ".replayer/continue.json"
PLACEHOLDER_KEY = "sk-replayer-bridge-placeholder"
"""What the sandboxed agent is given as its key: the bridge injects the real one on the host."""
_STATUS: dict[str, AgentStatus] = {"Submitted": "completed", "LimitsExceeded": "max_steps"}


WORK = "mini"
"""The companion's socket and spec: a folder of the run's state (RunDirs.work)."""


class MiniSweAgentAdapter:
    name = bundle.NAME
    key_env = "OPENAI_API_KEY"
    needs_nonce = False
    takes_task = False
    idle_timeout_s = 300.0
    reruns_own_code = True
    drives_other_versions = False
    oldest_own_version: str | None = "2.0.0"  # the companion drives the 2.x API (execute_actions, exceptions)
    degradable_tools = True

    def detect(self, head: list[Any]) -> bool:
        return native_format.looks_like_mini(head)

    def parse(self, path: Path, task: str | None = None) -> Trajectory:
        traj = native_format.parse(path)
        return traj.model_copy(update={"runs_as": config.runs_as(traj._native)})

    def classify(self, call: ToolCall, trajectory: Trajectory) -> tuple[ToolKind, str | None]:
        reason = config.rerun_refusal(trajectory._native)
        return ("unknown", reason) if reason else ("rerun", None)

    def sandbox_binds(self, trajectory: Trajectory, dirs: RunDirs) -> dict[str, tuple[Path, bool]]:
        return {bundle.HOME: (dirs.home, False), **bundle.binds(dirs.work(WORK))}

    def rerunner(
        self, trajectory: Trajectory, sandbox: Sandbox, dirs: RunDirs, budgets: Budgets
    ) -> MiniRerunner:
        return MiniRerunner(trajectory, sandbox, dirs.work(WORK))

    def rebuild(
        self, trajectory: Trajectory, after_step: int, observations: dict[str, Observation], dest: Path
    ) -> Rebuild:
        native: native_format.Native = trajectory._native
        messages = copy.deepcopy(native_format.prefix_messages(native, after_step))
        for call_id, fresh in observations.items():
            at = native.observation_index.get(call_id)
            if at is None or at >= len(messages):
                continue
            if native.format == "mini-swe-agent-1.1":
                messages[at] = {**messages[at], "content": fresh.content, "extra": fresh.structured}
            else:  # 1.x observations are {role, content, timestamp}
                stamp = (fresh.structured or {}).get("timestamp", messages[at].get("timestamp"))
                messages[at] = {**messages[at], "content": fresh.content, "timestamp": stamp}
        n_calls, cost = native_format.calls_and_cost(messages)
        home = dest / "home"
        path = home / TRAJECTORY
        write_bytes_atomic(
            path, json.dumps(self._document(native, messages, n_calls, cost), indent=2).encode()
        )
        if config.rerun_refusal(native) is None:
            spec = {
                "version": bundle.version(),
                "config": config.companion_config(native, output_path=f"{bundle.HOME}/{CONTINUED}"),
                "trajectory": f"{bundle.HOME}/{TRAJECTORY}",
            }
            write_bytes_atomic(home / SPEC, orjson.dumps(spec, option=orjson.OPT_INDENT_2))
        wire = native_format.to_wire if native.format == "mini-swe-agent-1.1" else native_format.to_wire_1x
        return Rebuild(
            native_files=[path],
            expected_prefix=wire(messages),
            agent_home=home,
            continuation={"format": native.format, "api_calls": n_calls, "instance_cost": cost},
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

    def continued_prefix(self, result_dir: Path) -> list[dict[str, Any]] | None:
        path = result_dir / "continued" / TRAJECTORY
        if not path.is_file():
            return None
        messages = json.loads(path.read_text()).get("messages", [])
        return native_format.to_wire([m for m in messages if m.get("role") != "exit"])

    def chat_tools(self, native: Path) -> list[dict[str, Any]]:
        """The bash tool in tool-call mode; none for the text-based models (actions in the text)."""
        import adapters

        document = json.loads((native / "home" / TRAJECTORY).read_text())
        if not isinstance(document, dict) or document.get("trajectory_format") != "mini-swe-agent-1.1":
            return []  # 1.x and bare lists: actions in the text
        if document.get("info", {}).get("config", {}).get("model_type") != config.TOOLCALL:
            return []
        return list(adapters.recorded_tools(self.name, bundle.version()))

    # continuation -------------------------------------------------------------------------
    def dialect(self) -> ChatDialect:
        return ChatDialect()

    def gate(self, rebuild: Rebuild, prompt: str | None, keep_prompt: bool) -> ChatPrefixGate:
        appended = [{"role": "user", "content": prompt}] if keep_prompt else []
        return ChatPrefixGate(rebuild.expected_prefix + appended)

    def default_model(self, trajectory: Trajectory) -> str | None:
        return config.model_name(trajectory._native)

    def continuation_refusal(self, trajectory: Trajectory, model: str | None) -> str | None:
        return config.continuation_refusal(trajectory._native, model)

    def continue_command(self, trajectory: Trajectory, launch: Launch) -> tuple[list[str], dict[str, str]]:
        assert launch.model
        argv = companion_argv("continue", f"{bundle.HOME}/{SPEC}")
        argv += ["--model", launch.model, "--api-base", f"http://127.0.0.1:{launch.port}/v1"]
        argv += ["--key", PLACEHOLDER_KEY]
        if launch.max_steps is not None:
            argv += ["--max-steps", str(launch.max_steps)]
        if launch.keep_prompt and launch.prompt is not None:
            argv += ["--prompt", launch.prompt]
        return argv, bundle.base_env()

    def continuation_metadata(self, launch: Launch) -> dict[str, Any]:
        return {}

    def reported_status(self, trajectory: Trajectory, stdout: bytes, continued: Path) -> AgentStatus:
        exit_event = next((e for e in reversed(stdout_events(stdout)) if e.get("type") == "exit"), None)
        return _STATUS.get(str(exit_event.get("exit_status")), "agent_error") if exit_event else "agent_error"

    def finish_continuation(
        self,
        trajectory: Trajectory,
        rebuild: Rebuild,
        home: Path,
        dest: Path,
        prompt: str | None,
        keep_prompt: bool,
        sandbox: Sandbox,
    ) -> dict[str, str]:
        return copy_continued(home / CONTINUED, dest, TRAJECTORY, "continued_trajectory")
