"""Claude Code's session JSONL -> the active chain, as the pinned CLI rebuilds it on --resume.

Rules (docs/adapters/claude_code.md, observed with 2.1.197): the leaf is the last
`last-prompt.leafUuid` when it is a leaf, else the last user/assistant record; the parentUuid
walk repairs a missing parent with the closest earlier record within 5 s; split assistant
records of one API message and the tool results hanging off them are recovered by message.id.
"""

from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.shapes import ORJSON_DEPTH, unwritable
from replayer.floor.errors import BadInput, bad_record
from replayer.floor.io import read_input, sha256_soon

Record = dict[str, Any]
CHAIN_TYPES = ("user", "assistant")
RECORD_TYPES = frozenset(
    {
        *CHAIN_TYPES, "system", "summary", "progress", "attachment", "file-history-snapshot", "queue-operation",
        "last-prompt", "custom-title", "ai-title", "agent-name", "agent-color", "agent-setting", "tag", "mode",
        "permission-mode", "relocated", "pr-link", "worktree-state", "content-replacement", "attribution-snapshot",
        "speculation-accept", "marble-origami-commit", "marble-origami-snapshot", "marble-origami-reset",
    }
)  # fmt: skip
"""The session record kinds the replayer knows (those the CLI of 2.1.197 writes and reads back, `mode` among
them); a newer release's kind is carried as recorded, as the CLI carries one it does not know."""
PARENT_REPAIR_WINDOW_MS = 5000
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
"""A session id becomes a file name and a command-line argument: no path separators, no leading dash."""
MAX_DEPTH = ORJSON_DEPTH
"""orjson writes nothing nested deeper; a record that could not be written back is refused when read."""


class Session:
    """The parsed file: every record in file order, plus the indexes the chain rules need (built by `load` in
    the pass that reads and checks the records)."""

    def __init__(self) -> None:
        self.records: list[Record] = []
        self.skipped_lines: list[int] = []
        self.sha256 = ""
        self.by_uuid: dict[str, Record] = {}
        self.chain_records: list[Record] = []
        """user/assistant records (each has a uuid), in file order."""
        self.parents: set[Any] = set()
        """The parentUuid of every chain record: a chain record named here is no leaf."""
        self.siblings: dict[str, list[Record]] = {}
        """message.id -> the main-thread assistant records of that API message (the CLI splits one per block)."""
        self.results_of: dict[str, list[Record]] = {}
        """parentUuid -> the main-thread user records holding tool results, in file order."""
        self.result_position: dict[int, int] = {}
        """id() of each of those records -> its position in `records`."""
        self.session_id: str | None = None
        """The first sessionId of the file."""
        self.last_prompt: Record | None = None
        """The file's last last-prompt record."""
        self._timelines: dict[bool, tuple[list[float], list[Record]]] = {}

    def add(self, rec: Record) -> None:
        """Append a checked record (`record_problem` passed) and index it."""
        get = rec.get
        uid = get("uuid")
        if uid is not None:
            self.by_uuid[uid] = rec
        if self.session_id is None and "sessionId" in rec:
            self.session_id = rec["sessionId"]
        kind = get("type")
        if kind != "user" and kind != "assistant":
            if kind == "last-prompt":
                self.last_prompt = rec
            self.records.append(rec)
            return
        self.chain_records.append(rec)
        parent = get("parentUuid")
        self.parents.add(parent)
        if not get("isSidechain"):
            self._index(rec, kind, parent, len(self.records))
        self.records.append(rec)

    def _index(self, rec: Record, kind: str, parent: Any, position: int) -> None:
        """Index a record of the file's own thread: split API messages by message.id, tool results by parent."""
        message = rec["message"]
        if kind == "assistant":
            mid = message.get("id")
            if mid is not None:
                same = self.siblings.get(mid)
                if same is None:
                    self.siblings[mid] = [rec]
                else:
                    same.append(rec)
        elif parent is not None and isinstance(message.get("content"), list):
            for block in message["content"]:
                if block.get("type") == "tool_result":
                    self.results_of.setdefault(parent, []).append(rec)
                    self.result_position[id(rec)] = position
                    break

    @property
    def subagent_thread(self) -> bool:
        """Every user/assistant record is a sidechain's: a subagent's own file (`agent-*.jsonl`)."""
        return bool(self.chain_records) and all(r.get("isSidechain") for r in self.chain_records)

    def index_subagent_thread(self) -> None:
        """A subagent's file has no main thread: its sidechain is the thread the indexes hold."""
        for position, rec in enumerate(self.records):
            if rec.get("type") in CHAIN_TYPES:
                self._index(rec, rec["type"], rec.get("parentUuid"), position)

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

    def first(self, key: str) -> Any:
        for r in self.records:
            if r.get("type") in CHAIN_TYPES and r.get(key) is not None:
                return r[key]
        return None


