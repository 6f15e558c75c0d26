"""OpenHands V0 (openhands-ai 1.6.0 event lists): parsing, reruns by the V0 runtime, the cut event list
and the chat prefix; the continuation replays the cut list through ReplayManager, the runtime answering
each replayed action with its rebuilt observation, then lets the agent go on (no boundary prompt yet)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson

from adapters.base import Launch, Rebuild, copy_continued, stdout_events
from adapters.openhands import bundle, v0
from adapters.openhands.v0_rerun import OpenHandsV0Rerunner, companion_argv
from bridges.chat import ChatDialect, ChatPrefixGate
from replayer.errors import PlanRefused
from replayer.io import Workspace, write_bytes_atomic
from replayer.models import AgentStatus, Budgets, Observation, ToolCall, ToolKind, Trajectory
from sandboxes.base import Sandbox

TRAJECTORY = "trajectory.json"
REPLAY = ".replayer/replay.json"
OBSERVATIONS = ".replayer/observations.json"
SPEC = ".replayer/continue.json"
CONTINUED = ".replayer/continued.json"
PLACEHOLDER_KEY = "sk-replayer-bridge-placeholder"
DEFAULT_MAX_STEPS = 100
RERUN_TOOLS = {"execute_bash", "str_replace_editor"}
"""What the V0 runtime reruns (CodeActAgent's bash and editor; jupyter and browsing are off in the pinned config)."""


class OpenHandsV0Adapter:
    name = bundle.NAME_V0
    key_env = "OPENAI_API_KEY"
    needs_nonce = False
    takes_task = False
    idle_timeout_s = 300.0
    reruns_own_code = True
    drives_other_versions = False
    oldest_own_version: str | None = None
    degradable_tools = False

    def detect(self, head: list[Any]) -> bool:
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

    def sandbox_binds(self, trajectory: Trajectory, agent_home: Path) -> dict[str, tuple[Path, bool]]:
        work = agent_home.parent / "openhands"
        work.mkdir(exist_ok=True)
        return {bundle.HOME: (agent_home, False), **bundle.binds_v0(work)}

    def rerunner(
        self, trajectory: Trajectory, sandbox: Sandbox, workspace: Workspace, budgets: Budgets
    ) -> OpenHandsV0Rerunner:
        return OpenHandsV0Rerunner(trajectory, sandbox, workspace.root.parent / "openhands", budgets)

    def rebuild(
        self, trajectory: Trajectory, after_step: int, observations: dict[str, Observation], dest: Path
    ) -> Rebuild:
        native: v0.NativeV0 = trajectory._native
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
            "replay": f"{bundle.HOME}/{REPLAY}",
            "observations": f"{bundle.HOME}/{OBSERVATIONS}",
            "save": f"{bundle.HOME}/{CONTINUED}",
        }
        write_bytes_atomic(home / SPEC, orjson.dumps(spec, option=orjson.OPT_INDENT_2))
        return Rebuild(native_files=[path], expected_prefix=v0.to_messages(events), agent_home=home)

    def continued_prefix(self, result_dir: Path) -> list[dict[str, Any]] | None:
        path = result_dir / "continued" / TRAJECTORY
        if not path.is_file():
            return None
        return v0.to_messages(v0.parse(path)._native.events)

    def chat_tools(self, native: Path) -> list[dict[str, Any]]:
        import adapters

        # adapters/openhands/data/<V0 version>/: one data folder for both formats
        return list(adapters.recorded_tools(bundle.NAME, bundle.version(bundle.NAME_V0)))

    # continuation -----------------------------------------------------------------------------
    def dialect(self) -> ChatDialect:
        return ChatDialect()

    def gate(self, rebuild: Rebuild, prompt: str | None, keep_prompt: bool) -> ChatPrefixGate:
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
            "continue", trajectory.cwd, f"{bundle.HOME}/{SPEC}", str(launch.max_steps or DEFAULT_MAX_STEPS)
        )
        env = {
            **bundle.v0_env(),
            "LLM_MODEL": launch.model,
            "LLM_BASE_URL": f"http://127.0.0.1:{launch.port}/v1",
            "LLM_API_KEY": PLACEHOLDER_KEY,
        }
        return argv, env

    def continuation_metadata(self, launch: Launch) -> dict[str, Any]:
        return {"max_iterations_after_replay": launch.max_steps or DEFAULT_MAX_STEPS}

    def reported_status(self, trajectory: Trajectory, stdout: bytes, continued: Path) -> AgentStatus:
        end = next((e for e in reversed(stdout_events(stdout)) if e.get("type") == "exit"), None)
        if end is None:
            return "agent_error"
        if end.get("status") == "finished":
            return "completed"
        if "maximum iteration" in str(end.get("error") or "").lower():
            return "max_steps"
        return "agent_error"

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
