"""Claude Code's session JSONL -> the active chain, as the pinned CLI rebuilds it on --resume.

Rules (docs/adapters/claude_code.md, observed with 2.1.197): the leaf is the last
`last-prompt.leafUuid` when it is a leaf, else the last user/assistant record; the parentUuid
walk repairs a missing parent with the closest earlier record within 5 s; split assistant
records of one API message and the tool results hanging off them are recovered by message.id.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from adapters.shapes import ORJSON_DEPTH, unwritable
from replayer.errors import BadInput, bad_record
from replayer.io import open_input

Record = dict[str, Any]
CHAIN_TYPES = ("user", "assistant")
PARENT_REPAIR_WINDOW_MS = 5000
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
"""A session id becomes a file name and a command-line argument: no path separators, no leading dash."""
MAX_DEPTH = ORJSON_DEPTH
"""orjson writes nothing nested deeper; a record that could not be written back is refused when read."""


class Session:
    """The parsed file: every record in file order, plus the indexes the chain rules need."""

    def __init__(self, records: list[Record], skipped_lines: list[int], sha256: str = ""):
        self.records = records
        self.skipped_lines = skipped_lines
        self.sha256 = sha256
        self.by_uuid: dict[str, Record] = {r["uuid"]: r for r in records if isinstance(r.get("uuid"), str)}
        self.position = {id(r): i for i, r in enumerate(records)}
        self._timelines: dict[bool, tuple[list[float], list[Record]]] = {}

    def timeline(self, sidechain: bool) -> tuple[list[float], list[Record]]:
        """Records with a uuid and a timestamp, sorted by (time, file order), for the parent repair."""
        if sidechain not in self._timelines:
            keyed = [
                (ms, i, r)
                for i, r in enumerate(self.records)
                if isinstance(r.get("uuid"), str)
                and bool(r.get("isSidechain")) == sidechain
                and (ms := _ms(r.get("timestamp"))) is not None
            ]
            keyed.sort(key=lambda t: (t[0], t[1]))
            self._timelines[sidechain] = ([t[0] for t in keyed], [t[2] for t in keyed])
        return self._timelines[sidechain]

    @property
    def session_id(self) -> str | None:
        for r in self.records:
            if isinstance(r.get("sessionId"), str):
                return r["sessionId"]
        return None

    def first(self, key: str) -> Any:
        for r in self.records:
            if r.get("type") in CHAIN_TYPES and r.get(key) is not None:
                return r[key]
        return None


def load(path: Path) -> Session:
    """Every record of the file, each checked for the types the chain rules and the steps rely on."""
    records: list[Record] = []
    skipped: list[int] = []
    digest = hashlib.sha256()
    with open_input(path) as fh:
        for number, line in enumerate(fh, 1):
            digest.update(line)
            if not line.strip():
                continue
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                skipped.append(number)  # the CLI skips a malformed line silently; so do we, and report it
                continue
            if isinstance(rec, dict):
                problem = record_problem(rec, line)
                if problem is not None:
                    field, what, value = problem
                    where = f"line {number}, field {field}" if field else f"line {number}"
                    raise bad_record(str(path), where, what, value)
                records.append(rec)
    return Session(records, skipped, digest.hexdigest())


Problem = tuple[str, str, Any]
"""(field, what is wrong, the value) of a refused record."""


@functools.lru_cache(maxsize=16)
def safe_id(value: str) -> bool:
    """Every record repeats the session id: the match is cached."""
    return SAFE_ID.fullmatch(value) is not None


def _not(kind: str, value: Any) -> str:
    return "missing" if value is None else f"not {kind}"


def record_problem(rec: Record, line: bytes) -> Problem | None:
    """What is wrong with the fields the parse, the rebuild and the wire form read; unknown fields pass."""
    if unwritable(rec, line):
        return "", f"nested deeper than {MAX_DEPTH} levels", None
    for key in ("uuid", "parentUuid", "leafUuid"):
        if rec.get(key) is not None and not isinstance(rec[key], str):
            return key, "not a string", rec[key]
    if "sessionId" in rec and not (isinstance(rec["sessionId"], str) and safe_id(rec["sessionId"])):
        return "sessionId", "not a session id (letters, digits, '.', '_', ':', '-')", rec["sessionId"]
    if rec.get("type") not in CHAIN_TYPES:
        return None
    if not isinstance(rec.get("uuid"), str):
        return "uuid", "missing", None
    for key in ("version", "cwd"):
        if rec.get(key) is not None and not (isinstance(rec[key], str) and "\x00" not in rec[key]):
            return key, "not a string without NUL", rec[key]
    message = rec.get("message")
    if not isinstance(message, dict):
        return "message", _not("an object", message), message
    if rec["type"] == "assistant" and not isinstance(message.get("id", ""), str):
        return "message.id", "not a string", message["id"]
    content = message.get("content")
    if isinstance(content, str):
        return None
    if not isinstance(content, list):
        return "message.content", _not("a string or a list", content), content
    for i, block in enumerate(content):
        problem = _block_problem(block)
        if problem is not None:
            field, what, value = problem
            return f"message.content[{i}]{field}", what, value
    return None


_STRING_FIELDS = {"text": ("text",), "tool_use": ("id", "name"), "tool_result": ("tool_use_id",)}


def _block_problem(block: Any) -> Problem | None:
    if not isinstance(block, dict):
        return "", "not an object", block
    kind = block.get("type")
    if not isinstance(kind, str):
        return ".type", _not("a string", kind), kind
    for key in _STRING_FIELDS.get(kind, ()):
        if not isinstance(block.get(key), str):
            return f".{key}", _not("a string", block.get(key)), block.get(key)
    if kind == "tool_use" and block.get("input") is not None and not isinstance(block["input"], dict):
        return ".input", "not an object", block["input"]
    if kind == "tool_result":
        result = block.get("content")
        if isinstance(result, list) and not all(isinstance(b, dict) for b in result):
            return ".content", "a list of something other than content blocks", result
        if block.get("is_error") is not None and not isinstance(block["is_error"], bool):
            return ".is_error", "not a boolean", block["is_error"]
    return None


def looks_like_claude_code(head: list[Any]) -> bool:
    """A user/assistant record of the chain. The CLI loads one without a sessionId (a minimal session)."""
    for rec in head:
        if (
            isinstance(rec, dict)
            and rec.get("type") in CHAIN_TYPES
            and ("sessionId" in rec or isinstance(rec.get("uuid"), str))
            and "parentUuid" in rec
            and isinstance(rec.get("message"), dict)
        ):
            return True
    return False


def _ms(ts: Any) -> float | None:
    if not isinstance(ts, str):
        return None
    try:
        return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp() * 1000
    except (ValueError, OverflowError, OSError):  # not a time, or one the platform cannot place
        return None


def _is_chain_record(r: Record) -> bool:
    return r.get("type") in CHAIN_TYPES and isinstance(r.get("uuid"), str)


def select_leaf(session: Session) -> Record:
    chain_records = [r for r in session.records if _is_chain_record(r)]
    if not chain_records:
        raise BadInput("the session has no user or assistant record")
    has_child = {r.get("parentUuid") for r in session.records if _is_chain_record(r)}
    leaves = {r["uuid"] for r in chain_records if r["uuid"] not in has_child}
    for rec in reversed(session.records):
        if rec.get("type") == "last-prompt":
            if rec.get("leafUuid") in leaves:
                return session.by_uuid[rec["leafUuid"]]
            break
    return chain_records[-1]


def walk(session: Session, leaf: Record) -> tuple[list[Record], Record | None, dict[str, str]]:
    """Root-to-leaf chain; the compact_boundary that stopped it (if any); repaired links child->parent."""
    chain: list[Record] = []
    visited: set[str] = set()
    repaired: dict[str, str] = {}
    boundary: Record | None = None
    current: Record | None = leaf
    while current is not None and current["uuid"] not in visited:
        visited.add(current["uuid"])
        chain.append(current)
        if current.get("type") == "system" and current.get("subtype") == "compact_boundary":
            boundary = current
            break
        parent_id = current.get("parentUuid")
        if parent_id is None:
            break
        parent = session.by_uuid.get(parent_id)
        if parent is None:
            parent = _repair_parent(session, current, visited)
            if parent is not None:
                repaired[current["uuid"]] = parent["uuid"]
        current = parent
    chain.reverse()
    return chain, boundary, repaired


def _repair_parent(session: Session, child: Record, visited: set[str]) -> Record | None:
    """The closest not-yet-visited record at or before the child's timestamp, within the window."""
    child_ms = _ms(child.get("timestamp"))
    if child_ms is None:
        return None
    times, recs = session.timeline(bool(child.get("isSidechain")))
    i = bisect.bisect_right(times, child_ms) - 1
    while i >= 0 and child_ms - times[i] <= PARENT_REPAIR_WINDOW_MS:
        rec = recs[i]
        if rec is not child and rec["uuid"] not in visited:
            return rec
        i -= 1
    return None


