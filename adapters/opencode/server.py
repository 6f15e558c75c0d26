"""OpenCode's server shapes (opencode-ai 1.18.x `opencode serve`), read into the export's message shape.

- messages: the body of `GET /session/{id}/message` without `limit`, a JSON list of `{info, parts}` in
  session order (the pinned server's `session.messages` route: `Array(MessageV2.WithParts)`, the same
  records `opencode export` prints under `messages`, without the session record).
- array: the same events saved as one JSON array (a client that collects the stream's values).
- stream: a dump of `GET /event` (each `data:` line one `{id, type, properties}` bus event) or of
  `GET /global/event` (`{directory?, project?, payload: {id, type, properties}}`; its `sync` payloads
  repeat the bus events in the event store's form and are skipped). The final state is rebuilt the way
  the CLI's own clients keep it: `message.updated` replaces a message's info and `message.part.updated` a
  part, by id; `message.part.delta` appends to a part's field; `message.removed` and
  `message.part.removed` drop one; `session.created`/`session.updated` give the session record. Messages
  are ordered as the store reads them (time created, then id), parts by id. Other events (status, diffs,
  heartbeats, files, plugins ...) carry no session content.

Both must hold one whole session: several sessions are refused (one session a file), and so is a list
that begins after the session did (a page, or a dump started late: an assistant message whose parent
user message is not in it). Records are checked against the pinned CLI's schemas at the line that
carries them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters import held
from replayer.adapters.head import SSE_FIELDS, SseData
from replayer.adapters.opencode import schema
from replayer.adapters.shapes import check, too_deep
from replayer.floor.errors import BadInput, bad_record, excerpt
from replayer.floor.io import read_input
from replayer.floor.trajectory import HeldSession

Record = dict[str, Any]
Message = dict[str, Any]
MESSAGE_EVENTS = frozenset(
    {
        "message.updated",
        "message.removed",
        "message.part.updated",
        "message.part.removed",
        "message.part.delta",
    }
)
SESSION_EVENTS = frozenset({"session.created", "session.updated"})
KNOWN_EVENTS = MESSAGE_EVENTS | SESSION_EVENTS | {"server.connected", "session.status", "session.idle"}
"""Event types that mark a stream as OpenCode's (detection)."""


def record_name(value: Any) -> str:
    """A record's id for a refusal: as it is when it is a short string, else a short excerpt."""
    return value if isinstance(value, str) and len(value) <= 64 else excerpt(value, 40)


# detection -----------------------------------------------------------------------------------
def is_message(value: Any) -> bool:
    info = value.get("info") if isinstance(value, dict) else None
    return (
        isinstance(info, dict)
        and str(info.get("id", "")).startswith("msg")
        and str(info.get("sessionID", "")).startswith("ses")
        and isinstance(value.get("parts"), list)
    )


