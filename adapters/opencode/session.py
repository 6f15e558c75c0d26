"""OpenCode (opencode-ai 1.18.x) sessions in their native forms, parsed into one export-shaped model.

Forms (all checked against the pinned CLI's own recordings and its bundled source):
- export: `opencode export <ses>` JSON, `{info: <session>, messages: [{info, parts}]}`, in session order.
- sqlite: the CLI's store `opencode.db` (tables `session`, `message`, `part`; the event-sourced `event`
  table is not read: the CLI builds its prompt from `message`/`part`). Row `data` JSON lacks the ids,
  which are put back as the CLI does (`{...data, id, sessionID}` for a message, `{...data, id,
  sessionID, messageID}` for a part); messages are ordered by (time_created, id), parts by id, and the
  session row is mapped to the export's `info` field names as the CLI's `fromRow` does. The file is
  never opened in place with a journal: without a `-wal` sibling it is opened `immutable` (SQLite then
  creates no `-wal`/`-shm` files); with one, the database and its WAL are copied to a temporary
  directory and the copy is read, so un-checkpointed writes count. The store must hold exactly one
  top-level session (sub-agent sessions, those with a parent, are not candidates).
- events: `opencode run --format json` stdout, one `{type, timestamp, sessionID, part}` a line. Parts are
  grouped by `part.messageID` (messages in order of first appearance, parts in part-id order, which is
  the stored and the call order); the last line for a part id wins, so repeated lines and intermediate
  tool states collapse into one part. `error` lines and unknown types carry no part and are ignored.
  A run ends at a `step_finish` whose reason is neither `tool-calls` nor `unknown` in a message without
  tool parts (the CLI's own loop-exit rule) or at an `error` line; a later new message starts the next
  run (`opencode run --session` output appended). The CLI prints no user message: each run's prompt
  comes from a sibling of the same session (an export `*.json` or an SQLite `*.db` in the same
  directory), whose user messages, assistant message infos and unprinted parts (reasoning without
  `--thinking`) are merged in; failing that, the first run's prompt is `task` and the user message is
  synthesized, and a run whose prompt nothing gives gets a stand-in (`STAND_IN_PROMPT`: enough to start
  the reruns; the trajectory's `prompt_missing` refuses a continuation). Without a sibling, an assistant message's info is only what the log shows (id, parent,
  finish reason) and the session info is minimal (no version, no directory).

- messages / stream: the server's `GET /session/{id}/message` body and dumps of its SSE event streams
  (`server`; also their events saved as one JSON array), whose messages are the export's; the session record is the stream's, or filled in.

A step is one assistant message with at least one `tool` part; its calls are those parts in order.

Every record is checked where it is read (an export's message, a store's row, an event line) against the
pinned CLI's own schemas (`schema`): a rebuild imports the session into that CLI, and a record it would
not decode is refused here, naming the message, row or line and the field, with a short excerpt.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict

from replayer.adapters.head import SQLITE_MAGIC, SqliteFile, loads_document, preamble
from replayer.adapters.opencode import schema, server
from replayer.adapters.opencode.server import record_name as _name
from replayer.adapters.shapes import check, loads_within, too_deep
from replayer.floor.errors import BadInput, bad_record, excerpt
from replayer.floor.io import input_sha256, open_input, read_input, sha256_soon
from replayer.floor.trajectory import Observation, Step, ToolCall, Trajectory

Record = dict[str, Any]
Message = dict[str, Any]
"""Export shape: {"info": {...}, "parts": [{...}]}."""
Form = Literal["export", "events", "sqlite", "messages", "stream"]

AGENT = "opencode"
PART_EVENTS = frozenset({"step_start", "text", "reasoning", "tool_use", "step_finish"})
"""Event types whose `part` is a stored part (the pinned CLI prints no other part events)."""
CONTINUING_FINISHES = frozenset({"tool-calls", "unknown"})
"""Finish reasons after which the CLI's loop asks the model again (any other ends the run)."""
FINISHED_STATES = frozenset({"completed", "error"})
SYNTHETIC_SUFFIX = "ReplayerTask00"
"""Random-part stand-in of the synthesized user message and part ids (base62, 14 characters)."""
_TABLES = frozenset({"session", "message", "part"})
_DAMAGED_DB = (sqlite3.Error, UnicodeDecodeError)
"""What a damaged store raises: "database disk image is malformed", "Could not decode to UTF-8 column";
an error message that quotes a damaged schema name is itself undecodable (UnicodeDecodeError)."""
STAND_IN_PROMPT = "(this run's prompt is not in the event log: the replayer stands in for it)"
"""The user message of a run whose prompt the event log does not store (reruns start the CLI with it)."""