def load(path: Path) -> Session:
    """Every record of the file, each checked for the types the chain rules and the steps rely on and
    indexed, in one pass over the lines (the SHA-256 taken meanwhile on another core)."""
    session = Session()
    raw = read_input(path)
    digest = sha256_soon(raw)
    for number, line in enumerate(raw.split(b"\n"), 1):
        if not line or line.isspace():  # blank, or past the last newline
            continue
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            session.skipped_lines.append(number)  # the CLI skips a malformed line silently; so do we
            continue
        if isinstance(rec, dict):
            problem = record_problem(rec, line)
            if problem is not None:
                field, what, value = problem
                where = f"line {number}, field {field}" if field else f"line {number}"
                raise bad_record(str(path), where, what, value)
            session.add(rec)
    session.sha256 = digest()
    if session.subagent_thread:
        session.index_subagent_thread()
    return session


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
    get = rec.get
    uid = get("uuid")
    if uid is not None and not isinstance(uid, str):
        return "uuid", "not a string", uid
    value = get("parentUuid")
    if value is not None and not isinstance(value, str):
        return "parentUuid", "not a string", value
    value = get("leafUuid")
    if value is not None and not isinstance(value, str):
        return "leafUuid", "not a string", value
    value = get("sessionId", _ABSENT)
    if value is not _ABSENT and not (isinstance(value, str) and safe_id(value)):
        return "sessionId", "not a session id (letters, digits, '.', '_', ':', '-')", value
    kind = get("type")
    if kind != "user" and kind != "assistant":
        return None
    if uid is None:
        return "uuid", "missing", None
    value = get("version")
    if value is not None and not (isinstance(value, str) and "\x00" not in value):
        return "version", "not a string without NUL", value
    value = get("cwd")
    if value is not None and not (isinstance(value, str) and "\x00" not in value):
        return "cwd", "not a string without NUL", value
    message = get("message")
    if not isinstance(message, dict):
        return "message", _not("an object", message), message
    if kind == "assistant" and not isinstance(message.get("id", ""), str):
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


_ABSENT = object()
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
    """The last last-prompt's leafUuid when it names a chain record without children, else the last chain record."""
    chain_records = session.chain_records
    if not chain_records:
        raise BadInput("the session has no user or assistant record")
    last = session.last_prompt
    leaf_id = last.get("leafUuid") if last is not None else None
    if leaf_id is not None and leaf_id not in session.parents:
        named = session.by_uuid.get(leaf_id)
        if named is not None and (
            _is_chain_record(named) or any(r["uuid"] == leaf_id for r in chain_records)
        ):
            return named
    return chain_records[-1]


def is_compact_boundary(rec: Record) -> bool:
    return rec.get("type") == "system" and rec.get("subtype") == "compact_boundary"


def preserved_links(session: Session) -> tuple[dict[str, str], list[str]]:
    """The links the CLI rewrites when it loads a session whose last compaction kept a segment of the history
    verbatim (2.1.x: `compactMetadata.preservedMessages`, or `preservedSegment` walked from its tail to its
    head): the kept records hang in order off the anchor (the summary), and what hung off the anchor hangs
    off the last kept one. Returns (child -> parent links, the kept uuids in order). Read in the pinned
    binary's bundled JavaScript (its transcript loader) and observed with a `/compact` of 2.1.197."""
    boundaries = [r for r in session.records if is_compact_boundary(r)]
    meta = boundaries[-1].get("compactMetadata") if boundaries else None
    if not isinstance(meta, dict):
        return {}, []
    listed, segment = meta.get("preservedMessages"), meta.get("preservedSegment")
    anchor: Any = None
    kept: list[str] = []
    if isinstance(listed, dict):
        anchor, uuids = listed.get("anchorUuid"), listed.get("uuids")
        kept = [u for u in uuids if isinstance(u, str)] if isinstance(uuids, list) else []
    elif isinstance(segment, dict):
        anchor, current = segment.get("anchorUuid"), session.by_uuid.get(segment.get("tailUuid") or "")
        while current is not None and current["uuid"] not in kept:
            kept.append(current["uuid"])
            if current["uuid"] == segment.get("headUuid"):
                break
            current = session.by_uuid.get(current.get("parentUuid") or "")
        else:
            kept = []  # the walk never reached the head: the CLI relinks nothing
        kept.reverse()
    if not isinstance(anchor, str) or not kept or any(u not in session.by_uuid for u in kept):
        return {}, []
    links = dict(zip(kept, [anchor, *kept[:-1]], strict=True))
    for rec in session.records:
        uid = rec.get("uuid")
        if rec.get("parentUuid") == anchor and isinstance(uid, str) and uid != kept[0]:
            links[uid] = kept[-1]
    return links, kept


def walk(
    session: Session, leaf: Record, links: dict[str, str] | None = None
) -> tuple[list[Record], Record | None, dict[str, str]]:
    """Root-to-leaf chain; the compact_boundary that stopped it (if any); repaired links child->parent.
    `links` overrides a record's parentUuid (`preserved_links`)."""
    links = links or {}
    chain: list[Record] = []
    visited: set[str] = set()
    repaired: dict[str, str] = {}
    boundary: Record | None = None
    current: Record | None = leaf
    while current is not None and current["uuid"] not in visited:
        visited.add(current["uuid"])
        chain.append(current)
        if is_compact_boundary(current):
            boundary = current
            break
        parent_id = links.get(current["uuid"], current.get("parentUuid"))
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
    siblings, results_of = session.siblings, session.results_of
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
        results = [r for s in group for r in results_of.get(s["uuid"], ()) if r["uuid"] not in emitted]
        if len(results) > 1:  # in the order of their tool_use blocks, then in file order
            order = {b.get("id"): i for i, b in enumerate(blocks(group)) if b.get("type") == "tool_use"}
            position = session.result_position
            results.sort(
                key=lambda r: (min(order.get(i, 1 << 30) for i in tool_result_ids(r)), position[id(r)])
            )
        for item in group:
            out.append(item)
            emitted.add(item["uuid"])
        for item in results:
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
