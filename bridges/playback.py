"""A cassette's exchanges on the wire: record what the bridge forwarded and received, answer from a recording.

Pure parts, tested without sockets: `normalized` (the documented normalizations a replayed request is
compared under) and `Player` (which recorded answer for which request, or the first differing path).
Main-thread requests are answered strictly in order; a side call is answered by any recorded side call
of the same method and path that it equals, so that observer-only calls may come in another order or
not at all; anything else is refused.
"""

from __future__ import annotations

import re
import threading
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict

from replayer.bridges.difference import Mismatch, first_difference, mismatch_at
from replayer.floor.divergence import LISTING_TIME, PROCESS_IDS
from replayer.floor.redact import redact

Kind = Literal["main", "side"]

NONCE = re.compile(r"replayer-nonce-[0-9a-f]{24}")
_UUID = re.compile(
    r"(?<![0-9A-Za-z])[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}(?![0-9A-Za-z])"
)
"""Also inside a prefixed id (`fco_<uuid>`)."""
_PREFIXED_ID = re.compile(r"\b[a-z]{2,8}_(?=[A-Za-z]*[0-9])[0-9A-Za-z]{16,}\b")
"""Generated ids with a type prefix and a random tail (OpenCode's ses_/msg_/prt_, request ids)."""
_LABELLED_ID = re.compile(r"(?i)(?<=chunk id: )[0-9a-f]{4,}\b")
"""A tool output's own random label (Codex's exec output `Chunk ID: 10dbe5`)."""
_HEX_ID = re.compile(r"(?<![0-9A-Za-z])[0-9a-f]{32,}(?![0-9A-Za-z])")
"""Long lowercase hex: install and device ids (Claude Code's metadata.user_id.device_id), digests."""
_TIMESTAMP = re.compile(
    r"\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
)
_DURATION = re.compile(r"(?i)(\b(?:wall time|duration_seconds|duration_ms|elapsed)\"?\s*[:=]\s*)[0-9.]+")
_TIME_KEY = re.compile(
    r"(?i)(time|duration|elapsed|latenc|unix|_at(_|$)|(?<![a-z])ts$|_ts$|^created$|^updated$|^date$)|[a-z]At$"
)

_ID_KEY = re.compile(r"(?i)^id$|_id$|[a-z]Id$")
_ID_VALUE = re.compile(r"^[0-9A-Za-z_:.-]{6,}$")
"""An id key's value is an id whatever its shape (Pi's 8-hex entry ids and parentIds)."""
_PID_KEY = re.compile(r"(?i)^(pid|process_?id)$")
_SKILLS = re.compile(r"(<available_skills>\n)(.*?)(</available_skills>)", re.S)
_SKILL = re.compile(r"[ \t]*<skill>.*?</skill>\n", re.S)
"""Gemini CLI lists its skills in the order its file glob found them, which changes from run to run: in the
system prompt's `<available_skills>` and in its `activate_skill` tool's description (`_SKILL_NAMES`)."""
_SKILL_NAMES = re.compile(r"(\(Available: )('[^'()]*'(?:, '[^'()]*')+)(\))")


