"""Pi (@mariozechner/pi-coding-agent 0.73.x) trajectories in their three native forms, parsed into the
context Pi itself would build. Ground truth: the pinned package's dist/core/session-manager.js,
dist/core/messages.js, pi-ai's providers/transform-messages.js and providers/openai-completions.js.

Forms:
- session: the v3 session file (`~/.pi/agent/sessions/--<cwd>--/<time>_<uuid>.jsonl`): a header
  `{type:"session", version, id, timestamp, cwd}` and entries `{type, id, parentId, timestamp, ...}` that
  form a tree. As `SessionManager.setSessionFile` does, older files are migrated in memory first
  (`migrateToCurrentVersion`: a header without `version` is v1, whose entries get 8-hex ids chained
  linearly and whose compaction `firstKeptEntryIndex` (an index into the file's lines, header included)
  becomes `firstKeptEntryId` (`migrateV1ToV2`); then message role `hookMessage` becomes `custom`
  (`migrateV2ToV3`)). The leaf is the last entry of the file (`_buildIndex`), the active branch is the
  walk from it to the root by `parentId` (`getBranch`), and the messages are `buildSessionContext`'s:
  without a compaction every message, custom_message and (non-empty) branch_summary entry of the branch
  in order; with one, the latest compaction's summary message first, then the entries from its
  `firstKeptEntryId` up to the compaction, then everything after it. Other entry types (model_change,
  thinking_level_change, label, session_info, custom, and types this module does not know) are kept in
  `entries` and contribute no message.
- events: `pi --mode json` stdout, runs appended (a `--continue` run repeats the header line);
- rpc: `pi --mode rpc` stdout: the same events plus `{type:"response", command, success, data?}` lines,
  and no header (neither has the json output of older Pi, 0.30.2 and 0.32.3 seen): a log without one gets
  the header `{type:"session", version:3, id: <rpc get_state's sessionId or None>, timestamp: <the first
  message's, as ISO>, cwd: None}`).
  Both are rebuilt from `message_end` events only (`message_update` partials are mutated while Pi
  streams and may run ahead of their delta): a user, assistant or toolResult message becomes a message
  entry and a custom one a custom_message entry, exactly as `AgentSession` persists them; other roles
  are persisted by Pi from other paths and are not printed as events. The entries are chained linearly
  with fresh ids (deterministic: derived from the file's digest) and run through the same
  `buildSessionContext`, so every form of one session gives the same messages and steps. A model is
  recorded as a model_change entry where an assistant message first shows it (before its run's first
  message, where Pi writes it when the model is picked) and where rpc `set_model`/`cycle_model` answered;
  a thinking level only when the log tells it (a `thinking_level_changed` event, an rpc `get_state`
  answer), since Pi prints it nowhere else and appends the missing entry itself on resume. A log whose
  context changed in a way its events do not show is refused (a compaction, an rpc `bash`, a session
  switch).

A step is an assistant message with toolCall blocks (call order = content order) that Pi did not drop
(`transformMessages` skips stopReason "error"/"aborted" messages, and the agent loop ran no tool for
them); its results are the toolResult messages that follow it up to the next message Pi sends as a user
or assistant message, matched by toolCallId (the first one of an id). Its `message_id` is the message's
`responseId` (the provider's completion id, the same in every form), else its entry id. An
observation's content is the tool message content Pi sends (`convertMessages` of openai-completions):
its text blocks joined by "\\n", lone surrogates removed (`sanitizeSurrogates`), "(see attached image)"
when there is no text; a result with image blocks keeps its block list. Steps before the branch's latest compaction are `before_compaction` and
still listed; those the compaction summarized away have no message in `Native.messages` (-1 in
`step_messages`): `context_messages(entries[:k])` gives the context of any branch prefix.
A session file's line that JSON.parse refuses (two records written with no newline between them, a
torn write) is skipped as Pi's `loadEntriesFromFile` skips it, and named in the trajectory's
`parse_notes`; an event log's is refused with its number (Pi never reads a log back). A record whose
fields are not of the types Pi's own declare is refused (`schema`: a text block without
text, a call without a name, a header Pi could not have named its file after...), naming line and field.
Pi's files name no CLI version, so `agent_version` is None.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, PrivateAttr

from replayer.adapters import carried
from replayer.adapters.pi import schema
from replayer.adapters.shapes import check, fits
from replayer.floor.errors import BadInput, excerpt
from replayer.floor.io import read_input, sha256_soon
from replayer.floor.trajectory import Observation, Step, ToolCall, Trajectory

Record = dict[str, Any]
Form = Literal["session", "events", "rpc"]

AGENT = "pi"
CURRENT_SESSION_VERSION = 3
"""`CURRENT_SESSION_VERSION` of the pinned session-manager.js."""
ENTRY_TYPES = frozenset(
    {
        "message",
        "model_change",
        "thinking_level_change",
        "compaction",
        "branch_summary",
        "custom",
        "custom_message",
        "label",
        "session_info",
    }
)
"""The entry types docs/session-format.md documents (others are kept, and contribute no message)."""
EVENT_TYPES = frozenset(
    {
        "agent_start",
        "agent_end",
        "turn_start",
        "turn_end",
        "message_start",
        "message_update",
        "message_end",
        "tool_execution_start",
        "tool_execution_update",
        "tool_execution_end",
        "response",
    }
)
"""Lines of the json/rpc output that only an event log has (the header line is shared with the file)."""
PERSISTED_ROLES = frozenset({"user", "assistant", "toolResult"})
"""Roles `AgentSession` persists from `message_end` as message entries (`custom` as custom_message)."""
DROPPED_STOPS = frozenset({"error", "aborted"})
"""Assistant messages `transformMessages` leaves out of every request (and whose tools never ran)."""
SWITCHING_COMMANDS = frozenset({"new_session", "switch_session", "fork", "clone", "compact", "bash"})
"""Rpc commands that change the context without printing it as message events."""
MAX_SKIP_NOTES = 10
"""Skipped lines named one by one in `parse_notes`; the rest are counted."""
NO_TEXT = "(see attached image)"
"""openai-completions sends this for a tool result without text."""
_SURROGATE = re.compile("[\ud800-\udfff]")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Native(BaseModel):
    """Parse state the rebuild needs: the session as Pi's SessionManager would hold it."""

    model_config = ConfigDict(extra="forbid")
    form: Form
    header: dict[str, Any]
    """The v3 header (migrated; synthesized for an rpc log: id from `get_state` if answered, else None)."""
    entries: list[dict[str, Any]]
    """Session: the active branch root..leaf, every entry type. Events/rpc: the synthesized entries."""
    step_messages: list[int]
    """Step i (1-based) -> index into `messages` of its assistant message; -1 for a step the latest
    compaction summarized away (not in the context any more)."""
    step_entries: list[int]
    """Step i (1-based) -> index into `entries` of its assistant message entry."""
    model: tuple[str, str] | None
    """(provider, model id): the branch's last model_change or assistant message, as
    `buildSessionContext` finds it."""
    thinking_level: str
    """`buildSessionContext`'s thinking level ("off" when no entry sets it)."""
    format_version: int
    """The session format version the file had before migration (events/rpc: 3)."""
    _context: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    """`buildSessionContext(...).messages` as built, sharing objects with `entries`."""

    @functools.cached_property
    def messages(self) -> list[dict[str, Any]]:
        """`buildSessionContext(...).messages` of the active branch (AgentMessages, before `convertToLlm`).
        They share no objects with `entries`: copied when first read (a parse alone never reads them)."""
        return copied(self._context)