def message_id(rec: Record) -> str | None:
    if rec.get("type") != "assistant":
        return None
    mid = rec.get("message", {}).get("id")
    return mid if isinstance(mid, str) else None


def expand(session: Session, chain: list[Record]) -> list[Record]:
    """Pull in the split siblings of each assistant API message and the tool results parented on them."""
    siblings: dict[str, list[Record]] = {}
    results_of: dict[str, list[Record]] = {}
    for rec in session.records:
        if rec.get("isSidechain"):
            continue
        mid = message_id(rec)
        if mid is not None:
            siblings.setdefault(mid, []).append(rec)
        elif rec.get("type") == "user" and isinstance(rec.get("parentUuid"), str) and tool_result_ids(rec):
            results_of.setdefault(rec["parentUuid"], []).append(rec)
    out: list[Record] = []
    emitted: set[str] = set()
    for rec in chain:
        if rec["uuid"] in emitted:
            continue
        mid = message_id(rec)
        if mid is None:
            out.append(rec)
            emitted.add(rec["uuid"])
            continue
        group = [s for s in siblings.get(mid, [rec]) if s["uuid"] not in emitted]
        order = {b.get("id"): i for i, b in enumerate(blocks(group)) if b.get("type") == "tool_use"}
        results = [r for s in group for r in results_of.get(s["uuid"], []) if r["uuid"] not in emitted]
        results.sort(
            key=lambda r: (min(order.get(i, 1 << 30) for i in tool_result_ids(r)), session.position[id(r)])
        )
        for item in (*group, *results):
            out.append(item)
            emitted.add(item["uuid"])
    return out


def blocks(records: Iterable[Record]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for rec in records:
        content = content_of(rec)
        if isinstance(content, list):
            blocks.extend(b for b in content if isinstance(b, dict))
    return blocks


def content_of(rec: Record) -> Any:
    """message.content (only user and assistant records are checked to have a message object)."""
    message = rec.get("message")
    return message.get("content") if isinstance(message, dict) else None


def tool_result_ids(rec: Record) -> list[str]:
    content = content_of(rec)
    if not isinstance(content, list):
        return []
    return [b["tool_use_id"] for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
