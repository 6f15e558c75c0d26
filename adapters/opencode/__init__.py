"""OpenCode: event logs, exports and the SQLite store; reruns by the pinned CLI itself; import; continuation."""

from __future__ import annotations

import copy
from pathlib import Path
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
    provider_model_refusal,
    stdout_events,
)
from replayer.adapters.forms import NativeForm
from replayer.adapters.opencode import bundle, ids, server, session, tool_kinds, wire
from replayer.adapters.opencode import home as agent_home
from replayer.adapters.opencode.gate import opencode_gate
from replayer.adapters.opencode.rerun import ERRORS_ON_STDERR, WORK_MOUNT, OpenCodeRerunner, provider_model
from replayer.adapters.opencode.wire import to_wire
from replayer.adapters.sandbox_paths import AGENT_HOME, BRIDGE_URL, local_url
from replayer.bridges.chat import SystemPerRequestGate
from replayer.bridges.sidecalls import PROBE, SideCall
from replayer.floor import cwdinfer
from replayer.floor.errors import ReplayError
from replayer.floor.io import read_input, write_bytes_atomic
from replayer.floor.limits import Budgets
from replayer.floor.results import AgentStatus
from replayer.floor.rundirs import RunDirs
from replayer.floor.trajectory import HeldSession, Observation, ToolCall, ToolKind, Trajectory
from replayer.sandboxes.base import Sandbox

EXPORT = "export.json"
_STEP_MARGIN_S = 60.0


WORK = "opencode"
"""The replay model's socket: a folder of the run's state (RunDirs.work)."""


def _split_model(model: str) -> tuple[str, str]:
    provider, _, name = model.partition("/")
    return provider, name


def _cut(native: session.Native, after_step: int) -> int:
    """How many messages the prefix keeps: through the boundary step's message (after step 0: every
    message before the first step's)."""
    if after_step:
        return native.step_messages[after_step - 1] + 1
    return native.step_messages[0] if native.step_messages else len(native.messages)


def importable(native: session.Native, messages: list[dict[str, Any]], cwd: str | None) -> dict[str, Any]:
    """The export document to import: an event log's minimal infos completed with the fields the pinned
    import requires (the recorded values win; an export or a store already has them all). `cwd`: the
    trajectory's (an event log records none; --cwd gives it)."""
    provider, model = provider_model(native)
    cwd = native.info.get("directory") or cwd or "/"
    first = min((t for m in messages if (t := m["info"].get("time", {}).get("created"))), default=0)
    info = {
        "slug": "replayed-session",
        "projectID": "global",
        "directory": cwd,
        "path": cwd.lstrip("/"),
        "title": "",
        "version": bundle.version(),
        "time": {"created": first, "updated": first},
        **{k: v for k, v in native.info.items() if v is not None},
    }
    tokens = {"input": 0, "output": 0, "reasoning": 0, "cache": {"read": 0, "write": 0}}
    for message in messages:
        meta = message["info"]
        meta.setdefault("time", {"created": first})
        meta.setdefault("agent", "build")
        if meta.get("role") == "user":
            meta.setdefault("model", {"providerID": provider, "modelID": model})
            continue
        for key, value in (
            ("mode", "build"),
            ("path", {"cwd": cwd, "root": "/"}),
            ("cost", 0),
            ("tokens", tokens),
            ("modelID", model),
            ("providerID", provider),
        ):
            meta.setdefault(key, copy.deepcopy(value))
    return {"info": info, "messages": messages}


def rebuilt_document(
    trajectory: Trajectory, after_step: int, observations: dict[str, Observation]
) -> dict[str, Any]:
    """The export document the rebuild imports, before its ids move (`ids.py`): the messages through the
    boundary, each rerun tool part's state the fresh one. Its messages' wire form is the expected prefix."""
    native = trajectory.native_as(session.Native)
    messages = copy.deepcopy(native.messages[: _cut(native, after_step)])
    for message in messages:
        for part in message["parts"]:
            fresh = observations.get(part.get("callID", "")) if part.get("type") == "tool" else None
            if fresh is not None and isinstance(fresh.structured, dict):
                part["state"] = fresh.structured
    return importable(native, messages, trajectory.cwd)


class OpenCodeContinuation(Continuation):
    session_id: str | None
    model: str
    """provider/model"""
    ids_moved: int = 0
    """How many of the prefix's message and part ids the rebuild moved before now (`ids.py`)."""