# detection -----------------------------------------------------------------------------------
def looks_like_session(head: list[Any]) -> bool:
    """A session header (v1 has no version, but a cwd) or a v2+ entry (a damaged header line is skipped by
    `read_head`)."""
    first = head[0] if head else None
    return _is_header(first) or _is_entry(first)


def looks_like_events(head: list[Any]) -> bool:
    """A json/rpc event line."""
    return bool(head) and _is_event(head[0])


def _is_header(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and value.get("type") == "session"
        and isinstance(value.get("id"), str)
        and (isinstance(value.get("version"), int) or isinstance(value.get("cwd"), str))
    )


def _is_entry(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("type"), str)
        and value["type"] in ENTRY_TYPES
        and isinstance(value.get("id"), str)
        and "parentId" in value
        and isinstance(value.get("timestamp"), str)
    )


def _is_event(value: Any) -> bool:
    if not isinstance(value, dict):
        return False
    kind = value.get("type")
    if kind in ("agent_start", "turn_start"):
        return set(value) == {"type"}
    if kind in ("message_start", "message_update", "message_end", "turn_end"):
        message = value.get("message")
        return isinstance(message, dict) and isinstance(message.get("role"), str)
    if kind in ("tool_execution_start", "tool_execution_update", "tool_execution_end"):
        return isinstance(value.get("toolCallId"), str) and isinstance(value.get("toolName"), str)
    if kind == "agent_end":
        return isinstance(value.get("messages"), list)
    if kind == "response":
        return isinstance(value.get("command"), str) and isinstance(value.get("success"), bool)
    return False


