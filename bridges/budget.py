"""The token budget: each request's worst case is reserved before it is forwarded, and settled to what the
upstream reported once its answer is known. A request whose reservation does not fit is never forwarded, so
however many requests run at once, no more than the budget can be billed (docs/bridge.md, "Budgets").

A `Ledger` holds one budget for every bridge given it: in memory (one continuation, or several in one
process), or in a small file under an exclusive lock (`fcntl.flock`) that the continuations of a compare or
a batch share across processes. A reservation whose answer never came (a process that died) stays taken:
the ledger fails closed.
"""

from __future__ import annotations

import fcntl
import os
import threading
from pathlib import Path
from typing import Any

import orjson

from replayer.bridges.sidecalls import asked_tokens

BYTES_PER_TOKEN = 3
"""A prompt's estimate: one token per 3 bytes of the request body. Tokenizers average about 4 bytes a token
on English and code; JSON punctuation and non-Latin text go lower, rarely under 3."""
DEFAULT_OUTPUT_CAP = 32_000
"""The output reserved for a request that names no limit (`max_tokens`, `max_output_tokens`,
`max_completion_tokens`, Gemini's `generationConfig.maxOutputTokens`)."""
SIDE_SHARE = 0.05
"""The share of the token budget that side calls (everything besides the main thread) may take together."""
MAX_SIDE_CALLS_AT_ONCE = 2
"""Side calls forwarded at the same time; another is answered 429 until one ends."""


def worst_case(raw: bytes, body: Any, output_cap: int = DEFAULT_OUTPUT_CAP) -> int:
    """The most tokens a request can be billed: its prompt's estimate plus the output it asks for at most
    (`output_cap` when it names no limit); a request without a body (a listing) costs nothing."""
    if not raw:
        return 0
    asked = asked_tokens(body)
    return -(-len(raw) // BYTES_PER_TOKEN) + (output_cap if asked is None else asked)


class Ledger:
    """Tokens charged and reserved against `limit`, shared by every bridge that holds this ledger (and, with
    `path`, by every process that opens that file). `outer`: a budget this one is inside (a batch's, which
    its jobs' own budgets are part of): a reservation must fit both."""

    def __init__(self, limit: int, path: Path | None = None, outer: Ledger | None = None) -> None:
        self.limit = limit
        self.path = path
        self.outer = outer
        self.limit_in_file = False
        """The limit is the one the file holds, read with its counts (`opened`)."""
        self._lock = threading.Lock()
        self._charged = 0
        self._reserved = 0

    @classmethod
    def create(cls, path: Path, limit: int) -> None:
        """A new ledger file of `limit` tokens, none charged (a batch's, written anew at each start)."""
        path.unlink(missing_ok=True)
        ledger = cls(limit, path)
        with ledger._state():
            pass

    @classmethod
    def opened(cls, path: Path) -> Ledger:
        """The ledger file `create` wrote, its limit the file's own; a missing file is a limit of 0 (fails
        closed)."""
        ledger = cls(0, path)
        ledger.limit_in_file = True
        return ledger

    def reserve(self, tokens: int) -> tuple[Ledger | None, int, int]:
        """Take `tokens` if the charged and reserved tokens leave room for them, here and in `outer`.
        Returns the ledger that had no room (None: taken), and its charged and reserved tokens before."""
        with self._lock, self._state() as state:
            charged, reserved = state
            if charged + reserved + tokens > self.limit:
                return self, charged, reserved
            state[1] = reserved + tokens
        if self.outer is not None:
            refused = self.outer.reserve(tokens)
            if refused[0] is not None:
                self._settle(tokens, 0)
                return refused
        return None, charged, reserved

    def settle(self, reserved: int, charged: int) -> None:
        """A reservation ends: `charged` tokens are billed, the rest of it is free again."""
        self._settle(reserved, charged)
        if self.outer is not None:
            self.outer.settle(reserved, charged)

    def _settle(self, reserved: int, charged: int) -> None:
        with self._lock, self._state() as state:
            state[0] += charged
            state[1] = max(0, state[1] - reserved)

    def used(self) -> tuple[int, int]:
        """The charged and reserved tokens."""
        with self._lock, self._state() as state:
            return state[0], state[1]

    def _state(self) -> _State:
        return _State(self)


class _State:
    """[charged, reserved] for the span of one operation, read and written back under the file's lock."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.values = [ledger._charged, ledger._reserved]
        self.fd: int | None = None

    def __enter__(self) -> list[int]:
        path = self.ledger.path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            data = os.read(self.fd, 4096)
            if data:
                saved = orjson.loads(data)
                self.values = [int(saved["charged"]), int(saved["reserved"])]
                if self.ledger.limit_in_file:
                    self.ledger.limit = int(saved.get("limit", 0))
            else:
                self.values = [0, 0]
        return self.values

    def __exit__(self, *exc: object) -> None:
        ledger = self.ledger
        ledger._charged, ledger._reserved = self.values
        if self.fd is None:
            return
        try:
            data = orjson.dumps(
                {"charged": self.values[0], "reserved": self.values[1], "limit": ledger.limit}
            )
            os.pwrite(self.fd, data.ljust(4095) + b"\n", 0)
        finally:
            os.close(self.fd)  # releases the lock