class Normalizer:
    """One document's normalizations. Ids are alpha-renamed in the order they are first seen (`<id-1>`,
    `<id-2>`...), so that two documents that use the same ids in the same places compare equal while a
    changed relationship (a record pointing at another parent) still differs. Timestamps, dates and
    durations become `<time>`, the per-run nonce `<nonce>`; the values of time-like keys (`timestamp`,
    `created_at`, `durationMs`...) become `<time>` whatever they hold."""

    def __init__(self, nonce: str | None = None):
        self.nonce = nonce
        self.ids: dict[str, str] = {}
        self.used: set[str] = set()
        """What the normalizations changed in this document (`ids`, `times`, `listing times`...)."""
        self.skill_orders: list[list[str]] = []
        """The skill lists as found, so that a sorted order is said only where the two orders differed."""

    def _id(self, match: re.Match[str]) -> str:
        return self.ids.setdefault(match.group(0), f"<id-{len(self.ids) + 1}>")

    def _sub(self, kind: str, pattern: re.Pattern[str], into: Any, value: str) -> str:
        changed = pattern.sub(into, value)
        if changed != value:
            self.used.add(kind)
        return changed

    def _skills_sorted(self, match: re.Match[str]) -> str:
        skills = _SKILL.findall(match.group(2))
        if "".join(skills) != match.group(2):
            return match.group(0)
        self.skill_orders.append(skills)
        return match.group(1) + "".join(sorted(skills)) + match.group(3)

    def _skill_names_sorted(self, match: re.Match[str]) -> str:
        names = match.group(2).split(", ")
        self.skill_orders.append(names)
        return match.group(1) + ", ".join(sorted(names)) + match.group(3)

    def text(self, value: str) -> str:
        if self.nonce and self.nonce in value:
            value = value.replace(self.nonce, "<nonce>")
            self.used.add("nonce")
        value = self._sub("nonce", NONCE, "<nonce>", value)
        for pattern in (_UUID, _PREFIXED_ID, _HEX_ID, _LABELLED_ID):
            value = self._sub("ids", pattern, self._id, value)
        value = self._sub("process ids", PROCESS_IDS, r"\1<pid>", value)
        value = self._sub("durations", _DURATION, r"\1<time>", value)
        value = self._sub("listing times", LISTING_TIME, "<time>", value)
        if "<available_skills>" in value:
            value = self._sub("skill order", _SKILLS, self._skills_sorted, value)
        if "(Available: '" in value:
            value = self._sub("skill order", _SKILL_NAMES, self._skill_names_sorted, value)
        return self._sub("times", _TIMESTAMP, "<time>", value)

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            inner = _embedded(value)
            return self.text(value) if inner is None else {"<json>": self(inner)}
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            # the numbering must not depend on key order, nor on the ids inside keys (OpenHands' event files)
            for key, v in sorted(value.items(), key=lambda item: (_masked(item[0]), item[0])):
                name = self.text(key)
                if _TIME_KEY.search(key) and _timelike(v):
                    out[name] = "<time>"
                    self.used.add("times")
                elif _ID_KEY.search(key) and isinstance(v, str) and _ID_VALUE.match(v):
                    out[name] = self.ids.setdefault(v, f"<id-{len(self.ids) + 1}>")
                    self.used.add("ids")
                elif _PID_KEY.search(key) and (_number(v) or isinstance(v, str) and v.isdigit()):  # an id
                    out[name] = self.ids.setdefault(f"pid:{v}", f"<id-{len(self.ids) + 1}>")
                    self.used.add("process ids")
                else:
                    out[name] = self(v)
            return out
        return value


def _masked(key: str) -> str:
    for pattern in (_UUID, _PREFIXED_ID, _HEX_ID):
        key = pattern.sub("<id>", key)
    return key


def _timelike(value: Any) -> bool:
    """A time-like key's value that is a time: a number, a string, or a {secs, nanos}-like record of numbers."""
    if isinstance(value, dict):
        return bool(value) and all(_number(v) for v in value.values())
    return _number(value) or isinstance(value, str)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _embedded(text: str) -> Any:
    """A JSON object or array carried as a string (metadata headers, tool arguments), so that a difference
    inside it is reported at its own path."""
    if not text.startswith(("{", "[")):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, (dict, list)) else None


def normalized(value: Any, nonce: str | None = None) -> Any:
    """`value` (a request body, a session record) with secrets redacted and the normalizations applied."""
    return Normalizer(nonce)(redact(value)[0])


class Answer(BaseModel):
    """A recorded answer: served to the agent byte for byte."""

    model_config = ConfigDict(extra="forbid")
    status: int
    headers: dict[str, str]
    body: bytes


class Exchange(BaseModel):
    """One request the bridge let through, as forwarded (envelope stripped), and the answer it got."""

    model_config = ConfigDict(extra="forbid")
    seq: int
    """Arrival order."""
    kind: Kind
    method: str
    path: str
    body: Any = None
    answer: Answer
    complete: bool = True
    """False: the upstream failed mid-answer (a recording with such an exchange is not written)."""