# parse ---------------------------------------------------------------------------------------
def parse(path: Path, task: str | None = None) -> Trajectory:
    """`task` is accepted for the adapter interface and ignored: every Pi form carries the user message."""
    del task
    raw = read_input(path)
    digest_of = sha256_soon(raw)  # taken on another core while the lines are read
    records, unparsed = _records(raw, path)
    digest = digest_of()
    if not records:
        if unparsed:
            raise _not_json(path, *unparsed[0], "a damaged Pi log")
        raise BadInput(f"{path} is empty (no Pi session header or event)")
    first = records[0][1]["type"]
    is_log = any(r["type"] in EVENT_TYPES for _, r in records)  # no session file has an event type
    if not is_log and (first == "session" or first in ENTRY_TYPES):
        if unparsed and unparsed[0][0] < records[0][0] and first != "session":
            raise _not_json(path, *unparsed[0], "the session header's line: Pi would start the file anew")
        native, sources = read_session(records, path, digest)
    elif is_log:
        # Pi reads no event log back (no loader to follow), and a lost message_end changes the context
        if unparsed:
            raise _not_json(path, *unparsed[0], "a damaged Pi event log")
        native, sources = read_events(records, path, digest)
    else:
        raise BadInput(f"{path} holds neither a Pi session header nor a Pi event")
    steps = _steps(native, sources)
    native.step_messages = [m for _, m, _ in steps]
    native.step_entries = [e for _, _, e in steps]
    traj = Trajectory(
        agent=AGENT,
        agent_version=None,
        session_id=_str_or_none(native.header.get("id")),
        cwd=_str_or_none(native.header.get("cwd")),
        source=str(path),
        source_sha256=digest,
        steps=[s for s, _, _ in steps],
        parse_notes=_skip_notes(unparsed)
        + (carried.note((r["type"] for _, r in records), ENTRY_TYPES | {"session"}) if not is_log else []),
    )
    traj.keep_native(native)
    return traj


def _records(raw: bytes, path: Path) -> tuple[list[tuple[int, Record]], list[tuple[int, str]]]:
    """(line number, object) of every non-blank line (`schema.load_line`: lone surrogates are read), and
    (line number, why) of the lines JSON.parse refuses, which Pi's session loader skips."""
    records: list[tuple[int, Record]] = []
    unparsed: list[tuple[int, str]] = []
    source = str(path)
    short = 2 * schema.MAX_DEPTH + 1  # a line this short nests no deeper (`shapes.shallow_text`)
    for number, line in enumerate(raw.split(b"\n"), 1):
        if not line or line.isspace():  # blank (strip() would copy the line)
            continue
        try:  # `schema.load_line`, its common case inline
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            try:
                value = schema.load_line(line, source, number)
            except schema.NotJson as exc:
                unparsed.append((number, exc.reason))
                continue
        else:
            if len(line) > short:
                schema.shallow_checked(value, line, source, number)
        if not isinstance(value, dict) or not isinstance(value.get("type"), str):
            raise BadInput(f"{path}: line {number} is not a Pi record (no type)")
        records.append((number, value))
    return records, unparsed


def _not_json(path: Path, number: int, reason: str, what: str) -> BadInput:
    return BadInput(f"{path}: line {number} is not JSON: {reason} ({what})")


def _skip_notes(unparsed: list[tuple[int, str]]) -> list[str]:
    """The session file's lines Pi skips (`loadEntriesFromFile` drops a line JSON.parse throws on)."""
    notes = [
        f"line {number} skipped, as Pi's session loader skips a line that is not JSON: {reason}"
        for number, reason in unparsed[:MAX_SKIP_NOTES]
    ]
    if len(unparsed) > MAX_SKIP_NOTES:
        notes.append(
            f"{len(unparsed) - MAX_SKIP_NOTES} more lines that are not JSON skipped, as Pi skips them"
        )
    return notes


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


