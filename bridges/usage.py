"""Token usage, as the upstream reported it in an answer (streamed or not), for any of the four protocols.

Anthropic reports input tokens in `message_start` and cumulative output tokens in `message_delta`;
chat completions in the last chunk (or the body); Responses in `response.completed`; Gemini in each
chunk's `usageMetadata` (`promptTokenCount`, `candidatesTokenCount`). Counts are
cumulative within one answer, so the largest value of each kind is the answer's.
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict

_INPUT = ("input_tokens", "prompt_tokens", "promptTokenCount")
_OUTPUT = ("output_tokens", "completion_tokens", "candidatesTokenCount")
_KEYS = ("usage", "usageMetadata")
HEAD_BYTES = 64 * 1024
TAIL_BYTES = 1024 * 1024
"""An answer's usage sits near its start or its end: only these many bytes of each end are kept."""


class Usage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    input_tokens: int | None = None
    output_tokens: int | None = None


class AnswerEnds:
    """The first and last bytes of one streamed answer, kept as it passes."""

    def __init__(self) -> None:
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
            return usage_of([bytes(self.tail)])
        return usage_of([bytes(self.head), bytes(self.tail)])


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


def _usages(value: Any) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    if isinstance(value, dict):
        for key, item in value.items():
            if key in _KEYS and isinstance(item, dict):
                found.append(item)
            else:
                found += _usages(item)
    elif isinstance(value, list):
        for item in value:
            found += _usages(item)
    return found


def usage_of(parts: list[bytes]) -> Usage:
    counts: dict[str, int] = {}
    for part in parts:
        for usage in (u for doc in _documents(part) for u in _usages(doc)):
            for side, names in (("input_tokens", _INPUT), ("output_tokens", _OUTPUT)):
                values = [usage[n] for n in names if type(usage.get(n)) is int]
                if values:
                    counts[side] = max(counts.get(side, 0), *values)
    return Usage(**counts)