class Native(BaseModel):
    """Parse state the rebuild needs: the session as `opencode export` would print it."""

    model_config = ConfigDict(extra="forbid")
    form: Form
    info: dict[str, Any]
    """The session in the export's `info` shape (minimal for an event log without a sibling)."""
    messages: list[Message]
    """Export shape, session order, user messages included."""
    step_messages: list[int]
    """Step i (1-based) -> index into `messages` of its assistant message."""
    prompts_missing: list[int] = []
    """The runs of an event log whose prompt is a stand-in (`STAND_IN_PROMPT`: the log stores none)."""
    preamble: list[str] = []
    """The lines the CLI printed before an export's JSON to the same stream (`Exporting session: ses_...`),
    skipped as `opencode export ID > FILE 2>&1` writes them."""


# detection -----------------------------------------------------------------------------------
def looks_like_export(head: list[Any]) -> bool:
    return len(head) == 1 and _is_export(head[0])


def looks_like_database(head: list[Any]) -> bool:
    return bool(head) and isinstance(head[0], SqliteFile) and _is_opencode_db(head[0].path)


def looks_like_message_list(head: list[Any]) -> bool:
    return len(head) == 1 and server.looks_like_messages(head[0])


def looks_like_event_array(head: list[Any]) -> bool:
    return len(head) == 1 and server.looks_like_event_array(head[0])


def looks_like_stream(head: list[Any]) -> bool:
    return bool(head) and server.looks_like_stream(head[0])


def looks_like_run_events(head: list[Any]) -> bool:
    return bool(head) and _is_event(head[0])


def _is_export(value: Any) -> bool:
    info = value.get("info") if isinstance(value, dict) else None
    return (
        isinstance(info, dict)
        and str(info.get("id", "")).startswith("ses_")
        and isinstance(value.get("messages"), list)
    )


def _is_event(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("type"), str)
        and isinstance(value.get("timestamp"), int)
        and str(value.get("sessionID", "")).startswith("ses_")
        and (isinstance(value.get("part"), dict) or "error" in value)
    )


def _is_opencode_db(path: Path) -> bool:
    try:
        with _open_db(path) as db:
            names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except (BadInput, *_DAMAGED_DB):
        return False
    return _TABLES.issubset(names)


# parse ---------------------------------------------------------------------------------------
def parse(path: Path, task: str | None = None) -> Trajectory:
    """`task` is the first prompt of an event log that has no sibling giving it; other forms ignore it."""
    native, digest = _read(path, task)
    steps = _steps(native)
    traj = Trajectory(
        agent=AGENT,
        agent_version=native.info.get("version"),
        session_id=native.info.get("id"),
        cwd=native.info.get("directory") or _assistant_cwd(native.messages),
        source=str(path),
        source_sha256=digest,
        steps=[s for s, _ in steps],
        prompt_missing=bool(native.prompts_missing),
        parse_notes=[
            *([_stand_in_note(native.prompts_missing)] if native.prompts_missing else []),
            *([_preamble_note(native.preamble)] if native.preamble else []),
        ],
    )
    traj.keep_native(native.model_copy(update={"step_messages": [at for _, at in steps]}))
    return traj