# session file --------------------------------------------------------------------------------
def read_session(records: list[tuple[int, Record]], path: Path, digest: str) -> tuple[Native, list[int]]:
    """`SessionManager.setSessionFile` + `buildSessionContext`, in memory (nothing is rewritten)."""
    number, header = records[0]
    if header.get("type") != "session" or not isinstance(header.get("id"), str):
        # loadEntriesFromFile: Pi would take the file for a corrupt one and start a new session in it
        raise BadInput(f"{path}: line {number} is not a Pi session header (type session with an id)")
    version = header.get("version")
    version = 1 if version is None else version
    if not isinstance(version, int) or version < 1:
        raise BadInput(f"{path}: line {number} has an invalid session version {excerpt(version)}")
    if version > CURRENT_SESSION_VERSION:
        raise BadInput(
            f"{path}: session format version {version} is newer than the pinned Pi reads "
            f"({CURRENT_SESSION_VERSION})"
        )
    check(schema.Header, header, str(path), f"line {number}")
    for number, entry in records[1:]:  # before the migration, which gives v1 entries their ids
        if entry["type"] != "session":
            _check_fields(entry, str(path), f"line {number}")
    migrate([r for _, r in records], digest)
    by_id: dict[str, Record] = {}
    leaf: Record | None = None
    for number, entry in records:
        if entry["type"] == "session":
            continue
        _check_entry(entry, path, number)
        by_id[entry["id"]] = entry  # _buildIndex: a repeated id, the last one wins
        leaf = entry  # _buildIndex: the leaf is the file's last entry
    branch = get_branch(leaf, by_id, path)
    return _native("session", records[0][1], branch, version)


def migrate(entries: list[Record], seed: str = "") -> int:
    """`migrateToCurrentVersion` (in place); returns the version the entries had. The ids v1 entries get
    are derived from `seed` (the file's digest) instead of random ones, so that a parse is reproducible."""
    header = next((e for e in entries if e.get("type") == "session"), None)
    version = header.get("version") if header else None
    version = 1 if version is None else version
    if version >= CURRENT_SESSION_VERSION:
        return int(version)
    if version < 2:
        _migrate_v1_to_v2(entries, seed)
    if version < 3:
        _migrate_v2_to_v3(entries)
    return int(version)


def _migrate_v1_to_v2(entries: list[Record], seed: str) -> None:
    """`migrateV1ToV2`: ids chained linearly; `firstKeptEntryIndex` (into `entries`, header included)
    becomes `firstKeptEntryId` when it names an entry that already has an id."""
    ids: set[str] = set()
    prev: str | None = None
    for n, entry in enumerate(entries):
        if entry.get("type") == "session":
            entry["version"] = 2
            continue
        entry["id"] = _fresh_id(ids, f"{seed}:v1:{n}")
        entry["parentId"] = prev
        prev = entry["id"]
        index = entry.get("firstKeptEntryIndex")
        if (
            entry.get("type") == "compaction"
            and isinstance(index, int | float)
            and not isinstance(index, bool)
        ):
            # entries[index]: an index that is no array index (negative, fractional, too big) is undefined
            target = entries[int(index)] if index == int(index) and 0 <= index < len(entries) else None
            if target is not None and target.get("type") != "session" and "id" in target:
                entry["firstKeptEntryId"] = target["id"]
            del entry["firstKeptEntryIndex"]


def _migrate_v2_to_v3(entries: list[Record]) -> None:
    """`migrateV2ToV3`: message role hookMessage -> custom."""
    for entry in entries:
        if entry.get("type") == "session":
            entry["version"] = 3
            continue
        message = entry.get("message")
        if (
            entry.get("type") == "message"
            and isinstance(message, dict)
            and message.get("role") == "hookMessage"
        ):
            message["role"] = "custom"


def _fresh_id(taken: set[str], seed: str) -> str:
    """`generateId`'s shape (8 hex, collision-checked), derived from `seed` so a parse is reproducible."""
    for attempt in range(100):
        candidate = hashlib.sha256(f"{seed}:{attempt}".encode()).hexdigest()[:8]
        if candidate not in taken:
            taken.add(candidate)
            return candidate
    raise AssertionError("no free entry id")  # pragma: no cover - 100 collisions of 32-bit ids


