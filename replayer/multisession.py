"""Files that hold several sessions: an OpenHands evaluation output (`output.jsonl`, one instance per line),
OpenCode `run --format json` logs appended in one file, and a dump of an OpenCode server's event stream
(`GET /event` or `/global/event`) that carried several sessions. `held` lists the sessions; `extract` writes one
of them alone to a private file, which the agent's parser then reads like any other file of its kind."""

from __future__ import annotations

import atexit
import hashlib
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict

from adapters.head import SSE_FIELDS
from adapters.opencode import server
from replayer.errors import BadInput, excerpt
from replayer.io import open_input, read_input

Form = Literal["openhands_output", "opencode_events", "opencode_stream"]
_FIRST_LINE_BYTES = 64 * 1024 * 1024
_EXTRACTED: dict[tuple[str, int, int, str], Path] = {}
_HELD: dict[tuple[str, int, int], list[HeldSession]] = {}
_HELD_MAX = 64
_DIR: Path | None = None


class HeldSession(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    id: str
    form: Form
    lines: list[int]
    """Its lines in the file (1-based)."""
    first_prompt: str | None = None


def _session_of(value: Any, form: Form) -> str | None:
    if not isinstance(value, dict):
        return None
    if form == "openhands_output":
        ok = isinstance(value.get("history"), list) and value.get("instance_id") is not None
        return str(value["instance_id"]) if ok else None
    session = value.get("sessionID")
    return session if isinstance(session, str) and isinstance(value.get("type"), str) else None


def _form_of(first: Any) -> Form | None:
    if _session_of(first, "openhands_output") is not None:
        return "openhands_output"
    if _session_of(first, "opencode_events") is not None:
        return "opencode_events"
    return None


def held(path: Path) -> list[HeldSession]:
    """The sessions of a file that holds several, in file order; [] for any other file. Read once per
    version of the file: `inspect` and a batch load each of its sessions after listing them."""
    if not path.is_file():  # a folder, a missing or special file: the agent's detection says what it is
        return []
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HELD:
        if len(_HELD) >= _HELD_MAX:
            _HELD.pop(next(iter(_HELD)))
        _HELD[key] = _read_sessions(path)
    return _HELD[key]


def _read_sessions(path: Path) -> list[HeldSession]:
    with open_input(path) as fh:
        first_line = fh.readline(_FIRST_LINE_BYTES)
        while first_line and not first_line.strip():
            first_line = fh.readline(_FIRST_LINE_BYTES)
    if first_line.startswith(SSE_FIELDS):
        return _stream_sessions(path)
    try:
        form = _form_of(orjson.loads(first_line))
    except orjson.JSONDecodeError:
        return []
    if form is None:
        return []
    found: dict[str, list[int]] = {}
    prompts: dict[str, str | None] = {}
    for number, line in enumerate(read_input(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise BadInput(
                f"{path}: line {number} is not JSON ({excerpt(line.decode(errors='replace'))})"
            ) from None
        session = _session_of(value, form)
        if session is None:
            what = "an evaluation output instance" if form == "openhands_output" else "an OpenCode event"
            raise BadInput(f"{path}: line {number} is not {what} like line 1")
        found.setdefault(session, []).append(number)
        prompts.setdefault(session, _first_prompt(value, form))
    if len(found) < 2:
        return []
    return [HeldSession(id=s, form=form, lines=lines, first_prompt=prompts[s]) for s, lines in found.items()]


def _stream_sessions(path: Path) -> list[HeldSession]:
    """The sessions of an OpenCode server's event dump, by the `sessionID` every session event carries.
    Events of no session (the connection, heartbeats, `/global/event`'s `sync` copies) hold no content and
    go with none. Anything that is not such a stream is left to the parser, which says what is wrong."""
    found: dict[str, list[int]] = {}
    first_user: dict[str, str] = {}
    prompts: dict[str, str | None] = {}
    for number, line in enumerate(read_input(path).splitlines(), 1):
        if not line.startswith(b"data:"):
            continue
        try:
            kind, props, _ = server.bus_event(orjson.loads(line[5:]))
        except orjson.JSONDecodeError:
            return []
        session = props.get("sessionID") if isinstance(props, dict) else None
        if kind is None:
            return []
        if not isinstance(session, str) or kind == "sync":
            continue
        found.setdefault(session, []).append(number)
        prompts.setdefault(session, None)
        info, part = props.get("info"), props.get("part")
        if kind == "message.updated" and isinstance(info, dict) and info.get("role") == "user":
            first_user.setdefault(session, str(info.get("id")))
        prompt = part.get("text") if isinstance(part, dict) else None
        if (
            isinstance(prompt, str)
            and prompts[session] is None
            and part.get("messageID") == first_user.get(session)
        ):
            prompts[session] = prompt[:200]
    if len(found) < 2:
        return []
    return [
        HeldSession(id=s, form="opencode_stream", lines=n, first_prompt=prompts[s]) for s, n in found.items()
    ]


def _first_prompt(value: dict[str, Any], form: Form) -> str | None:
    """An OpenHands instance's first user message (OpenCode's run log does not print the prompt)."""
    if form != "openhands_output":
        return None
    for event in value["history"]:
        if isinstance(event, dict) and event.get("source") == "user" and event.get("action") == "message":
            content = (event.get("args") or {}).get("content")
            return content[:200] if isinstance(content, str) else None
    return None


def extract(path: Path, sessions: list[HeldSession], session: str) -> Path:
    """`session`'s lines alone, in a private file named like `path` (removed when the process ends)."""
    chosen = next((s for s in sessions if s.id == session), None)
    if chosen is None:
        some = ", ".join(s.id for s in sessions[:5]) + (", ..." if len(sessions) > 5 else "")
        raise BadInput(f"{path} holds no session {excerpt(session)} (it holds {len(sessions)}: {some})")
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, session)
    if key not in _EXTRACTED:
        lines = read_input(path).splitlines()
        wanted = set(chosen.lines)
        end = b"\n\n" if chosen.form == "opencode_stream" else b"\n"  # an event ends at a blank line
        data = b"".join(line + end for number, line in enumerate(lines, 1) if number in wanted)
        folder = _private_dir() / hashlib.sha256(repr(key).encode()).hexdigest()[:16]
        folder.mkdir()
        (folder / path.name).write_bytes(data)
        _EXTRACTED[key] = folder / path.name
    return _EXTRACTED[key]


def _private_dir() -> Path:
    global _DIR
    if _DIR is None:
        _DIR = Path(tempfile.mkdtemp(prefix="replayer-sessions-"))
        atexit.register(shutil.rmtree, _DIR, True)
    return _DIR