def _preamble_note(lines: list[str]) -> str:
    shown = excerpt(" / ".join(lines))
    return f"the export begins with {len(lines)} line(s) the CLI printed to the same stream, skipped: {shown}"


def _stand_in_note(runs: list[int]) -> str:
    which = "its prompt" if runs == [1] else f"the prompt of run(s) {', '.join(map(str, runs))}"
    needs = "--task TEXT" if runs == [1] else "the session's `opencode export` JSON next to it"
    return f"the event log stores no user prompt: a stand-in for {which} starts the reruns; a continuation needs {needs}"


def _read(path: Path, task: str | None) -> tuple[Native, str]:
    if _is_sqlite(path):
        return read_sqlite(path), input_sha256(path, _wal(path))  # the WAL is part of the store
    raw = read_input(path)
    digest = sha256_soon(raw)  # taken on another core meanwhile
    skip = preamble(raw)
    try:
        doc, deep = loads_document(raw[skip:] if skip else raw)
    except orjson.JSONDecodeError:
        doc, deep = None, False  # JSONL (several lines) or damaged: the event reader names the line
    if isinstance(doc, dict) and "messages" in doc and "info" in doc:
        native = read_export(doc, path, deep)
        if skip:  # what the CLI printed to the same stream (`opencode export ID > FILE 2>&1`)
            said = raw[:skip].decode("utf-8", "replace").strip().splitlines()
            native = native.model_copy(update={"preamble": said})
        return native, digest()
    if server.looks_like_event_array(doc):
        return read_event_array(doc, path), digest()
    if isinstance(doc, list):
        return read_messages(doc, path, deep), digest()
    if doc is None and server.is_stream(raw):
        return read_stream(raw, path), digest()
    return read_events(raw, path, task), digest()


def _is_sqlite(path: Path) -> bool:
    """Read the magic of a regular file (`open_input` refuses a FIFO or a device before reading)."""
    try:
        with open_input(path) as fh:
            return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None


def _assistant_cwd(messages: list[Message]) -> str | None:
    for message in messages:
        path = message["info"].get("path")
        if message["info"].get("role") == "assistant" and isinstance(path, dict) and path.get("cwd"):
            return str(path["cwd"])
    return None


# steps ---------------------------------------------------------------------------------------
def _steps(native: Native) -> list[tuple[Step, int]]:
    steps: list[tuple[Step, int]] = []
    for at, message in enumerate(native.messages):
        info = message["info"]
        if info.get("role") != "assistant":
            continue
        message_id = str(info["id"])
        calls = [_call(p, message_id) for p in message["parts"] if p.get("type") == "tool"]
        if not calls:
            continue
        # a finished state is the one that gives its call an observation (`_call`)
        complete = all(c.historical is not None for c in calls)
        steps.append((Step(len(steps) + 1, message_id, calls, complete), at))
    return steps


def _call(part: Record, message_id: str) -> ToolCall:
    """A call of a checked message (`schema.py`): no second validation."""
    state = part.get("state")
    if not isinstance(state, dict) or not part.get("callID"):
        raise BadInput(
            f"opencode message {_name(message_id)}: tool part {_name(part.get('id'))} has no callID or state"
        )
    status = state.get("status")
    historical = None
    if status in FINISHED_STATES:
        content = state.get("output" if status == "completed" else "error", "")
        historical = Observation(
            content if isinstance(content, str) else orjson.dumps(content).decode(), status == "error", state
        )
    tool_input = state.get("input")
    return ToolCall(
        str(part["callID"]),
        str(part.get("tool")),
        tool_input if isinstance(tool_input, dict) else {},
        historical,
    )


