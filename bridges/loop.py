"""A continuation going round in a circle: the agent sends the same request again after the same answer.

An agent whose own bookkeeping goes wrong (OpenCode's ids after their 48-bit clock wrapped) may ask the
model again after each final answer, for ever: with a real key every round is paid. A round is one
main-thread request and the answer it got. Two rounds are the same when the request adds the same bytes
to the one before it (what a chat transcript grows by each round: the answer as the agent recorded it,
and the tool results it ran) and the answer before it was the same, compared without its ids, times and
counts (the digits in it: a stream's message ids and usage differ each time). A request sent again
unchanged adds nothing, which repeats too when the answers are the same.

Pure: `Rounds` is a value, each request and answer gives the next one, and `repeats` says how many rounds
in a row were the same as the round before; the bridge holds the request that makes it `limit`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re

from replayer.floor.requests import DEFAULT_LOOP_LIMIT

DEFAULT_LIMIT = DEFAULT_LOOP_LIMIT
"""Rounds in a row the same as the one before them after which the continuation ends as `loop`."""
MAX_ANSWER_BYTES = 1024 * 1024
"""An answer longer than this is not compared (a round with it is never a repeat)."""
_COUNTED = re.compile(rb"[0-9A-Za-z_-]*[0-9][0-9A-Za-z_-]*")


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _common_prefix(a: bytes, b: bytes) -> int:
    """The length of the longest common prefix (bisected on slices: compared in C, not byte by byte)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[low:mid] == b[low:mid]:
            low = mid
        else:
            high = mid - 1
    return low


def answer_digest(answer: bytes | None) -> bytes | None:
    """The answer without its ids, times and counts; None for one not compared (missing or too long)."""
    if answer is None or len(answer) > MAX_ANSWER_BYTES:
        return None
    return _digest(_COUNTED.sub(b"#", answer))


@dataclasses.dataclass(frozen=True)
class Rounds:
    request: bytes | None = None
    """The last main-thread request sent."""
    answer: bytes | None = None
    """The digest of its answer (`answer_digest`); None until it came, or when it is not compared."""
    round: tuple[bytes, bytes] | None = None
    """The last round: (what its request added, the answer before it)."""
    repeats: int = 0
    """How many rounds in a row were the same as the round before."""

    def sent(self, request: bytes) -> Rounds:
        """The next main-thread request."""
        if self.request is None or self.answer is None:
            return Rounds(request=request)
        added = _digest(request[_common_prefix(self.request, request) :])
        this = (added, self.answer)
        repeats = self.repeats + 1 if this == self.round else 0
        return Rounds(request=request, round=this, repeats=repeats)

    def answered(self, answer: bytes | None) -> Rounds:
        """The answer to the last request (None: none was read whole)."""
        return dataclasses.replace(self, answer=answer_digest(answer))

    def looping(self, limit: int) -> bool:
        return self.repeats >= limit