def _check_entry(entry: Record, path: Path, number: int) -> None:
    """The tree links of a (migrated) entry; its other fields are checked by `_check_fields`."""
    if not isinstance(entry.get("id"), str):
        raise BadInput(f"{path}: line {number} is a Pi session entry without an id")
    parent = entry.get("parentId")
    if parent is not None and not isinstance(parent, str):
        raise BadInput(f"{path}: line {number} has a parentId that is not a string")


def _check_fields(entry: Record, source: str, line: str) -> None:
    """An entry's own fields and its message, as the context and the request conversion read them."""
    if entry["type"] == "message" and fits(schema.MessageEntry, entry):
        return
    model = schema.ENTRIES.get(entry["type"], schema.Entry)
    check(model, entry, source, line)
    if entry["type"] == "message":
        _check_message(entry.get("message"), source, line)


def _check_message(message: Any, source: str, line: str) -> Record:
    """What `buildSessionContext` and the request conversion read (`message` is the field of an entry or
    of a message_end event), typed by role."""
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise BadInput(f"{source}: {line} has no message with a role")
    check(schema.MESSAGES.get(message["role"], schema.Message), message, source, line, "message")
    checked: Record = message
    return checked


def get_branch(leaf: Record | None, by_id: dict[str, Record], path: Path) -> list[Record]:
    """`getBranch(leafId)`: leaf to root by parentId (a parent not in the file ends the walk, as in Pi),
    returned root first. Pi would loop forever on a cycle; it is refused."""
    branch: list[Record] = []
    seen: set[str] = set()
    current = leaf
    while current is not None:
        if current["id"] in seen:
            raise BadInput(f"{path}: the parentId chain of entry {current['id']} loops back to itself")
        seen.add(current["id"])
        branch.append(current)
        parent = current.get("parentId")
        current = by_id.get(parent) if parent else None
    branch.reverse()
    return branch


def _native(form: Form, header: Record, entries: list[Record], version: int) -> tuple[Native, list[int]]:
    """The parse state, and the index in `entries` of each context message (`build_session_context`)."""
    messages, sources, model, thinking = build_session_context(entries)
    # not validated again: the entries were checked as read, the rest is built here (validation would
    # copy every entry and message)
    native = Native.model_construct(
        form=form,
        header=header,
        entries=entries,
        step_messages=[],
        step_entries=[],
        model=model,
        thinking_level=thinking,
        format_version=version,
    )
    native._context = messages
    return native, sources


def build_session_context(
    branch: list[Record],
) -> tuple[list[Record], list[int], tuple[str, str] | None, str]:
    """`buildSessionContext` over an active branch (root first): the messages, the index in `branch` of
    the entry each message came from, the model and the thinking level."""
    thinking: Any = "off"
    model: tuple[str, str] | None = None
    compaction: int | None = None
    for i, entry in enumerate(branch):
        kind = entry["type"]
        if kind == "thinking_level_change":
            thinking = entry.get("thinkingLevel")
        elif kind == "model_change":
            model = _model(entry.get("provider"), entry.get("modelId"))
        elif kind == "message" and entry["message"]["role"] == "assistant":
            message = entry["message"]
            model = _model(message.get("provider"), message.get("model"))
        elif kind == "compaction":
            compaction = i
    messages: list[Record] = []
    sources: list[int] = []

    def append(i: int) -> None:
        message = _context_message(branch[i])
        if message is not None:
            messages.append(message)
            sources.append(i)

    if compaction is None:
        for i in range(len(branch)):
            append(i)
    else:
        entry = branch[compaction]
        # compactionIdx: the first compaction on the path with the latest one's id
        compaction = next(
            i for i, e in enumerate(branch) if e["type"] == "compaction" and e["id"] == entry["id"]
        )
        summary = _js_object(
            ("role", "compactionSummary"),
            ("summary", entry.get("summary", _UNDEFINED)),
            ("tokensBefore", entry.get("tokensBefore", _UNDEFINED)),
            ("timestamp", _ms(entry.get("timestamp"))),
        )
        messages.append(summary)
        sources.append(compaction)
        kept = False
        for i in range(compaction):
            kept = kept or branch[i]["id"] == entry.get("firstKeptEntryId")
            if kept:
                append(i)
        for i in range(compaction + 1, len(branch)):
            append(i)
    return messages, sources, model, thinking if isinstance(thinking, str) else "off"