# export --------------------------------------------------------------------------------------
def read_export(doc: Record, path: Path, deep: bool) -> Native:
    """`deep`: the document nests deeper than schema.MAX_DEPTH (`shapes.loads_within` told as it read it)."""
    info = doc.get("info")
    if not isinstance(info, dict) or not isinstance(info.get("id"), str):
        raise BadInput(f"{path} is not an opencode export (its info has no session id)")
    messages = doc.get("messages")
    if not isinstance(messages, list):
        raise BadInput(f"{path} is not an opencode export (no messages list)")
    if deep:
        raise bad_record(str(path), "the export", f"nests deeper than {schema.MAX_DEPTH} levels")
    check(schema.Session, info, str(path), "the session info")
    for i, message in enumerate(messages):
        _check_message(message, str(path), f"message {i}")
    # not validated again: the records were checked above (validation would copy every message)
    return Native.model_construct(form="export", info=info, messages=messages, step_messages=[])


def _check_message(message: Any, source: str, where: str) -> None:
    """A message in the export's shape, as the pinned CLI's import decodes it."""
    info = message.get("info") if isinstance(message, dict) else None
    if not isinstance(info, dict) or not isinstance(info.get("id"), str):
        raise BadInput(f"{source}: {where} is not an opencode message (no info with an id)")
    if info.get("role") not in ("user", "assistant"):
        raise BadInput(f"{source}: {where} has an unknown role {excerpt(info.get('role'))}")
    parts = message.get("parts")
    if not isinstance(parts, list) or not all(isinstance(p, dict) for p in parts):
        raise BadInput(f"{source}: {where} has no parts list")
    check(schema.Message, message, source, where)


# the server's shapes ---------------------------------------------------------------------------
def read_messages(doc: list[Any], path: Path, deep: bool) -> Native:
    """The body of `GET /session/{id}/message`: the export's messages without its session record, whose
    id the messages name and whose directory their assistant messages' `path.cwd` gives."""
    if deep:
        raise bad_record(str(path), "the message list", f"nests deeper than {schema.MAX_DEPTH} levels")
    for i, message in enumerate(doc):
        _check_message(message, str(path), f"message {i}")
    session_id = server.only_session((m["info"]["sessionID"] for m in doc), str(path))
    server.whole(doc, str(path))
    info = {"id": session_id, "directory": _assistant_cwd(doc), "title": "", "version": None}
    return Native(form="messages", info=info, messages=doc, step_messages=[])


def read_stream(raw: bytes, path: Path) -> Native:
    """A dump of the server's SSE event stream: the final state of its one session (`server`)."""
    return _from_events(*server.read_stream(raw, path), path, "stream")


def read_event_array(values: list[Any], path: Path) -> Native:
    """The server's events saved as one JSON array: read as the stream they came from."""
    return _from_events(*server.read_array(values, path), path, "stream")


def _from_events(record: Record | None, messages: list[Message], path: Path, form: Form) -> Native:
    server.whole(messages, str(path))
    session_id = str(messages[0]["info"]["sessionID"])
    info = record or {"id": session_id, "directory": _assistant_cwd(messages), "title": "", "version": None}
    return Native(form=form, info=info, messages=messages, step_messages=[])


# sqlite --------------------------------------------------------------------------------------
def _wal(path: Path) -> Path | None:
    wal = path.with_name(path.name + "-wal")
    return wal if wal.is_file() and wal.stat().st_size > 0 else None


