"""Token usage, as the upstream reported it in an answer (streamed or not), where the protocol's dialect
says it does (`UsageKeys`, each dialect's `usage_keys`): in a usage object, anywhere in the answer's
documents or SSE events. Counts are cumulative within one answer, so the largest value of each field is
the answer's; every billed field a dialect names is summed (docs/bridge.md, "What is counted").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict

HEAD_BYTES = 64 * 1024
TAIL_BYTES = 1024 * 1024
"""An answer's usage sits near its start or its end: only these many bytes of each end are kept."""


@dataclass(frozen=True)
class UsageKeys:
    """Where a protocol's answers report token usage."""

    container: str
    """The key of the usage object, at any depth of an answer's document or event."""
    input: tuple[str, ...]
    """The billed input (prompt) token fields in it, disjoint (a count already inside another is left out)."""
    output: tuple[str, ...]
    """The billed output token fields in it, disjoint likewise."""


class Usage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input_tokens: int | None = None
    """The billed input fields summed (None: the answer reported none)."""
    output_tokens: int | None = None

    def total(self) -> int:
        return (self.input_tokens or 0) + (self.output_tokens or 0)


class AnswerEnds:
    """The first and last bytes of one streamed answer, kept as it passes."""

    def __init__(self, keys: UsageKeys) -> None:
        self.keys = keys
        self.head = bytearray()
        self.tail = bytearray()
        self.size = 0

    def add(self, chunk: bytes) -> None:
        if len(self.head) < HEAD_BYTES:
            self.head.extend(chunk[: HEAD_BYTES - len(self.head)])
        self.tail.extend(chunk)
        if len(self.tail) > TAIL_BYTES:
            del self.tail[: len(self.tail) - TAIL_BYTES]
        self.size += len(chunk)

    def usage(self) -> Usage:
        if self.size <= TAIL_BYTES:
            return usage_of([bytes(self.tail)], self.keys)
        return usage_of([bytes(self.head), bytes(self.tail)], self.keys)


def _documents(data: bytes) -> list[Any]:
    try:
        return [orjson.loads(data)]
    except orjson.JSONDecodeError:
        pass
    docs = []
    for line in data.splitlines():
        if not line.startswith(b"data:"):
            continue
        try:
            docs.append(orjson.loads(line[5:].strip()))
        except orjson.JSONDecodeError:
            continue  # [DONE], or a line cut where the kept bytes end
    return docs


def _usages(value: Any, container: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key == container and isinstance(item, dict):
                found.append(item)
            else:
                found += _usages(item, container)
    elif isinstance(value, list):
        for item in value:
            found += _usages(item, container)
    return found


def usage_of(parts: list[bytes], keys: UsageKeys) -> Usage:
    largest: dict[str, int] = {}
    for part in parts:
        for usage in (u for doc in _documents(part) for u in _usages(doc, keys.container)):
            for name in (*keys.input, *keys.output):
                if type(usage.get(name)) is int:
                    largest[name] = max(largest.get(name, 0), usage[name])
    counts = {
        side: sum(largest[n] for n in names if n in largest)
        for side, names in (("input_tokens", keys.input), ("output_tokens", keys.output))
        if any(n in largest for n in names)
    }
    return Usage(**counts)
