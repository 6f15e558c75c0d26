"""Gemini CLI: session files (0.61 JSONL logs, 0.30 JSON documents), reruns by the CLI itself, continuation;
a release before 0.39 is given its session as one JSON document and resumes it its own way."""

from __future__ import annotations

import copy
import datetime
import re
from collections.abc import Callable
from itertools import chain
from pathlib import Path, PurePosixPath
from typing import Any

import orjson

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
)
from replayer.adapters.forms import NativeForm
from replayer.adapters.gemini_cli import bundle, grep_backend, session, wire
from replayer.adapters.gemini_cli.gate import GeminiResumeGate
from replayer.adapters.gemini_cli.rerun import WORK_MOUNT, GeminiRerunner
from replayer.bridges.gemini import GeminiDialect, ScriptedGemini, tools_to_chat
from replayer.bridges.sidecalls import PROBE, SideCall
from replayer.floor.divergence import COMMON
from replayer.floor.io import write_bytes_atomic
from replayer.floor.limits import Budgets
from replayer.floor.results import AgentStatus
from replayer.floor.rundirs import RunDirs
from replayer.floor.trajectory import Observation, ToolCall, ToolKind, Trajectory
from replayer.sandboxes.base import Sandbox

TOOLS = frozenset(
    {"read_file", "run_shell_command", "replace", "write_file", "list_directory", "glob", "grep_search"}
)
"""The workspace tools the pinned CLI reruns itself; web, agent, memory and plan tools are not replayed."""
CONTINUED = "session"
RAW = "session.raw"
DEFAULT_MODEL = "gemini-2.5-flash"
WORK = "gemini"


def boundary(native: session.Native, trajectory: Trajectory, after_step: int) -> int:
    """How many messages the prefix keeps: through the responses to step `after_step`'s calls (after_step 0:
    every message before the first step's model turn)."""
    at_of = {m["id"]: at for at, m in enumerate(native.messages)}
    if after_step == 0:
        return at_of[trajectory.steps[0].message_id] if trajectory.steps else len(native.messages)
    keep = at_of[trajectory.steps[after_step - 1].message_id] + 1
    while keep < len(native.messages) and session.response_parts(native.messages[keep]):
        keep += 1
    return keep


def project_slug(cwd: str) -> str:
    """The CLI's `ProjectRegistry.slugify` of the folder's name: its `projects.json` takes only `[a-z0-9-]+`
    (0.61 resets a registry with any other name, then looks in a folder of its own)."""
    slug = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", (PurePosixPath(cwd).name or "project").lower()))
    return slug.strip("-") or "project"


def with_fresh(message: dict[str, Any], observations: dict[str, Observation]) -> dict[str, Any]:
    """`message` with each call's result and each functionResponse replaced by the fresh one of its id."""

    def fresh(response: Any) -> Any:
        if not isinstance(response, dict):
            return response
        obs = observations.get(str(response.get("id")))
        return obs.structured if obs is not None and isinstance(obs.structured, dict) else response

    out = copy.deepcopy(message)
    for call in out.get("toolCalls") or []:
        if isinstance(call.get("result"), list):
            call["result"] = [
                {**p, "functionResponse": fresh(p["functionResponse"])} if "functionResponse" in p else p
                for p in call["result"]
            ]
    if out.get("type") == "user" and isinstance(out.get("content"), list):
        out["content"] = [
            {**p, "functionResponse": fresh(p["functionResponse"])}
            if isinstance(p, dict) and "functionResponse" in p
            else p
            for p in out["content"]
        ]
    return out


def native_form() -> tuple[str, Callable[[dict[str, Any], list[dict[str, Any]]], bytes]]:
    """The running version's session file extension and writer: an append log, or (before 0.39) one document."""
    return ("jsonl", session.to_log) if bundle.writes_log() else ("json", session.to_document)


def without_nonce(continued: Path, dest: Path, prompt: str) -> dict[str, str]:
    """continued/session.jsonl (.json for a document release): the messages the continued session resolves
    to, without the nonce prompt and the CLI's closing turn (the upstream saw neither; the CLI writes the
    closing turn only when a later history sync catches it); continued/session.raw.jsonl: the file as the
    CLI left it."""
    ext, write = native_form()
    raw = continued.read_bytes()
    write_bytes_atomic(dest / f"{RAW}.{ext}", raw)
    native = session.load(raw, continued)
    stripped = {("user", prompt), ("gemini", wire.INTERRUPTED)}
    kept = [
        m
        for m in native.messages
        if (m.get("type"), wire.part_text(m.get("content")).strip()) not in stripped
    ]
    write_bytes_atomic(dest / f"{CONTINUED}.{ext}", write(native.metadata, kept))
    return {
        "continued_session": f"continued/{CONTINUED}.{ext}",
        "continued_session_raw": f"continued/{RAW}.{ext}",
    }


class GeminiCliContinuation(Continuation):
    session_file: str
    """The rebuilt session file, relative to the agent home."""
    session_id: str


