"""OpenHands V1 (openhands-sdk conversation directories): parsing, reruns by the SDK's own tools, rebuild
of the conversation directory, continuation of the pinned SDK through the chat bridge."""

from __future__ import annotations

import datetime
import shutil
from pathlib import Path
from typing import Any

from replayer.adapters.base import (
    COMMAND,
    PATH,
    Adapter,
    Continuation,
    Ended,
    Launch,
    Rebuild,
    first_time,
    last_event,
    write_continue_spec,
)
from replayer.adapters.forms import NativeForm
from replayer.adapters.head import ConversationDir
from replayer.adapters.openhands import bundle, rebuild
from replayer.adapters.openhands import session as conversation
from replayer.adapters.openhands.rerun import OpenHandsRerunner, companion_argv
from replayer.adapters.openhands.shell import SHELL_PATH
from replayer.adapters.openhands.wire import to_messages
from replayer.adapters.sandbox_paths import AGENT_HOME, CONTINUE_SPEC_PATH, PLACEHOLDER_KEY, local_url
from replayer.bridges.chat import ChatPrefixGate
from replayer.floor.foreign import Folder
from replayer.floor.limits import Budgets
from replayer.floor.results import AgentStatus
from replayer.floor.rundirs import RunDirs
from replayer.floor.trajectory import Observation, ToolCall, ToolKind, Trajectory
from replayer.sandboxes.base import Sandbox

TOOLS = {"terminal", "file_editor", "task_tracker", "think"}
"""The default CLI-mode tools the companion can rebuild (finish ends the run, so no boundary follows it)."""
_STATUS: dict[str, AgentStatus] = {"finished": "completed", "max_iterations": "max_steps"}
"""The companion's exit status (the SDK's execution status; max_iterations: its iteration budget ended it)."""


class OpenHandsContinuation(Continuation):
    conversation: str
    """The rebuilt conversation directory, relative to the agent home."""


class OpenHandsAdapter(Adapter[conversation.Native, OpenHandsContinuation]):
    continuation_type = OpenHandsContinuation
    native_type = conversation.Native
    name = bundle.NAME
    oldest_inferred_release = "1.26.0"
    probe_native = "conversation"
    probe_recordings = ("openhands/v1", "openhands/versions/*/probe")
    probe_shell = {"terminal": {"command": COMMAND}}
    probe_read = {"file_editor": {"command": "view", "path": PATH}}
    probe_finish = ("finish", {"message": "done"})

    forms = (
        NativeForm(
            "conversation folder",
            lambda head: bool(head) and isinstance(head[0], ConversationDir),
            "the V1 SDK's persisted conversation: base_state.json and events/",
        ),
    )

    def parse(self, path: Path, task: str | None = None) -> Trajectory:
        return conversation.parse(path)

    def first_timestamp(self, trajectory: Trajectory) -> datetime.datetime | None:
        return first_time(e.get("timestamp") for e in self.native(trajectory).events)

    def own_text(self, tool: str, text: str) -> str | None:
        return conversation.own_text(text)

    def classify(self, call: ToolCall, trajectory: Trajectory) -> tuple[ToolKind, str | None]:
        if call.tool in TOOLS:
            return "rerun", None
        if call.tool == "finish":
            return "pure", None
        return "unknown", f"unknown tool {call.tool!r} (rerun by the SDK: only {', '.join(sorted(TOOLS))})"

    def sandbox_binds(self, trajectory: Trajectory, dirs: RunDirs) -> dict[str, tuple[Path, bool]]:
        return {AGENT_HOME: (dirs.home, False), **bundle.binds(dirs.work(bundle.WORK))}

    def rerunner(
        self, trajectory: Trajectory, sandbox: Sandbox, dirs: RunDirs, budgets: Budgets
    ) -> OpenHandsRerunner:
        return OpenHandsRerunner(trajectory, sandbox, dirs.work(bundle.WORK), budgets)

    def rebuild(
        self, trajectory: Trajectory, after_step: int, observations: dict[str, Observation], dest: Path
    ) -> Rebuild[OpenHandsContinuation]:
        native = self.native(trajectory)
        home = dest / "home"
        events = rebuild.prefix_events(trajectory, after_step, observations)
        files = rebuild.write(trajectory, after_step, events, home)
        conv = rebuild.conversation_dir(home, native)
        spec = {
            "persistence_dir": f"{AGENT_HOME}/{conv.relative_to(home)}",
            "persistence_parent": f"{AGENT_HOME}/{rebuild.CONVERSATIONS}",
            "conversation_id": str(native.base_state["id"]),
            "cwd": trajectory.cwd,
            "shell": SHELL_PATH,
        }
        write_continue_spec(home, spec)
        return Rebuild(
            native_files=files,
            expected_prefix=to_messages(events),
            agent_home=home,
            continuation=OpenHandsContinuation(conversation=str(conv.relative_to(home))),
        )

    def continued_prefix(self, result_dir: Path, model: str | None = None) -> list[dict[str, Any]] | None:
        with Folder.open(result_dir) as results:  # a results folder may be a download: no link followed
            if results.kind(f"continued/conversation/{conversation.BASE_STATE}") != "file":
                return None
            with results.sub("continued/conversation") as folder:
                return to_messages(conversation.read_events(folder.pinned_path, _NoDigest()))

    # continuation -----------------------------------------------------------------------------
    def gate(
        self, rebuild: Rebuild[OpenHandsContinuation], prompt: str | None, keep_prompt: bool
    ) -> ChatPrefixGate:
        appended = [{"role": "user", "content": [{"type": "text", "text": prompt}]}] if keep_prompt else []
        return ChatPrefixGate(rebuild.expected_prefix + appended)

    def default_model(self, trajectory: Trajectory) -> str | None:
        model = ((self.native(trajectory).base_state.get("agent") or {}).get("llm") or {}).get("model")
        return str(model) if model else None

    def continuation_refusal(self, trajectory: Trajectory, model: str | None) -> str | None:
        if not model:
            return "the conversation names no model; pass --model"
        return None

    def continue_command(self, trajectory: Trajectory, launch: Launch) -> tuple[list[str], dict[str, str]]:
        assert launch.model
        argv = companion_argv("continue", CONTINUE_SPEC_PATH, "--model", launch.model)
        argv += ["--base-url", local_url(launch.port), "--key", PLACEHOLDER_KEY]
        if launch.max_steps is not None:
            argv += ["--max-steps", str(launch.max_steps)]
        if launch.keep_prompt and launch.prompt is not None:
            argv += ["--prompt", launch.prompt]
        return argv, bundle.base_env()

    def continuation_metadata(
        self, launch: Launch, rebuild: Rebuild[OpenHandsContinuation]
    ) -> dict[str, Any]:
        return {"max_iterations": launch.max_steps}

    def reported_status(self, trajectory: Trajectory, stdout: bytes, continued: Path) -> AgentStatus:
        end = last_event(stdout, "exit")
        if end is None:
            return "agent_error"
        return _STATUS.get(str(end.get("status")), "agent_error")

    def finish_continuation(self, ended: Ended[OpenHandsContinuation]) -> dict[str, str]:
        continued = ended.home / ended.rebuild.continuation.conversation
        if not (continued / conversation.BASE_STATE).is_file():
            return {}
        shutil.copytree(
            continued, ended.dest / "conversation", ignore=shutil.ignore_patterns(".eventlog.lock")
        )
        return {"continued_conversation": "continued/conversation"}


class _NoDigest:
    def update(self, data: bytes) -> None:
        pass
