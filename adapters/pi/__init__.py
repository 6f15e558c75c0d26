"""Pi: event logs (json and rpc modes) and session files; reruns with Pi's own tools; SDK continuation."""

from __future__ import annotations

import copy
import datetime
import uuid
from itertools import chain
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
    continued_file,
    copy_continued,
    first_time,
    provider_model_refusal,
    stdout_events,
    write_continue_spec,
)
from replayer.adapters.forms import NativeForm
from replayer.adapters.pi import bundle, session
from replayer.adapters.pi.rerun import PiRerunner
from replayer.adapters.pi.wire import js_json, to_wire
from replayer.adapters.sandbox_paths import AGENT_HOME, BRIDGE_URL, CONTINUE_SPEC_PATH, local_url
from replayer.bridges.chat import SystemPerRequestGate
from replayer.floor.io import write_bytes_atomic
from replayer.floor.limits import Budgets
from replayer.floor.results import AgentStatus
from replayer.floor.rundirs import RunDirs
from replayer.floor.trajectory import Observation, ToolCall, ToolKind, Trajectory
from replayer.sandboxes.base import Sandbox

TOOLS = frozenset({"read", "bash", "edit", "write"})
"""Pi's default tools, rerun by the pinned package's own implementations; no other tool is replayed."""
CONTINUED = "session.jsonl"


WORK = "pi"
"""The companion's socket: a folder of the run's state (RunDirs.work)."""


def _model(native: session.Native) -> tuple[str, str]:
    return native.model or ("replayer", "replayed-model")


def _launched(native: session.Native) -> str:
    """The model a continuation of `native` runs by default (`--model` overrides it): provider/model."""
    return "/".join(_model(native))


def _sent(native: session.Native, model: str, version: str) -> list[dict[str, Any]]:
    """The conversation of `native` as Pi `version` sends it to `model` (provider/id)."""
    return to_wire(native.messages, version, bundle.target(model))


def _boundary_entries(native: session.Native, trajectory: Trajectory, after_step: int) -> int:
    """How many branch entries the prefix keeps: through the last tool result of step `after_step`."""
    if after_step == 0:  # every entry before the first step's assistant message
        first = {c.id for c in trajectory.steps[0].calls} if trajectory.steps else set()
        return next(
            (at for at, e in enumerate(native.entries) if first & _call_ids(e.get("message"))),
            len(native.entries),
        )
    ids = {c.id for c in trajectory.steps[after_step - 1].calls}
    last = max(
        at
        for at, e in enumerate(native.entries)
        if e.get("type") == "message" and (e.get("message") or {}).get("toolCallId") in ids
    )
    return last + 1


def _call_ids(message: Any) -> set[str]:
    if not isinstance(message, dict) or message.get("role") != "assistant":
        return set()
    blocks = message.get("content") or []
    return {str(b.get("id")) for b in blocks if isinstance(b, dict) and b.get("type") == "toolCall"}


def _context_prefix(native: session.Native, keep: int) -> list[dict[str, Any]]:
    """The messages Pi builds for the branch cut after `keep` entries (compactions included)."""
    return session.context_messages(native.entries[:keep])


def _fresh(message: dict[str, Any], observations: dict[str, Observation]) -> dict[str, Any]:
    fresh = observations.get(message.get("toolCallId", "")) if message.get("role") == "toolResult" else None
    return fresh.structured if fresh is not None and isinstance(fresh.structured, dict) else message


class PiContinuation(Continuation):
    session_file: str
    """The rebuilt session file, relative to the agent home."""
    model: str
    """provider/model"""