class GeminiCliAdapter(Adapter[session.Native, GeminiCliContinuation]):
    continuation_type = GeminiCliContinuation
    output_normalizers = (*COMMON, "process_ids")
    walk_order_tools = frozenset({"glob", "grep_search"})
    native_type = session.Native
    name = bundle.NAME
    oldest_inferred_release = "0.34.0"
    key_env = "GEMINI_API_KEY"
    needs_nonce = True
    side_calls = (
        PROBE,
        # model routing and "who speaks next" checks: a small model, no tools, a JSON schema
        SideCall(
            name="generate", path=r"/v1(beta)?/models/[^/]+:generateContent", tools=False, max_tokens=65_536
        ),
        SideCall(name="count_tokens", path=r"/v1(beta)?/models/[^/]+:countTokens"),
    )
    """`gemini --resume` continues only with a new prompt."""
    probe_native = "session.jsonl"
    probe_recordings = ("gemini_cli/shell",)
    probe_shell = {"run_shell_command": {"command": COMMAND, "description": "Probe command"}}
    probe_read = {"read_file": {"file_path": PATH}}

    forms = (
        NativeForm("chat log", session.looks_like_log, "the JSONL chat recording of the later releases"),
        NativeForm(
            "chat document", session.looks_like_document, "the JSON chat file of the earlier releases"
        ),
    )

    def parse(self, path: Path, task: str | None = None) -> Trajectory:
        return session.parse(path)

    def first_timestamp(self, trajectory: Trajectory) -> datetime.datetime | None:
        native = self.native(trajectory)
        return first_time(
            chain([native.metadata.get("startTime")], (m.get("timestamp") for m in native.messages))
        )

    def own_text(self, tool: str, text: str) -> str | None:
        return session.own_text(tool, text)

    def classify(self, call: ToolCall, trajectory: Trajectory) -> tuple[ToolKind, str | None]:
        if call.tool in TOOLS:
            return "rerun", None
        return "unknown", f"unknown tool {call.tool!r} (only {', '.join(sorted(TOOLS))} are rerun)"

    def sandbox_binds(self, trajectory: Trajectory, dirs: RunDirs) -> dict[str, tuple[Path, bool]]:
        return {bundle.HOME: (dirs.home, False), WORK_MOUNT: (dirs.work(WORK), False), **bundle.binds()}

    def rerunner(
        self, trajectory: Trajectory, sandbox: Sandbox, dirs: RunDirs, budgets: Budgets
    ) -> GeminiRerunner:
        bundle.write_settings(
            dirs.home, grep_backend.settings(grep_backend.recorded_backend(trajectory.steps))
        )
        return GeminiRerunner(trajectory, sandbox, dirs.work(WORK), budgets)

    def rebuild(
        self, trajectory: Trajectory, after_step: int, observations: dict[str, Observation], dest: Path
    ) -> Rebuild[GeminiCliContinuation]:
        native = self.native(trajectory)
        keep = boundary(native, trajectory, after_step)
        messages = [with_fresh(m, observations) for m in native.messages[:keep]]
        meta = native.metadata
        sid = str(meta["sessionId"])
        home = dest / "home"
        cwd = trajectory.cwd or "/"
        project = project_slug(cwd)
        stamp = str(meta.get("startTime") or "1970-01-01T00:00:00.000Z")[:16].replace(":", "-")
        ext, write = native_form()
        path = home / ".gemini" / "tmp" / project / "chats" / f"session-{stamp}-{sid[:8]}.{ext}"
        write_bytes_atomic(path, write(meta, messages))
        projects = {"projects": {cwd: project}}
        write_bytes_atomic(
            home / ".gemini" / "projects.json", orjson.dumps(projects, option=orjson.OPT_INDENT_2)
        )
        bundle.write_settings(home, grep_backend.settings(grep_backend.recorded_backend(trajectory.steps)))
        return Rebuild(
            native_files=[path],
            expected_prefix=wire.resume_contents(messages, bundle.resume_rules()),
            agent_home=home,
            continuation=GeminiCliContinuation(session_file=str(path.relative_to(home)), session_id=sid),
        )

    def continued_prefix(self, result_dir: Path, model: str | None = None) -> list[dict[str, Any]] | None:
        with continued_file(result_dir, f"{CONTINUED}.{native_form()[0]}") as path:
            if path is None:
                return None
            return wire.resume_contents(self.native(session.parse(path)).messages, bundle.resume_rules())

    def chat_tools(self, native: Path) -> list[dict[str, Any]]:
        return tools_to_chat(super().chat_tools(native))

    # continuation -----------------------------------------------------------------------------
    def dialect(self) -> GeminiDialect:
        return GeminiDialect()

    def probe_upstream(self) -> type[ScriptedGemini]:
        return ScriptedGemini

    def gate(
        self, rebuild: Rebuild[GeminiCliContinuation], prompt: str | None, keep_prompt: bool
    ) -> GeminiResumeGate:
        return GeminiResumeGate(
            rebuild.expected_prefix, prompt, strip_prompt=not keep_prompt, rules=bundle.resume_rules()
        )

    def default_model(self, trajectory: Trajectory) -> str | None:
        native = self.native(trajectory)
        models = [m.get("model") for m in native.messages if isinstance(m.get("model"), str)]
        return models[-1] if models else DEFAULT_MODEL

    def continue_command(self, trajectory: Trajectory, launch: Launch) -> tuple[list[str], dict[str, str]]:
        session_id = trajectory.session_id
        assert session_id
        # the CLI continues only with a prompt: the boundary prompt, or the nonce the gate expects
        argv = bundle.run_argv(launch.prompt or "Continue.", resume=session_id, model=launch.model)
        return argv, bundle.env(launch.port)

    def reported_status(self, trajectory: Trajectory, stdout: bytes, continued: Path) -> AgentStatus:
        try:
            out = orjson.loads(stdout[stdout.index(b"{") :])
        except (ValueError, orjson.JSONDecodeError):
            return "agent_error"
        return "completed" if isinstance(out, dict) and "error" not in out else "agent_error"

    def finish_continuation(self, ended: Ended[GeminiCliContinuation]) -> dict[str, str]:
        continued = ended.home / ended.rebuild.continuation.session_file
        prompt = ended.launch.prompt
        if ended.launch.keep_prompt or prompt is None or not continued.is_file():
            return copy_continued(
                continued, ended.dest, f"{CONTINUED}.{native_form()[0]}", "continued_session"
            )
        return without_nonce(continued, ended.dest, prompt)