def context_messages(entries: list[Record]) -> list[Record]:
    """The messages Pi sends when the leaf is `entries[-1]` of a branch given root first (a prefix of a
    branch is a branch): the context of a rebuilt prefix, compactions included, as copies."""
    return copied(build_session_context(entries)[0])


def copied(values: list[Record]) -> list[Record]:
    """A deep copy of values read from JSON, written and read back by orjson (many times faster than
    `copy.deepcopy`); by `copy.deepcopy` when orjson cannot write them (a lone surrogate)."""
    try:
        copy_: list[Record] = orjson.loads(orjson.dumps(values))
    except TypeError:
        return copy.deepcopy(values)
    return copy_


def _model(provider: Any, model_id: Any) -> tuple[str, str] | None:
    """A (provider, model id) pair; None when either is missing (Pi would carry `undefined`)."""
    return (provider, model_id) if isinstance(provider, str) and isinstance(model_id, str) else None


class _Undefined:
    """A JS property left undefined: JSON.stringify drops it."""


_UNDEFINED = _Undefined()


def _js_object(*pairs: tuple[str, Any]) -> Record:
    return {k: v for k, v in pairs if v is not _UNDEFINED}


def _context_message(entry: Record) -> Record | None:
    """`appendMessage` inside `buildSessionContext` (createCustomMessage, createBranchSummaryMessage)."""
    kind = entry["type"]
    if kind == "message":
        return entry["message"]
    if kind == "custom_message":
        return _js_object(
            ("role", "custom"),
            ("customType", entry.get("customType", _UNDEFINED)),
            ("content", entry.get("content", _UNDEFINED)),
            ("display", entry.get("display", _UNDEFINED)),
            ("details", entry.get("details", _UNDEFINED)),
            ("timestamp", _ms(entry.get("timestamp"))),
        )
    if kind == "branch_summary" and entry.get("summary"):
        return _js_object(
            ("role", "branchSummary"),
            ("summary", entry["summary"]),
            ("fromId", entry.get("fromId", _UNDEFINED)),
            ("timestamp", _ms(entry.get("timestamp"))),
        )
    return None


def _ms(stamp: Any) -> int | None:
    """`new Date(timestamp).getTime()` of an ISO entry timestamp (NaN, which JSON prints as null: None)."""
    if not isinstance(stamp, str):
        return None
    try:
        parsed = datetime.fromisoformat(stamp)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return (parsed - _EPOCH) // timedelta(milliseconds=1)


def _iso(ms: Any) -> str | None:
    """`new Date(ms).toISOString()`."""
    if not isinstance(ms, int) or isinstance(ms, bool):
        return None
    try:
        stamp = _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return None
    return f"{stamp:%Y-%m-%dT%H:%M:%S}.{ms % 1000:03d}Z"


# events and rpc ------------------------------------------------------------------------------
@dataclass
class _Log:
    """What the event lines say, before they are chained into entries."""

    header: Record | None = None
    form: Form = "events"
    items: list[tuple[str, Any]] = field(default_factory=list)
    """("message", AgentMessage) | ("model", (provider, model id)) | ("thinking", level), in order."""
    session_id: str | None = None
    """From an rpc `get_state` answer."""
    initial_thinking: str | None = None
    """From an rpc `get_state` answered before any thinking level change."""


def read_events(records: list[tuple[int, Record]], path: Path, digest: str) -> tuple[Native, list[int]]:
    log = _read_log(records, path)
    header = log.header
    if header is None:
        first = next((m for kind, m in log.items if kind == "message"), None)
        stamp = _iso(first.get("timestamp")) if first else None
        header = {
            "type": "session",
            "version": CURRENT_SESSION_VERSION,
            "id": log.session_id,
            "timestamp": stamp,
            "cwd": None,
        }
    entries = _chain(log, header, digest)
    return _native(log.form, header, entries, CURRENT_SESSION_VERSION)


