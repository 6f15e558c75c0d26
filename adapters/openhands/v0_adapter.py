"""OpenHands V0 (openhands-ai 1.6.0 event lists): parsing, reruns by the V0 runtime, the cut event list
and the chat prefix; the continuation replays the cut list through ReplayManager, the runtime answering
each replayed action with its rebuilt observation, then lets the agent go on (no boundary prompt yet)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson

from adapters.base import (
    COMMAND,
    PATH,
    Adapter,
    Ended,
    Launch,
    NoContinuation,
    Rebuild,
    continued_file,
    copy_continued,
    last_event,
    recorded_tools,
    write_continue_spec,
)
from adapters.openhands import bundle, v0
from adapters.openhands.v0_rerun import OpenHandsV0Rerunner, companion_argv
from adapters.sandbox_paths import AGENT_HOME, CONTINUE_SPEC_PATH, PLACEHOLDER_KEY, local_url
from bridges.chat import ChatPrefixGate
from replayer.errors import PlanRefused
from replayer.io import write_bytes_atomic
from replayer.models import AgentStatus, Budgets, Observation, ToolCall, ToolKind, Trajectory
from replayer.rundirs import RunDirs
from sandboxes.base import Sandbox

TRAJECTORY = "trajectory.json"
REPLAY = ".replayer/replay.json"
OBSERVATIONS = ".replayer/observations.json"
CONTINUED = ".replayer/continued.json"
DEFAULT_MAX_STEPS = 100
RERUN_TOOLS = {"execute_bash", "str_replace_editor"}
"""What the V0 runtime reruns (CodeActAgent's bash and editor; jupyter and browsing are off in the pinned config)."""


class OpenHandsV0Adapter(Adapter[v0.NativeV0, NoContinuation]):
    continuation_type = NoContinuation
    native_type = v0.NativeV0
    name = bundle.NAME_V0
    probe_native = "trajectory.json"
    probe_recordings = ("openhands/v0",)
    probe_shell = {"execute_bash": {"command": COMMAND, "security_risk": "LOW"}}
    probe_read = {"str_replace_editor": {"command": "view", "path": PATH, "security_risk": "LOW"}}
    probe_finish = ("finish", {"message": "done"})

    @classmethod
    def detect(cls, head: list[Any]) -> bool:
        return v0.looks_like_v0(head)

    def parse(self, path: Path, task: str | None = None) -> Trajectory:
        return v0.parse(path)

    def classify(self, call: ToolCall, trajectory: Trajectory) -> tuple[ToolKind, str | None]:
        if call.tool in ("finish", "think"):
            return "pure", None
        if call.tool in RERUN_TOOLS:
            return "rerun", None
        return (
            "unknown",
            f"unknown tool {call.tool!r} (rerun by the V0 runtime: only {', '.join(sorted(RERUN_TOOLS))})",
        )

    def sandbox_binds(self, trajectory: Trajectory, dirs: RunDirs) -> dict[str, tuple[Path, bool]]:
        return {AGENT_HOME: (dirs.home, False), **bundle.binds_v0(dirs.work(bundle.WORK))}

    def rerunner(
        self, trajectory: Trajectory, sandbox: Sandbox, dirs: RunDirs, budgets: Budgets
    ) -> OpenHandsV0Rerunner:
        return OpenHandsV0Rerunner(trajectory, sandbox, dirs.work(bundle.WORK), budgets)

    def rebuild(
        self, trajectory: Trajectory, after_step: int, observations: dict[str, Observation], dest: Path
    ) -> Rebuild[NoContinuation]:
        native = self.native(trajectory)
        events = copy.deepcopy(native.events[: native.step_end(after_step)])
        for call_id, fresh in observations.items():
            at = native.observation_of.get(call_id)
            if at is not None and at < len(events) and isinstance(fresh.structured, dict):
                events[at] = {**copy.deepcopy(fresh.structured), "id": events[at].get("id")}
        for step in trajectory.steps[:after_step]:
            if step.message_id.startswith("action-"):
                raise PlanRefused(
                    f"step {step.index} has no tool_call_metadata: its model message is unknown"
                )
        home = dest / "home"
        path = home / TRAJECTORY
        document: Any = {**native.wrapper, "history": events} if native.wrapper is not None else events
        write_bytes_atomic(path, orjson.dumps(document, option=orjson.OPT_INDENT_2))
        # What the continuation replays: the cut list without the system event (the agent makes its own)
        # and without recall actions (the task's recall is made again), as ReplayManager needs it.
        replay = [e for e in events if e.get("action") not in ("system", "recall")]
        write_bytes_atomic(home / REPLAY, orjson.dumps(replay))
        rebuilt = {c: events[i] for c, i in native.observation_of.items() if i < len(events)}
        write_bytes_atomic(home / OBSERVATIONS, orjson.dumps(rebuilt))
        spec = {
            "replay": f"{AGENT_HOME}/{REPLAY}",
            "observations": f"{AGENT_HOME}/{OBSERVATIONS}",
            "save": f"{AGENT_HOME}/{CONTINUED}",
        }
        write_continue_spec(home, spec)
        return Rebuild(
            native_files=[path],
            expected_prefix=v0.to_messages(events),
            agent_home=home,
            continuation=NoContinuation(),
        )

    def continued_prefix(self, result_dir: Path) -> list[dict[str, Any]] | None:
        path = continued_file(result_dir, TRAJECTORY)
        if path is None:
            return None
        return v0.to_messages(self.native(v0.parse(path)).events)

    def chat_tools(self, native: Path) -> list[dict[str, Any]]:
        # adapters/openhands/data/<V0 version>/: one data folder for both formats
        return list(recorded_tools(bundle.NAME, self.version()))

    # continuation -----------------------------------------------------------------------------
    def gate(self, rebuild: Rebuild[NoContinuation], prompt: str | None, keep_prompt: bool) -> ChatPrefixGate:
        # The agent always sends its own system message first (AgentController._add_system_message, from
        # its prompt templates); a file without a system event has none in the prefix to hold it to.
        prefix = rebuild.expected_prefix
        recorded = bool(prefix) and prefix[0].get("role") == "system"
        return ChatPrefixGate(prefix, system_from_agent=not recorded)

    def default_model(self, trajectory: Trajectory) -> str | None:
        return None  # the event list names the served model, not the LiteLLM route

    def continuation_refusal(self, trajectory: Trajectory, model: str | None) -> str | None:
        if not model:
            return "a V0 trajectory names no LiteLLM model; pass --model (e.g. openai/<model>)"
        return None

    def continue_command(self, trajectory: Trajectory, launch: Launch) -> tuple[list[str], dict[str, str]]:
        assert launch.model and trajectory.cwd
        if launch.keep_prompt:
            raise PlanRefused("a boundary prompt is not supported for V0 continuations yet")
        argv = companion_argv(
            "continue", trajectory.cwd, CONTINUE_SPEC_PATH, str(launch.max_steps or DEFAULT_MAX_STEPS)
        )
        env = {
            **bundle.v0_env(),
            "LLM_MODEL": launch.model,
            "LLM_BASE_URL": local_url(launch.port),
            "LLM_API_KEY": PLACEHOLDER_KEY,
        }
        return argv, env

    def continuation_metadata(self, launch: Launch) -> dict[str, Any]:
        return {"max_iterations_after_replay": launch.max_steps or DEFAULT_MAX_STEPS}

    def reported_status(self, trajectory: Trajectory, stdout: bytes, continued: Path) -> AgentStatus:
        end = last_event(stdout, "exit")
        if end is None:
            return "agent_error"
        if end.get("status") == "finished":
            return "completed"
        if "maximum iteration" in str(end.get("error") or "").lower():
            return "max_steps"
        return "agent_error"

    def finish_continuation(self, ended: Ended[NoContinuation]) -> dict[str, str]:
        return copy_continued(ended.home / CONTINUED, ended.dest, TRAJECTORY, "continued_trajectory")