class OpenCodeAdapter(Adapter[session.Native, OpenCodeContinuation]):
    continuation_type = OpenCodeContinuation
    walk_order_tools = frozenset({"glob", "grep"})
    native_type = session.Native
    name = bundle.NAME
    needs_nonce = True
    side_calls = (
        PROBE,
        # the title request of a new session (none is sent on resume): the small model, no tools
        SideCall(name="title", path=r"(/v1)?/chat/completions/?", tools=False, max_tokens=32_000),
    )
    main_thread = staticmethod(wire.main_thread)
    takes_task = True
    answer_pause_s = 0.5
    """OpenCode 1.3 to 1.15 lose their last events when a model answers at once."""
    oldest_own_version = "1.0.152"
    """The oldest release read that carries the OpenAI-compatible provider its config names: 1.0.0, 1.0.61 and
    1.0.98 install `@ai-sdk/openai-compatible` from npm when a run starts, which fails in the sandbox (no
    network): the run ends without a model request (`Command failed with exit code 1`). The npm mirror read
    has no release between 1.0.98 and 1.0.152."""
    stand_in_version = "1.0.152"
    """Runs an older session: the nearest release read that runs offline (JSON storage, as 1.0.x keeps)."""
    idle_timeout_s = 600.0
    probe_native = "export.json"
    probe_recordings = ("opencode/tools", "opencode/versions/*/probe")
    probe_shell = {"bash": {"command": COMMAND, "description": "Probe command"}}
    probe_read = {"read": {"filePath": PATH}}

    forms = (
        NativeForm(
            "export", session.looks_like_export, "`opencode export ID` (a status line before it is skipped)"
        ),
        NativeForm("database", session.looks_like_database, "the CLI's own opencode.db (SQLite, 1.x)"),
        NativeForm("messages", session.looks_like_message_list, "the server's /session/ID/message answer"),
        NativeForm(
            "event array", session.looks_like_event_array, "the server's bus events saved as one array"
        ),
        NativeForm("event stream", session.looks_like_stream, "the server's /event stream (SSE) saved as is"),
        NativeForm("event log", session.looks_like_run_events, "`opencode run --format json` output"),
    )

    def parse(self, path: Path, task: str | None = None) -> Trajectory:
        return session.parse(path, task)

    def _prompt_refusal(self, trajectory: Trajectory) -> str | None:
        """An event log whose prompts the reruns stood in for cannot be continued (the session holds them)."""
        missing = self.native(trajectory).prompts_missing
        if not missing:
            return None
        if missing == [1]:
            return (
                "the event log stores no user prompt (the CLI prints none) and the continued session holds it: "
                "pass --task TEXT, or put the session's `opencode export` JSON next to it"
            )
        runs = ", ".join(str(r) for r in missing)
        return (
            f"the event log stores no user prompt of run(s) {runs} (the CLI prints none; --task gives the first "
            "only): put the session's `opencode export` JSON next to it"
        )

    @classmethod
    def sessions_held(cls, path: Path, first_line: bytes) -> list[HeldSession] | None:
        return server.sessions_held(path, first_line)

    def classify(self, call: ToolCall, trajectory: Trajectory) -> tuple[ToolKind, str | None]:
        return tool_kinds.classify(call)

    def inferred_cwd(self, trajectory: Trajectory) -> str | None:
        """An event log (`run --format json`) records no directory: the one holding every path its file
        tools name (a `read` of a directory names the directory itself, as its output says)."""
        return cwdinfer.common_directory(tool_kinds.directories(s.calls for s in trajectory.steps))

    def sandbox_binds(self, trajectory: Trajectory, dirs: RunDirs) -> dict[str, tuple[Path, bool]]:
        return {AGENT_HOME: (dirs.home, False), WORK_MOUNT: (dirs.work(WORK), False), **bundle.binds()}

    def rerunner(
        self, trajectory: Trajectory, sandbox: Sandbox, dirs: RunDirs, budgets: Budgets
    ) -> OpenCodeRerunner:
        step_timeout = budgets.max_command_timeout_s + _STEP_MARGIN_S
        return OpenCodeRerunner(trajectory, sandbox, dirs.work(WORK), dirs.home, step_timeout)

    def rebuild(
        self, trajectory: Trajectory, after_step: int, observations: dict[str, Observation], dest: Path
    ) -> Rebuild[OpenCodeContinuation]:
        native = self.native(trajectory)
        document = rebuilt_document(trajectory, after_step, observations)
        messages = document["messages"]
        moved = ids.move_before_now(document)
        export = dest / EXPORT
        write_bytes_atomic(export, orjson.dumps(document, option=orjson.OPT_INDENT_2))
        home = dest / "home"  # may hold the rerun's side files: written into without following links
        home.mkdir(parents=True, exist_ok=True)
        provider, model = provider_model(native)
        store = agent_home.import_session(home, export, document["info"], provider, model, BRIDGE_URL)
        return Rebuild(
            native_files=[export, home / store],
            expected_prefix=to_wire(messages),
            agent_home=home,
            continuation=OpenCodeContinuation(
                session_id=native.info.get("id"), model=f"{provider}/{model}", ids_moved=len(moved)
            ),
        )

    def continued_prefix(self, result_dir: Path, model: str | None = None) -> list[dict[str, Any]] | None:
        with continued_file(result_dir, EXPORT) as path:
            if path is None:
                return None
            return to_wire(orjson.loads(read_input(path))["messages"])

    # continuation -----------------------------------------------------------------------------
    def gate(
        self, rebuild: Rebuild[OpenCodeContinuation], prompt: str | None, keep_prompt: bool
    ) -> SystemPerRequestGate:
        assert prompt is not None
        return opencode_gate(rebuild.expected_prefix, bundle.sent_prompt(prompt), keep_prompt=keep_prompt)

    def default_model(self, trajectory: Trajectory) -> str | None:
        provider, model = provider_model(self.native(trajectory))
        return f"{provider}/{model}"

    def continuation_refusal(self, trajectory: Trajectory, model: str | None) -> str | None:
        if not trajectory.session_id:
            return "the session has no id to resume"
        return self._prompt_refusal(trajectory) or provider_model_refusal("OpenCode", model)

    def continue_command(self, trajectory: Trajectory, launch: Launch) -> tuple[list[str], dict[str, str]]:
        assert launch.model and launch.prompt is not None and trajectory.session_id
        provider, model = _split_model(launch.model)
        config = bundle.config(provider, model, local_url(launch.port))
        # its logged errors on stderr, as the rerun has them: what `run` hides behind "Unexpected server error"
        argv = [*bundle.run_argv(trajectory.session_id), "--model", launch.model, *ERRORS_ON_STDERR]
        env = {
            **bundle.base_env(),
            "REPLAYER_PROMPT": launch.prompt,
            "OPENCODE_CONFIG_CONTENT": orjson.dumps(config).decode(),
        }
        return bundle.with_stdin_prompt(argv), env

    def continuation_metadata(self, launch: Launch, rebuild: Rebuild[OpenCodeContinuation]) -> dict[str, Any]:
        """The pinned CLI enforces no step budget on a resumed session: the replayer counts and stops it. Ids
        the rebuild moved before now are said (the continued session carries them, not the recorded ones)."""
        metadata: dict[str, Any] = {}
        if launch.max_steps is not None:
            metadata["opencode_step_budget"] = {
                "max_steps": launch.max_steps,
                "enforced_by": "replayer (SIGINT)",
            }
        if rebuild.continuation.ids_moved:
            metadata["opencode_ids_moved"] = {
                "count": rebuild.continuation.ids_moved,
                "why": "recorded before OpenCode's 48-bit time ids wrapped, they sorted after those minted now",
            }
        return metadata

    def reported_status(self, trajectory: Trajectory, stdout: bytes, continued: Path) -> AgentStatus:
        events = stdout_events(stdout)
        if any(e.get("type") == "error" for e in events):
            return "agent_error"
        finishes = [e["part"].get("reason") for e in events if e.get("type") == "step_finish"]
        # 1.3 to 1.15 may exit before printing their last events: the exported session says how it ended
        last = _last_finish(continued / EXPORT) or (finishes[-1] if finishes else None)
        return "completed" if last == "stop" else "agent_error"

    def finish_continuation(self, ended: Ended[OpenCodeContinuation]) -> dict[str, str]:
        """The continued session as the CLI exports it *inside the sandbox*: the home is the sandbox's."""
        session_id = ended.trajectory.session_id
        assert session_id
        sent = bundle.sent_prompt(ended.launch.prompt or "")
        try:
            document = orjson.loads(agent_home.container_export(ended.sandbox, session_id))
            messages = document["messages"]
            prefix_ids = {
                m["info"]["id"] for m in orjson.loads(ended.rebuild.native_files[0].read_bytes())["messages"]
            }
            if not ended.launch.keep_prompt:
                document["messages"] = [
                    m
                    for m in messages
                    if m["info"]["id"] in prefix_ids or to_wire([m]) != [{"role": "user", "content": sent}]
                ]
        # a CLI that died may leave no session; the sandbox's output is data, whatever its shape
        except (ReplayError, orjson.JSONDecodeError, LookupError, TypeError, AttributeError) as exc:
            return {"continued_session_error": f"{type(exc).__name__}: {exc}"[:200]}
        write_bytes_atomic(ended.dest / EXPORT, orjson.dumps(document, option=orjson.OPT_INDENT_2))
        return {"continued_session": f"continued/{EXPORT}"}


def _last_finish(export: Path) -> str | None:
    """How the continued session's last assistant message finished, as the CLI exported it."""
    try:
        info = orjson.loads(export.read_bytes())["messages"][-1]["info"]
    except (OSError, orjson.JSONDecodeError, LookupError, TypeError):
        return None
    return info.get("finish") if isinstance(info, dict) and info.get("role") == "assistant" else None