def _read_log(records: list[tuple[int, Record]], path: Path) -> _Log:
    log = _Log()
    model: tuple[str, str] | None = None
    run_start = 0
    run_has_assistant = False
    for number, event in records:
        kind = event["type"]
        source, line = str(path), f"line {number}"
        where = f"{source}: {line}"
        if kind == "session":
            check(schema.Header, event, source, line)
            if log.header is None:
                log.header = event
            elif event.get("id") != log.header.get("id"):
                raise BadInput(
                    f"{where} starts session {event.get('id')}, not {log.header.get('id')} "
                    "(one event log a session)"
                )
        elif kind == "agent_start":
            run_start, run_has_assistant = len(log.items), False
        elif kind == "message_end":
            message = _check_message(event.get("message"), source, line)
            role = message["role"]
            if role not in PERSISTED_ROLES and role != "custom":
                continue  # AgentSession persists no other role from message_end
            if role == "assistant":
                shown = _model(message.get("provider"), message.get("model"))
                if shown is not None and shown != model:
                    at = len(log.items) if run_has_assistant else run_start
                    log.items.insert(at, ("model", shown))
                    model = shown
                run_has_assistant = True
            log.items.append(("message", message))
        elif kind == "thinking_level_changed" and isinstance(event.get("level"), str):
            log.items.append(("thinking", event["level"]))
        elif kind == "compaction_end" and isinstance(event.get("result"), dict) and not event.get("aborted"):
            raise BadInput(
                f"{where}: Pi compacted the context here, which its event log does not show: "
                "pass the session file instead"
            )
        elif kind == "response":
            check(schema.RpcResponse, event, source, line)
            log.form = "rpc"
            model = _response(event, log, model, source, line)
    return log


def _response(
    event: Record, log: _Log, model: tuple[str, str] | None, source: str, line: str
) -> tuple[str, str] | None:
    """An rpc command's answer: what it tells of the session, or a refusal for a context it changed."""
    where = f"{source}: {line}"
    if not event.get("success"):
        return model
    command, data = event.get("command"), event.get("data")
    if command in SWITCHING_COMMANDS:
        raise BadInput(
            f"{where}: the rpc command {command} changed the context in a way the event log does not "
            "show: pass the session file instead"
        )
    if command == "get_state" and isinstance(data, dict):
        check(schema.GetState, data, source, line, "data")
        if isinstance(data.get("sessionId"), str):
            log.session_id = log.session_id or data["sessionId"]
        seen_thinking = any(kind == "thinking" for kind, _ in log.items)
        if isinstance(data.get("thinkingLevel"), str) and not seen_thinking and log.initial_thinking is None:
            log.initial_thinking = data["thinkingLevel"]
    chosen = data.get("model") if command == "cycle_model" and isinstance(data, dict) else data
    if command in ("set_model", "cycle_model") and isinstance(chosen, dict):
        picked = _model(chosen.get("provider"), chosen.get("id"))
        if picked is not None and picked != model:
            log.items.append(("model", picked))
            return picked
    return model


def _chain(log: _Log, header: Record, digest: str) -> list[Record]:
    """The entries `AgentSession` would have appended, each the child of the one before."""
    items = list(log.items)
    if log.initial_thinking is not None:
        at = 1 if items and items[0][0] == "model" else 0
        items.insert(at, ("thinking", log.initial_thinking))
    stamps: list[str | None] = [None] * len(items)
    following: str | None = None
    for i in range(len(items) - 1, -1, -1):  # a setting takes the time of the message after it
        kind, value = items[i]
        if kind == "message":
            following = _iso(value.get("timestamp")) or following
        stamps[i] = following
    last = header.get("timestamp") if isinstance(header.get("timestamp"), str) else None
    taken: set[str] = set()
    entries: list[Record] = []
    parent: str | None = None
    for i, (kind, value) in enumerate(items):
        stamp = stamps[i] if kind != "message" else _iso(value.get("timestamp"))
        stamp = stamp or last
        last = stamp
        entry_id = _fresh_id(taken, f"{digest}:{i}")
        if kind == "model":
            entry: Record = {
                "type": "model_change",
                "id": entry_id,
                "parentId": parent,
                "timestamp": stamp,
                "provider": value[0],
                "modelId": value[1],
            }
        elif kind == "thinking":
            entry = {
                "type": "thinking_level_change",
                "id": entry_id,
                "parentId": parent,
                "timestamp": stamp,
                "thinkingLevel": value,
            }
        elif value["role"] == "custom":  # appendCustomMessageEntry
            entry = _js_object(
                ("type", "custom_message"),
                ("customType", value.get("customType", _UNDEFINED)),
                ("content", value.get("content", _UNDEFINED)),
                ("display", value.get("display", _UNDEFINED)),
                ("details", value.get("details", _UNDEFINED)),
                ("id", entry_id),
                ("parentId", parent),
                ("timestamp", stamp),
            )
        else:  # appendMessage
            entry = {
                "type": "message",
                "id": entry_id,
                "parentId": parent,
                "timestamp": stamp,
                "message": copy.deepcopy(value),
            }
        entries.append(entry)
        parent = entry_id
    return entries