class PiAdapter(Adapter[session.Native, PiContinuation]):
    continuation_type = PiContinuation
    native_type = session.Native
    name = bundle.NAME
    oldest_inferred_release = "0.32.3"
    probe_native = "session.jsonl"
    probe_recordings = ("pi/tools", "pi/versions/*/probe")
    probe_shell = {"bash": {"command": COMMAND, "description": "Probe command"}}
    probe_read = {"read": {"path": PATH}}

    forms = (
        NativeForm(
            "session file",
            session.looks_like_session,
            "every release: ~/.pi/agent/sessions/*/*.jsonl (v1-v3)",
        ),
        NativeForm("event output", session.looks_like_events, "`pi --mode json` and `--mode rpc` output"),
    )

    def parse(self, path: Path, task: str | None = None) -> Trajectory:
        traj = session.parse(path)
        if traj.session_id is None:  # an rpc log has no header: a stable id from its content
            native = self.native(traj)
            sid = str(uuid.UUID(traj.source_sha256[:32]))
            native.header = {**native.header, "id": sid}
            traj = traj.model_copy(update={"session_id": sid})
            traj.keep_native(native)
        return traj

    def first_timestamp(self, trajectory: Trajectory) -> datetime.datetime | None:
        native = self.native(trajectory)
        return first_time(
            chain([native.header.get("timestamp")], (e.get("timestamp") for e in native.entries))
        )

    def classify(self, call: ToolCall, trajectory: Trajectory) -> tuple[ToolKind, str | None]:
        if call.tool in TOOLS:
            return "rerun", None
        return (
            "unknown",
            f"unknown tool {call.tool!r} (Pi's tool semantics are the contract: only {', '.join(sorted(TOOLS))})",
        )

    def sandbox_binds(self, trajectory: Trajectory, dirs: RunDirs) -> dict[str, tuple[Path, bool]]:
        return {AGENT_HOME: (dirs.home, False), **bundle.sandbox_binds(dirs.work(WORK))}

    def rerunner(
        self, trajectory: Trajectory, sandbox: Sandbox, dirs: RunDirs, budgets: Budgets
    ) -> PiRerunner:
        provider, model = _model(self.native(trajectory))
        bundle.write_config(dirs.home, provider, model, "http://127.0.0.1:9/v1", compaction=False)
        return PiRerunner(trajectory, sandbox, dirs.work(WORK), budgets)

    def rebuild(
        self, trajectory: Trajectory, after_step: int, observations: dict[str, Observation], dest: Path
    ) -> Rebuild[PiContinuation]:
        native = self.native(trajectory)
        header = {**native.header, "version": 3}
        keep = _boundary_entries(native, trajectory, after_step)
        entries = [
            {**e, "message": _fresh(e["message"], observations)} if e.get("type") == "message" else e
            for e in copy.deepcopy(native.entries[:keep])
        ]
        home = dest / "home"
        stamp = str(header.get("timestamp") or "1970-01-01T00:00:00.000Z").replace(":", "-").replace(".", "-")
        sessions = home / ".pi" / "agent" / "sessions" / bundle.session_dir(trajectory.cwd or "/")
        path = sessions / f"{stamp}_{header['id']}.jsonl"
        write_bytes_atomic(path, b"".join(js_json(r).encode() + b"\n" for r in [header, *entries]))
        provider, model = _model(native)
        bundle.write_config(home, provider, model, BRIDGE_URL)  # the companion renames it to --model's
        container_path = f"{AGENT_HOME}/{path.relative_to(home)}"
        spec = {"cwd": trajectory.cwd, "agent_dir": bundle.AGENT_DIR, "session_file": container_path}
        write_continue_spec(home, spec)
        prefix = [_fresh(m, observations) for m in _context_prefix(native, keep)]
        return Rebuild(
            native_files=[path],
            # as sent to the continuation's model (`gate_facts`: another one given with --model)
            expected_prefix=to_wire(prefix, bundle.version(), bundle.target(_launched(native))),
            agent_home=home,
            continuation=PiContinuation(
                session_file=str(path.relative_to(home)), model=f"{provider}/{model}"
            ),
        )

    def continued_prefix(self, result_dir: Path, model: str | None = None) -> list[dict[str, Any]] | None:
        with continued_file(result_dir, CONTINUED) as path:
            if path is None:
                return None
            continued = self.native(session.parse(path))
        return _sent(continued, model or _launched(continued), self.version())

    def gate_facts(
        self,
        box: Sandbox,
        trajectory: Trajectory,
        rebuild: Rebuild[PiContinuation],
        model: str | None,
        boundary_prompt: str | None = None,
    ) -> Rebuild[PiContinuation]:
        """The prefix as sent to a model other than the session's (`--model`): pi-ai's `transformMessages`
        sends another model's thinking as text, its own under its signature."""
        default = _launched(self.native(trajectory))
        if model is None or bundle.target(model) == bundle.target(default):
            return rebuild
        rebuilt = self.native(session.parse(rebuild.native_files[0]))
        return rebuild.model_copy(update={"expected_prefix": _sent(rebuilt, model, self.version())})

    # continuation -----------------------------------------------------------------------------
    def gate(
        self, rebuild: Rebuild[PiContinuation], prompt: str | None, keep_prompt: bool
    ) -> SystemPerRequestGate:
        appended = {"role": "user", "content": [{"type": "text", "text": prompt}]} if keep_prompt else None
        return SystemPerRequestGate(rebuild.expected_prefix, appended, strip_appended=False)

    def default_model(self, trajectory: Trajectory) -> str | None:
        return _launched(self.native(trajectory))

    def continuation_refusal(self, trajectory: Trajectory, model: str | None) -> str | None:
        return provider_model_refusal("Pi", model)

    def continue_command(self, trajectory: Trajectory, launch: Launch) -> tuple[list[str], dict[str, str]]:
        assert launch.model
        argv = bundle.companion_argv("continue", CONTINUE_SPEC_PATH, "--model", launch.model)
        if launch.keep_prompt and launch.prompt is not None:
            argv += ["--prompt", launch.prompt]
        env = {**bundle.base_env(), "REPLAYER_PI_BASE_URL": local_url(launch.port)}
        return argv, env

    def reported_status(self, trajectory: Trajectory, stdout: bytes, continued: Path) -> AgentStatus:
        ends = [e for e in stdout_events(stdout) if e.get("type") == "agent_end"]
        if not ends:
            return "agent_error"
        assistants = [m for m in ends[-1].get("messages", []) if m.get("role") == "assistant"]
        return "completed" if assistants and assistants[-1].get("stopReason") == "stop" else "agent_error"

    def finish_continuation(self, ended: Ended[PiContinuation]) -> dict[str, str]:
        continued = ended.home / ended.rebuild.continuation.session_file
        return copy_continued(continued, ended.dest, CONTINUED, "continued_session")
