"""OpenCode's message and part ids, moved before now when the clock has wrapped past them.

The CLI mints an id as `msg_`/`prt_` + 12 hex digits of `ms * 4096 + counter` kept to 48 bits + 14 random
base62 characters (`Identifier.create`), and orders by the id as a string: parts by id, messages by id
(the JSON storage before 1.2, and `MessageV2.latest`), and its loop ends only when `lastUser.id <
lastAssistant.id`. 48 bits of `ms * 4096` wrap every 2^36 ms (795 days): on 2026-08-14 they did, so an id
minted now sorts before every id recorded before then. A continued session's new user message then looks
older than the recorded ones, the recorded last assistant (finished on `tool-calls`) the newest, and the
CLI asks the model again and again.

The rebuild therefore moves the prefix's ids, before importing it, to where the CLI would have put them
had it made them just before now: every id shifted by the same whole number of milliseconds, so their
order and spacing (and each counter) stay as recorded, the last one a millisecond before the rebuild.
Every place an id is named (a message's id and parentID, a part's id and messageID, a compaction's
`tail_start_id`, the session's `revert`) gets the same new id, as any string equal to a moved id does.
A prefix longer than the time since the wrap is numbered densely instead (order kept, spacing not). Ids
of another form (an importer's) are left as they are.
"""

from __future__ import annotations

import re
import time
from typing import Any

_ID = re.compile(r"(msg|prt)_([0-9a-f]{12})([0-9A-Za-z]{14})")
_BITS = 48
_PER_MS = 0x1000
"""`ms * 4096 + counter`: the counter is the low 12 bits."""


def minted_at(ms: int) -> int:
    """The 48-bit value the CLI's first id of millisecond `ms` carries (its counter starts at 1)."""
    return (ms * _PER_MS + 1) % (1 << _BITS)


def _value(text: str) -> int | None:
    found = _ID.fullmatch(text)
    return int(found.group(2), 16) if found else None


def _with_value(text: str, value: int) -> str:
    return f"{text[:4]}{value:012x}{text[16:]}"


def moves(ids: list[str], now_ms: int) -> dict[str, str]:
    """Old id -> new id for the ids (messages' and parts') that must sort before those minted at `now_ms`;
    empty when they all already do. Ids not of the CLI's form are left as they are."""
    values = {i: v for i in ids if (v := _value(i)) is not None}
    if not values:
        return {}
    ceiling = minted_at(now_ms) - _PER_MS  # a millisecond before now
    top = max(values.values())
    if top < ceiling:
        return {}
    shift = -(-(top - ceiling) // _PER_MS) * _PER_MS
    if min(values.values()) >= shift:
        return {i: _with_value(i, v - shift) for i, v in values.items()}
    ranked = sorted(values, key=lambda i: (values[i], i))
    start = max(0, ceiling - len(ranked))  # within a few ids' time of the wrap there is no room: order kept
    return {i: _with_value(i, start + rank) for rank, i in enumerate(ranked)}


def referenced(messages: list[dict[str, Any]]) -> list[str]:
    """The ids the prefix's messages and parts carry."""
    found = []
    for message in messages:
        found.append(str(message["info"].get("id", "")))
        found += [str(p.get("id", "")) for p in message.get("parts", [])]
    return found


def _renamed(value: Any, table: dict[str, str]) -> Any:
    if isinstance(value, str):
        return table.get(value, value)
    if isinstance(value, list):
        return [_renamed(v, table) for v in value]
    if isinstance(value, dict):
        return {k: _renamed(v, table) for k, v in value.items()}
    return value


def move_before_now(document: dict[str, Any], now_ms: int | None = None) -> dict[str, str]:
    """Move the export document's message and part ids (in place) so that ids minted from `now_ms` (default:
    now) sort after them; returns what moved (old -> new), empty when nothing had to."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    table = moves(referenced(document["messages"]), now_ms)
    if table:
        document["info"] = _renamed(document["info"], table)
        document["messages"] = _renamed(document["messages"], table)
    return table