# steps ---------------------------------------------------------------------------------------
def _steps(native: Native, sources: list[int]) -> list[tuple[Step, int, int]]:
    """(step, index in messages or -1, index in entries) for each assistant message with tool calls;
    `sources`: the entry of each context message."""
    branch = native.entries
    in_context = {src: at for at, src in enumerate(sources) if branch[src]["type"] != "compaction"}
    # one pass: each assistant message with tool calls, and the toolResult messages of its span (`_results`)
    found: list[tuple[int, Record, list[Record], dict[str, Record]]] = []
    results: dict[str, Record] | None = None
    compaction = -1
    for i, entry in enumerate(branch):
        kind = entry["type"]
        if kind != "message":
            if kind == "compaction":
                compaction = i
            if results is not None and _interrupts(entry):
                results = None
            continue
        message: Any = entry.get("message")
        role = message.get("role") if isinstance(message, dict) else None
        if role == "toolResult":
            if results is not None:
                results.setdefault(message["toolCallId"], message)
            continue
        if results is not None and _interrupts(entry):
            results = None
        if role != "assistant" or message.get("stopReason") in DROPPED_STOPS:
            continue
        blocks = [b for b in message["content"] if b.get("type") == "toolCall"]
        if blocks:
            results = {}
            found.append((i, entry, blocks, results))
    steps: list[tuple[Step, int, int]] = []
    for i, entry, blocks, results in found:
        message = entry["message"]
        calls = [_call(block, results.get(block["id"])) for block in blocks]
        step = Step(
            len(steps) + 1,
            str(message.get("responseId") or entry["id"]),
            calls,
            all(c.historical is not None for c in calls),
            i < compaction,
        )
        steps.append((step, in_context.get(i, -1), i))
    return steps


def _interrupts(entry: Record) -> bool:
    """`convertToLlm` makes this entry a user or assistant message (an excluded bash run is dropped)."""
    kind = entry["type"]
    if kind == "message":
        message = entry["message"]
        return not (message.get("role") == "bashExecution" and message.get("excludeFromContext"))
    return kind in ("custom_message", "compaction") or (
        kind == "branch_summary" and bool(entry.get("summary"))
    )


def _call(block: Record, result: Record | None) -> ToolCall:
    """A call of checked entries (`schema.py`): no second validation."""
    arguments = block.get("arguments")
    historical = None
    if result is not None:
        is_error = result.get("isError")
        historical = Observation(
            tool_content(result), is_error if isinstance(is_error, bool) else None, result
        )
    return ToolCall(
        block["id"], str(block.get("name")), arguments if isinstance(arguments, dict) else {}, historical
    )


def tool_content(result: Record) -> str | list[dict[str, Any]]:
    """The `tool` message content openai-completions sends for a toolResult: its text blocks joined by
    "\\n" (sanitizeSurrogates), or the placeholder when there is no text; with image blocks, the blocks."""
    content = result.get("content")
    if isinstance(content, str):  # not Pi's type, but what a string would be sent as
        return _no_surrogates(content) or NO_TEXT
    blocks: list[dict[str, Any]] = content if isinstance(content, list) else []
    texts = []
    for block in blocks:
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text"))
        elif kind == "image":
            return blocks
    text = (
        "\n".join(t if isinstance(t, str) else _js_text(t) for t in texts)
        if len(texts) != 1
        else _js_text(texts[0])
    )
    return _no_surrogates(text) if text else NO_TEXT


def _no_surrogates(text: str) -> str:
    """`sanitizeSurrogates`; an ASCII string (known in constant time) has none to remove."""
    return text if text.isascii() else _SURROGATE.sub("", text)


def _js_text(value: Any) -> str:
    """Array.prototype.join: undefined and null are empty."""
    return "" if value is None else value if isinstance(value, str) else str(value)