def looks_like_messages(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and is_message(value[0])


def looks_like_event_array(value: Any) -> bool:
    """A JSON array of the server's bus events (the stream's values, saved as one document)."""
    return isinstance(value, list) and bool(value) and bus_event(value[0])[0] in KNOWN_EVENTS


def looks_like_stream(value: Any) -> bool:
    return isinstance(value, SseData) and any(bus_event(v)[0] in KNOWN_EVENTS for v in value.values)


def is_stream(raw: bytes) -> bool:
    """Whether the file reads as a server-sent-events dump: its first non-blank line is an SSE field."""
    for line in raw.splitlines():
        if line.strip():
            return line.startswith(SSE_FIELDS)
    return False


def bus_event(value: Any) -> tuple[str | None, Any, str]:
    """(type, properties, the field path of properties) of an `/event` or `/global/event` value."""
    if not isinstance(value, dict):
        return None, None, ""
    if isinstance(value.get("payload"), dict):
        value, field = value["payload"], "payload.properties"
    else:
        field = "properties"
    kind = value.get("type")
    return (kind if isinstance(kind, str) else None), value.get("properties"), field


# one whole session -----------------------------------------------------------------------------
def only_session(session_ids: Iterable[str], source: str) -> str:
    """The one session the records belong to (ids in order of appearance), or a refusal."""
    ids = list(dict.fromkeys(session_ids))
    if not ids:
        raise BadInput(f"{source} holds no opencode message")
    if len(ids) > 1:
        named = ", ".join(record_name(i) for i in ids[:5]) + (", ..." if len(ids) > 5 else "")
        raise BadInput(
            f"{source} holds {len(ids)} opencode sessions ({named}): run `opencode export <id>` for the one "
            "to replay and pass that file"
        )
    return ids[0]


def whole(messages: list[Message], source: str) -> None:
    """Refuse a list that starts after its session did: a reply whose prompt is not in it."""
    ids = {m["info"]["id"] for m in messages}
    for message in messages:
        info = message["info"]
        if info.get("role") == "assistant" and info.get("parentID") not in ids:
            raise BadInput(
                f"{source}: message {record_name(info['id'])} answers {record_name(info.get('parentID'))}, "
                "which it does not hold: not the whole session (a page, or a stream dumped after the session "
                "began); fetch GET /session/<id>/message without limit or run `opencode export <id>`"
            )


# the event stream ------------------------------------------------------------------------------
class _State:
    """The messages, parts and session record the events so far leave, by id."""

    def __init__(self) -> None:
        self.infos: dict[str, Record] = {}
        self.parts: dict[str, Record] = {}
        self.sessions: dict[str, Record] = {}

    def apply(self, kind: str, props: Record, source: str, where: str, field: str) -> None:
        if kind == "message.updated":
            info = _record(schema.Info, props, "info", source, where, field)
            self.infos[info["id"]] = info
        elif kind == "message.part.updated":
            part = _record(schema.Part, props, "part", source, where, field)
            self.parts[part["id"]] = part
        elif kind == "message.part.delta":
            self._delta(props, source, where, field)
        elif kind == "message.removed":
            message_id = _string(props, "messageID", source, where, field)
            self.infos.pop(message_id, None)
            self.parts = {k: p for k, p in self.parts.items() if p["messageID"] != message_id}
        elif kind == "message.part.removed":
            self.parts.pop(_string(props, "partID", source, where, field), None)
        elif kind in SESSION_EVENTS:
            info = _record(schema.Session, props, "info", source, where, field)
            self.sessions[info["id"]] = info

    def _delta(self, props: Record, source: str, where: str, field: str) -> None:
        """Streamed text appended to a part's field (a later `message.part.updated` carries it whole)."""
        part_id = _string(props, "partID", source, where, field)
        name = _string(props, "field", source, where, field)
        delta = _string(props, "delta", source, where, field)
        part = self.parts.get(part_id)
        if part is None:  # the CLI's clients drop a delta for a part they do not hold
            return
        if not isinstance(part.get(name, ""), str):
            raise bad_record(source, f"{where}, field {field}.field", "names no text field of its part", name)
        self.parts[part_id] = {**part, name: part.get(name, "") + delta}

    def messages(self, source: str) -> tuple[str, list[Message]]:
        """The one session's id and its messages in store order, each with its parts by id."""
        records = [*self.infos.values(), *self.parts.values()]
        session_id = only_session((r["sessionID"] for r in records), source)
        by_message: dict[str, list[Record]] = {}
        for part_id in sorted(self.parts):
            by_message.setdefault(self.parts[part_id]["messageID"], []).append(self.parts[part_id])
        orphans = sorted(by_message.keys() - self.infos.keys())
        if orphans:
            raise BadInput(
                f"{source}: message {record_name(orphans[0])} has parts but no message.updated event "
                "(the stream was dumped after it began?)"
            )
        prompts = [i["id"] for i in self.infos.values() if i["role"] == "user" and i["id"] not in by_message]
        if prompts:
            raise BadInput(
                f"{source}: user message {record_name(prompts[0])} has no part in the stream (its prompt was "
                "sent before the stream was dumped?)"
            )
        order = sorted(self.infos.values(), key=lambda i: (_created(i), i["id"]))
        return session_id, [{"info": info, "parts": by_message.get(info["id"], [])} for info in order]


def _record(model: Any, props: Record, key: str, source: str, where: str, field: str) -> Record:
    """`props[key]`, a record of the pinned CLI's `model`, or a refusal naming the line and the field."""
    value = props.get(key)
    if not isinstance(value, dict):
        problem = "missing" if value is None else "should be an object"
        raise bad_record(source, f"{where}, field {field}.{key}", problem, value)
    check(model, value, source, where, f"{field}.{key}")
    return value


def _string(props: Record, key: str, source: str, where: str, field: str) -> str:
    value = props.get(key)
    if not isinstance(value, str):
        raise bad_record(
            source,
            f"{where}, field {field}.{key}",
            "missing" if value is None else "should be a string",
            value,
        )
    return value


def _created(info: Record) -> int | float:
    created = (info.get("time") or {}).get("created")
    return created if isinstance(created, int | float) and not isinstance(created, bool) else 0


def read_stream(raw: bytes, path: Path) -> tuple[Record | None, list[Message]]:
    """The session record (None when the stream carried none) and the messages a dump leaves."""
    return _replay(_stream_values(raw, str(path)), str(path))


def read_array(values: list[Any], path: Path) -> tuple[Record | None, list[Message]]:
    """The same from the stream's events saved as one JSON array (`[{id, type, properties}, ...]`, or
    `/global/event`'s `{directory, payload}` values), as a client that collects them writes it."""
    return _replay(((f"event {i}", value) for i, value in enumerate(values)), str(path))


def _stream_values(raw: bytes, source: str) -> Iterator[tuple[str, Any]]:
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip() or (line.startswith(SSE_FIELDS) and not line.startswith(b"data:")):
            continue
        where = f"line {number}"
        if not line.startswith(b"data:"):
            raise BadInput(
                f"{source}: {where} is no server-sent-events line (`data: <json>`): {excerpt(line[:80])}"
            )
        try:
            value = orjson.loads(line[5:])
        except orjson.JSONDecodeError:
            raise BadInput(f"{source}: {where} is not JSON (a damaged opencode event stream)") from None
        yield where, value


def _replay(events: Iterable[tuple[str, Any]], source: str) -> tuple[Record | None, list[Message]]:
    state = _State()
    for where, value in events:
        if too_deep(value, schema.MAX_DEPTH):
            raise bad_record(source, where, f"nests deeper than {schema.MAX_DEPTH} levels")
        kind, props, field = bus_event(value)
        if kind is None:
            raise BadInput(f"{source}: {where} is not an opencode server event (no type)")
        if kind not in MESSAGE_EVENTS | SESSION_EVENTS:
            continue
        if not isinstance(props, dict):
            raise bad_record(source, f"{where}, field {field}", "should be an object", props)
        state.apply(kind, props, source, where, field)
    session_id, messages = state.messages(source)
    return state.sessions.get(session_id), messages


# files of several sessions ---------------------------------------------------------------------
def sessions_held(path: Path, first_line: bytes) -> list[HeldSession] | None:
    """The sessions of `run --format json` logs appended in one file (each event carries its `sessionID`),
    or of a server's event dump (`GET /event`, `/global/event`); None for any other file."""
    if first_line.startswith(SSE_FIELDS):
        return _stream_sessions(path)
    if _run_log_session(held.first_json_line(first_line)) is None:
        return None
    return held.by_line(path, "opencode_events", "an OpenCode event", _run_log_session, lambda _: None)


def _run_log_session(value: Any) -> str | None:
    if not isinstance(value, dict):
        return None
    session = value.get("sessionID")
    return session if isinstance(session, str) and isinstance(value.get("type"), str) else None


def _stream_sessions(path: Path) -> list[HeldSession] | None:
    """By the `sessionID` every session event carries. Events of no session (the connection, heartbeats,
    `/global/event`'s `sync` copies) hold no content and go with none. Anything that is not such a stream is
    left to the parser, which says what is wrong."""
    found: dict[str, list[int]] = {}
    first_user: dict[str, str] = {}
    prompts: dict[str, str | None] = {}
    for number, line in enumerate(read_input(path).splitlines(), 1):
        if not line.startswith(b"data:"):
            continue
        try:
            kind, props, _ = bus_event(orjson.loads(line[5:]))
        except orjson.JSONDecodeError:
            return None
        session = props.get("sessionID") if isinstance(props, dict) else None
        if kind is None:
            return None
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
    return held.several("opencode_stream", found, prompts, event_end=b"\n\n")  # an event ends at a blank line