KEPT_HEADERS = ("content-type", "request-id", "x-request-id", ".*ratelimit.*", "openai-model")
"""Answer headers a cassette keeps (an agent may record them in its session): no cookies, no account
names, no hop-by-hop headers. An agent adds the ones its CLI reads (`Launcher.kept_answer_headers`)."""


def kept_headers(headers: dict[str, str], also: tuple[str, ...] = ()) -> dict[str, str]:
    """The answer headers a cassette keeps: KEPT_HEADERS and `also`, patterns matched whole, any case."""
    kept = re.compile("(?i)^(" + "|".join((*KEPT_HEADERS, *also)) + ")$")
    return {k.lower(): v for k, v in headers.items() if kept.match(k)}


class Recorder:
    """Collects the exchanges of one continuation (the bridge's thread adds, the engine reads at the end)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seq = 0
        self.exchanges: list[Exchange] = []

    def next_seq(self) -> int:
        with self._lock:
            self._seq += 1
            return self._seq

    def add(self, exchange: Exchange) -> None:
        with self._lock:
            self.exchanges.append(exchange)

    def ordered(self) -> list[Exchange]:
        with self._lock:
            return sorted(self.exchanges, key=lambda e: e.seq)


class Refusal(BaseModel):
    model_config = ConfigDict(extra="forbid")
    mismatch: Mismatch


class Player:
    """Answers from a recording. `nonce`: this run's, normalized away like the recording's was."""

    def __init__(self, exchanges: list[Exchange], nonce: str | None):
        self.main = [e for e in exchanges if e.kind == "main"]
        self.side = [e for e in exchanges if e.kind == "side"]
        self.nonce = nonce
        self.next_main = 0
        self.used_side: set[int] = set()
        self.normalized: set[str] = set()
        """What the replayed requests that differed from their recording byte for byte were matched after
        (the normalizations applied to them), for the result to say."""

    def answer(self, kind: Kind, method: str, path: str, body: Any) -> Answer | Refusal:
        if kind == "main":
            return self._main(method, path, body)
        return self._side(method, path, body)

    def _differs(self, recorded: Exchange, method: str, path: str, body: Any) -> Mismatch | None:
        if (recorded.method, recorded.path) != (method, path):
            return mismatch_at("<request line>", f"{recorded.method} {recorded.path}", f"{method} {path}")
        theirs, ours = Normalizer(), Normalizer(self.nonce)
        found = first_difference(theirs(redact(recorded.body)[0]), ours(redact(body)[0]))
        if found is None and recorded.body != redact(body)[0]:
            used = (theirs.used | ours.used) - {"nonce"}
            if theirs.skill_orders == ours.skill_orders:  # sorted on both sides, but never out of order
                used.discard("skill order")
            self.normalized |= used
        return found

    def _main(self, method: str, path: str, body: Any) -> Answer | Refusal:
        index = self.next_main
        if index >= len(self.main):
            beyond = mismatch_at("", "<no more main requests>", f"{method} {path}")
            return _refusal(beyond, f"main request {index + 1} is beyond the cassette's {len(self.main)}")
        found = self._differs(self.main[index], method, path, body)
        if found is not None:
            return _refusal(
                found, f"main request {index + 1} of {len(self.main)} differs from the cassette's"
            )
        self.next_main += 1
        return self.main[index].answer

    def _side(self, method: str, path: str, body: Any) -> Answer | Refusal:
        candidates = [
            (i, e)
            for i, e in enumerate(self.side)
            if i not in self.used_side and (e.method, e.path) == (method, path)
        ]
        for i, recorded in candidates:
            if self._differs(recorded, method, path, body) is None:
                self.used_side.add(i)
                return recorded.answer
        reason = "a side request the cassette does not hold"
        if not candidates:
            return _refusal(
                mismatch_at("<request line>", "<no such side request>", f"{method} {path}"), reason
            )
        found = self._differs(candidates[0][1], method, path, body)
        assert found is not None
        return _refusal(found, reason)

    def unused_main(self) -> int:
        return len(self.main) - self.next_main


def _refusal(found: Mismatch, reason: str) -> Refusal:
    return Refusal(mismatch=found.model_copy(update={"reason": reason}))
