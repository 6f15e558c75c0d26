"""The token budget: each request's worst case is reserved before it is forwarded, and settled to what the
upstream reported once its answer is known. A request whose reservation does not fit is never forwarded, so
however many requests run at once, no more than the budget can be billed (docs/bridge.md, "Budgets").

A `Ledger` holds one budget for every bridge given it: in memory (one continuation, or several in one
process), or in a small file under an exclusive lock (`fcntl.flock`) that the continuations of a compare or
a batch share across processes. The file names each reservation's holder (host, pid, start time): a
reservation whose answer never came because its process died stays taken until the next batch on that
folder releases it (`release_dead`; the tokens already billed stay charged). The batch's own ledger also keeps
the smallest request it refused, so that a job not yet started can tell the budget is used up (`used_up`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import threading
from pathlib import Path
from typing import Any

import orjson

from replayer.bridges.sidecalls import asked_tokens
from replayer.floor.errors import BadInput
from replayer.floor.owner import owner, owner_alive

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
        self._holders: dict[str, int] = {}
        self._smallest_refused = 0

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
                smallest = self._smallest_refused
                self._smallest_refused = min(smallest, tokens) if smallest else tokens
                return self, charged, reserved
            state[1] = reserved + tokens
            self._hold(tokens)
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
            self._hold(-reserved)

    def _hold(self, tokens: int) -> None:
        """This process's reservations in a ledger file grow (or shrink) by `tokens`."""
        if self.path is None:
            return
        me = owner()
        held = self._holders.get(me, 0) + tokens
        if held > 0:
            self._holders[me] = held
        else:
            self._holders.pop(me, None)

    def release_dead(self) -> int:
        """Give back the reservations of holders that are gone (a batch killed mid-request; read under the
        batch's lock, so none of DIR's jobs is in flight) and those the file names no holder for (a file of an
        older version); the tokens charged stay. Returns the tokens released. A holder of another host is not
        ours to judge: its reservation stays (docs/batch.md, "Token budgets")."""
        with self._lock, self._state() as state:
            alive = {who: n for who, n in self._holders.items() if owner_alive(who)}
            kept = min(state[1], sum(alive.values()))
            released, state[1] = state[1] - kept, kept
            self._holders = alive
        return released

    def used_up(self) -> bool:
        """No request the size of the smallest this ledger has refused can ever fit again, even once every
        reservation is settled: a job not yet started would only be held at its first request."""
        with self._lock, self._state() as state:
            return bool(self._smallest_refused) and self.limit - state[0] < self._smallest_refused

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
        self.size = 0

    def __enter__(self) -> list[int]:
        path = self.ledger.path
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                self.fd = os.open(
                    path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600
                )
            except OSError as exc:  # a link (ELOOP), a folder
                raise BadInput(
                    f"{path}: not a token ledger ({exc.strerror}); remove it to start anew"
                ) from None
            saved: object = None
            if stat.S_ISREG(os.fstat(self.fd).st_mode):  # never a FIFO waited on
                fcntl.flock(self.fd, fcntl.LOCK_EX)
                data = os.read(self.fd, _FILE_BYTES)
                self.size = len(data)
                with contextlib.suppress(orjson.JSONDecodeError):
                    saved = orjson.loads(data) if data.strip() else {}
            if not isinstance(saved, dict):
                os.close(self.fd)
                raise BadInput(
                    f"{path}: not a token ledger (a JSON object of counts); remove it to start anew"
                )
            # a results folder may be someone else's: a count below zero would loosen the budget
            self.values = [_count(saved.get("charged")), _count(saved.get("reserved"))]
            self.ledger._smallest_refused = _count(saved.get("smallest_refused"))
            holders = saved.get("holders")
            self.ledger._holders = (
                {str(k): _count(v) for k, v in holders.items() if _count(v)}
                if isinstance(holders, dict)
                else {}
            )
            if self.ledger.limit_in_file:
                self.ledger.limit = _count(saved.get("limit"))
        return self.values

    def __exit__(self, *exc: object) -> None:
        ledger = self.ledger
        ledger._charged, ledger._reserved = self.values
        if self.fd is None:
            return
        try:
            saved = {"charged": self.values[0], "reserved": self.values[1], "limit": ledger.limit}
            if ledger._smallest_refused:
                saved["smallest_refused"] = ledger._smallest_refused
            data = orjson.dumps({**saved, "holders": ledger._holders}) + b"\n"
            # one write over the old content, padded to its length (JSON ends in blanks): never a moment
            # where the file is empty or half of two versions
            os.pwrite(self.fd, data.ljust(self.size), 0)
        finally:
            os.close(self.fd)  # releases the lock


_FILE_BYTES = 1 << 20
"""A ledger is a few counts and a holder per process that reserves; a longer file is read no further."""


def _count(value: object) -> int:
    """A count read from a ledger file: a whole number of at least 0 (anything else counts as 0)."""
    return value if type(value) is int and value > 0 else 0