@contextmanager
def _open_db(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection that writes nothing next to `path` (see the module docstring). The database
    and its WAL are refused first when they are no regular files or too large (SQLite would block on a
    FIFO)."""
    wal = _wal(path)
    with contextlib.ExitStack() as opened, tempfile.TemporaryDirectory(prefix="replayer-opencode-") as tmp:
        # each file read through the descriptor its check opened: what is checked is what SQLite reads
        files = [opened.enter_context(open_input(f)) for f in (path, wal) if f is not None]
        try:
            if wal is None:
                uri = f"{Path(f'/proc/self/fd/{files[0].fileno()}').as_uri()}?mode=ro&immutable=1"
            else:
                copy = Path(tmp) / "opencode.db"
                for source, name in zip(files, ("opencode.db", "opencode.db-wal"), strict=True):
                    fd = os.open(Path(tmp) / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
                    with os.fdopen(fd, "wb") as dest:
                        shutil.copyfileobj(source, dest)
                uri = f"{copy.as_uri()}?mode=ro"
            db = sqlite3.connect(uri, uri=True)
        except (OSError, sqlite3.Error) as exc:
            raise BadInput(f"cannot open {path} as an SQLite database: {exc}") from None
        try:
            yield db
        finally:
            db.close()


def read_sqlite(path: Path, session_id: str | None = None) -> Native:
    """The store's only top-level session, or the session `session_id` when given."""
    try:
        with _open_db(path) as db:
            db.row_factory = sqlite3.Row
            names = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not _TABLES.issubset(names):
                raise BadInput(
                    f"{path} is an SQLite database without opencode's session, message and part tables"
                )
            row = _only_session(db, path) if session_id is None else _session(db, path, session_id)
            info = session_info(row, path)
            check(schema.Session, info, str(path), f"session {_name(row['id'])}")
            messages = _db_messages(db, info["id"], path)
    except _DAMAGED_DB as exc:
        raise BadInput(f"{path}: cannot read the opencode database: {excerpt(str(exc), 200)}") from None
    return Native(form="sqlite", info=info, messages=messages, step_messages=[])


def _only_session(db: sqlite3.Connection, path: Path) -> sqlite3.Row:
    rows = db.execute("SELECT * FROM session WHERE parent_id IS NULL ORDER BY time_created, id").fetchall()
    if not rows:
        raise BadInput(f"{path} holds no opencode session")
    if len(rows) > 1:
        ids = ", ".join(_name(r["id"]) for r in rows[:5]) + (", ..." if len(rows) > 5 else "")
        raise BadInput(
            f"{path} holds {len(rows)} opencode sessions ({ids}): run `opencode export <id>` for the one "
            "to replay and pass that file"
        )
    return rows[0]


def _session(db: sqlite3.Connection, path: Path, session_id: str) -> sqlite3.Row:
    row = db.execute("SELECT * FROM session WHERE id = ?", (session_id,)).fetchone()
    if row is None:
        raise BadInput(f"{path} holds no opencode session {_name(session_id)}")
    return row


def _db_messages(db: sqlite3.Connection, session_id: str, path: Path) -> list[Message]:
    """As the CLI's MessageV2 reads them: messages by (time_created, id), each one's parts by id."""
    messages: list[Message] = []
    by_id: dict[str, Message] = {}
    query = "SELECT id, session_id, data FROM message WHERE session_id = ? ORDER BY time_created, id"
    for row in db.execute(query, (session_id,)):
        where = f"message {_name(row['id'])}"
        data = _json_object(row["data"], str(path), where)
        message: Message = {"info": {**data, "id": row["id"], "sessionID": row["session_id"]}, "parts": []}
        check(schema.Info, message["info"], str(path), where, "data")
        messages.append(message)
        by_id[row["id"]] = message
    query = (
        "SELECT p.id, p.message_id, p.session_id, p.data FROM part p JOIN message m ON m.id = p.message_id "
        "WHERE m.session_id = ? ORDER BY p.message_id, p.id"
    )
    for row in db.execute(query, (session_id,)):
        where = f"part {_name(row['id'])}"
        data = _json_object(row["data"], str(path), where)
        part = {**data, "id": row["id"], "sessionID": row["session_id"], "messageID": row["message_id"]}
        check(schema.Part, part, str(path), where, "data")
        if row["message_id"] not in by_id:  # the join found it: a repeated or retyped message id
            raise bad_record(str(path), where, "belongs to no message read", row["message_id"])
        by_id[row["message_id"]]["parts"].append(part)
    return messages


def _json_object(text: Any, source: str, where: str) -> Record:
    value = _json_column(text, source, where, "data")
    if not isinstance(value, dict):
        raise BadInput(f"{source}: {where} has no JSON object as its data")
    return value


def _json_column(text: Any, source: str, where: str, column: str) -> Any:
    """A JSON text column (a damaged store may hold any SQLite type in it)."""
    if text is None:
        return None
    if not isinstance(text, str | bytes):
        raise bad_record(source, where, f"its {column} is no JSON text", text)
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        raise BadInput(f"{source}: {where} has damaged JSON {column}") from None
    if too_deep(value, schema.MAX_DEPTH):
        raise bad_record(source, where, f"its {column} nests deeper than {schema.MAX_DEPTH} levels")
    return value


def session_info(row: sqlite3.Row, path: Path) -> Record:
    """A `session` row in the export's `info` shape: the pinned CLI's `fromRow`, undefined keys left out."""
    source, where = str(path), f"session {_name(row['id'])}"
    cols = dict(zip(row.keys(), tuple(row), strict=True))
    model = _json_column(cols.get("model"), source, where, "model")
    revert = _json_column(cols.get("revert"), source, where, "revert")
    permission = _json_column(cols.get("permission"), source, where, "permission")
    diffs = _json_column(cols.get("summary_diffs"), source, where, "summary_diffs")
    summary = None
    if any(cols.get(k) is not None for k in ("summary_additions", "summary_deletions", "summary_files")):
        summary = {
            "additions": cols.get("summary_additions") or 0,
            "deletions": cols.get("summary_deletions") or 0,
            "files": cols.get("summary_files") or 0,
            "diffs": diffs,
        }
    info = {
        "id": cols["id"],
        "slug": cols.get("slug"),
        "projectID": cols.get("project_id"),
        "workspaceID": cols.get("workspace_id"),
        "directory": cols.get("directory"),
        "path": cols.get("path"),
        "parentID": cols.get("parent_id"),
        "title": cols.get("title"),
        "agent": cols.get("agent"),
        "model": _model(model),
        "version": cols.get("version"),
        "summary": summary,
        "cost": _js_number(cols.get("cost")),
        "tokens": _tokens(cols),
        "share": {"url": cols["share_url"]} if cols.get("share_url") else None,
        "metadata": _json_column(cols.get("metadata"), source, where, "metadata"),
        "revert": _revert(revert),
        "permission": permission,
        "time": {
            "created": cols.get("time_created"),
            "updated": cols.get("time_updated"),
            "compacting": cols.get("time_compacting"),
            "archived": cols.get("time_archived"),
        },
    }
    return _drop_none(info)


def _tokens(cols: Record) -> Record | None:
    """The session's token counts: none in a store before 1.15 (its `session` table has no such columns,
    and that version's export prints no `tokens`)."""
    if "tokens_input" not in cols:
        return None
    return {
        "input": cols.get("tokens_input"),
        "output": cols.get("tokens_output"),
        "reasoning": cols.get("tokens_reasoning"),
        "cache": {"read": cols.get("tokens_cache_read"), "write": cols.get("tokens_cache_write")},
    }


def _revert(revert: Any) -> Record | None:
    if not isinstance(revert, dict):
        return None
    return _drop_none(
        {
            "messageID": revert.get("messageID"),
            "partID": revert.get("partID") or None,
            "snapshot": revert.get("snapshot"),
            "diff": revert.get("diff"),
        }
    )


def _js_number(value: Any) -> Any:
    """A REAL column as JSON.stringify prints it (0.0 -> 0)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _model(model: Any) -> Record | None:
    if not isinstance(model, dict):
        return None
    return _drop_none(
        {"id": model.get("id"), "providerID": model.get("providerID"), "variant": model.get("variant")}
    )


def _drop_none(value: Record) -> Record:
    """JSON.stringify leaves out undefined values, also nested (`summary.diffs`, `time.archived`)."""
    return {k: _drop_none(v) if isinstance(v, dict) else v for k, v in value.items() if v is not None}


# events --------------------------------------------------------------------------------------
class _EventLog(BaseModel):
    """What the lines say: parts by id (last wins), messages in order of first appearance, runs."""

    model_config = ConfigDict(extra="forbid")
    session_id: str
    first_timestamp: int
    parts: dict[str, Record]
    message_parts: dict[str, list[str]]
    """Message id -> its part ids, in order of first appearance of the message."""
    message_times: dict[str, int]
    """Message id -> the timestamp of its first event (the CLI created the message before it)."""
    runs: list[list[str]]
    """Message ids of each `opencode run`, in order."""


def _events(raw: bytes, path: Path) -> _EventLog:
    parts: dict[str, Record] = {}
    message_parts: dict[str, list[str]] = {}
    message_times: dict[str, int] = {}
    runs: list[list[str]] = []
    session_id: str | None = None
    first_timestamp = 0
    ended = True  # the first message starts run 1
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        try:
            event, deep = loads_within(line, schema.MAX_DEPTH)
        except orjson.JSONDecodeError:
            raise BadInput(f"{path}: line {number} is not JSON (a damaged opencode event log)") from None
        if not (
            isinstance(event, dict)
            and isinstance(event.get("type"), str)
            and isinstance(event.get("sessionID"), str)
        ):
            raise BadInput(f"{path}: line {number} is not an opencode event (no type and sessionID)")
        if deep:
            raise bad_record(str(path), f"line {number}", f"nests deeper than {schema.MAX_DEPTH} levels")
        check(schema.Event, event, str(path), f"line {number}")
        if session_id is None:
            stamp = event.get("timestamp")
            session_id, first_timestamp = event["sessionID"], stamp if isinstance(stamp, int) else 0
        elif event["sessionID"] != session_id:
            raise BadInput(
                f"{path}: line {number} belongs to session {_name(event['sessionID'])}, not {_name(session_id)} "
                "(one event log a session)"
            )
        kind = event["type"]
        if kind == "error":
            ended = True
            continue
        if kind not in PART_EVENTS:
            continue
        part = event.get("part")
        if not isinstance(part, dict) or not isinstance(part.get("id"), str) or not part.get("messageID"):
            raise BadInput(f"{path}: line {number} is a {kind} event without a part id and messageID")
        check(schema.Part, part, str(path), f"line {number}", "part")
        message_id = str(part["messageID"])
        if message_id not in message_parts:
            if ended:
                runs.append([])
                ended = False
            runs[-1].append(message_id)
            message_parts[message_id] = []
            stamp = event.get("timestamp")
            if isinstance(stamp, int) and not isinstance(stamp, bool):
                message_times[message_id] = stamp
        if part["id"] not in parts:
            message_parts[message_id].append(part["id"])
        parts[part["id"]] = part
        if kind == "step_finish" and part.get("reason") not in CONTINUING_FINISHES:
            has_tools = any(parts[p].get("type") == "tool" for p in message_parts[message_id])
            ended = ended or not has_tools
    if session_id is None:
        raise BadInput(f"{path} holds no opencode event")
    return _EventLog(
        session_id=session_id,
        first_timestamp=first_timestamp,
        parts=parts,
        message_parts=message_parts,
        message_times=message_times,
        runs=runs,
    )


def read_events(raw: bytes, path: Path, task: str | None) -> Native:
    log = _events(raw, path)
    sibling = sibling_session(path, log.session_id)
    missing: list[int] = []
    known: dict[str, Message] = {m["info"]["id"]: m for m in sibling.messages} if sibling else {}
    messages: list[Message] = []
    included: set[str] = set()
    for run_number, run in enumerate(log.runs, 1):
        user_id: str | None = None
        for message_id in run:
            recorded = known.get(message_id)
            parent = known.get(str(recorded["info"].get("parentID"))) if recorded else None
            if parent is not None and parent["info"].get("role") == "user":
                user_id = parent["info"]["id"]
                if user_id not in included:
                    messages.append(parent)
                    included.add(user_id)
            elif user_id is None:
                user = _first_prompt(log, run_number, task, sibling, path, missing)
                user_id = user["info"]["id"]
                messages.append(user)
                included.add(user_id)
            messages.append(_assistant(log, message_id, user_id, recorded))
    info = (
        sibling.info if sibling else {"id": log.session_id, "directory": None, "title": "", "version": None}
    )
    return Native(form="events", info=info, messages=messages, step_messages=[], prompts_missing=missing)


def _first_prompt(
    log: _EventLog, run: int, task: str | None, sibling: Native | None, path: Path, missing: list[int]
) -> Message:
    """The synthesized user message of run `run`: `task` for run 1, else a stand-in (the run's number added
    to `missing`): the CLI prints no prompt, and reruns need only some prompt to start the CLI with; a
    continuation needs the real one (`prompt_missing`)."""
    if run == 1 and task is not None:
        return synthetic_user(log, task, sibling)
    if sibling is not None:
        raise BadInput(
            f"{path}: run {run} of {len(log.runs)} has no user prompt in the session's export next to it "
            f"(an older one?){' and no --task' if run == 1 else ''}: export the session again"
        )
    missing.append(run)
    return synthetic_user(log, STAND_IN_PROMPT, sibling, run - 1)


def synthetic_user(log: _EventLog, task: str, sibling: Native | None, run: int = 0) -> Message:
    first = log.runs[run][0]
    stem = first[4:16]
    try:
        stamp = f"{max(int(stem, 16) - 1, 0):012x}"
    except ValueError:
        stamp = "0" * 12
    message_id = f"msg_{stamp}{SYNTHETIC_SUFFIX}"
    created = log.message_times.get(first, log.first_timestamp) if run else log.first_timestamp
    info: Record = {"role": "user", "time": {"created": created}, "agent": "build"}
    model = _known_model(sibling)
    if model:
        info["model"] = model
    info.update(id=message_id, sessionID=log.session_id)
    part = {
        "type": "text",
        "text": task,
        "id": f"prt_{stamp}{SYNTHETIC_SUFFIX}",
        "sessionID": log.session_id,
        "messageID": message_id,
    }
    return {"info": info, "parts": [part]}


def _known_model(sibling: Native | None) -> Record | None:
    for message in sibling.messages if sibling else []:
        info = message["info"]
        if info.get("role") == "assistant" and info.get("providerID") and info.get("modelID"):
            return {"providerID": info["providerID"], "modelID": info["modelID"]}
    return None


def _assistant(log: _EventLog, message_id: str, user_id: str, recorded: Message | None) -> Message:
    """The log's parts (final states) over the recorded ones (which add what the CLI did not print)."""
    parts = {p["id"]: p for p in recorded["parts"]} if recorded else {}
    parts.update({p: log.parts[p] for p in log.message_parts[message_id]})
    if recorded is not None:
        info = recorded["info"]
    else:
        info = {"id": message_id, "sessionID": log.session_id, "role": "assistant", "parentID": user_id}
        if message_id in log.message_times:  # else the import's default; the store orders by it
            info["time"] = {"created": log.message_times[message_id]}
        finishes = [parts[p].get("reason") for p in sorted(parts) if parts[p].get("type") == "step-finish"]
        if finishes and finishes[-1]:
            info["finish"] = finishes[-1]
    return {"info": info, "parts": [parts[p] for p in sorted(parts)]}


def sibling_session(path: Path, session_id: str) -> Native | None:
    """The same session's export (`*.json`) or store (`*.db`) in the event log's directory, if any."""
    try:
        candidates = sorted(p for p in path.parent.iterdir() if p != path and p.is_file())
    except OSError:
        return None
    for candidate in (p for p in candidates if p.suffix == ".json"):
        try:
            data = read_input(candidate)
            doc, deep = loads_within(data[preamble(data) :], schema.MAX_DEPTH)
        except (BadInput, orjson.JSONDecodeError):
            continue
        if _is_export(doc) and doc["info"]["id"] == session_id:
            return read_export(doc, candidate, deep)
    for candidate in (p for p in candidates if p.suffix == ".db"):
        try:
            if _is_sqlite(candidate):
                return read_sqlite(candidate, session_id)
        except BadInput:
            continue
    return None
