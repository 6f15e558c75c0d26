"""Ctrl-C and SIGTERM: delivered as `Interrupted`, held back where an interruption would leak a resource."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
from collections.abc import Iterator

from replayer.floor.errors import Interrupted

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


_HARD_EXIT_AFTER = 3
_received = 0


def interrupt(signum: int, frame: object) -> None:
    """Raise Interrupted; the third signal (a cleanup that hangs) ends the process at once."""
    global _received
    _received += 1
    if _received >= _HARD_EXIT_AFTER:
        os._exit(Interrupted.exit_code)
    raise Interrupted(signal.Signals(signum).name)


def install() -> None:
    for signum in _SIGNALS:
        signal.signal(signum, interrupt)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Inside the block, SIGINT/SIGTERM are held and delivered when it ends (on the main thread; elsewhere
    signals never arrive). Wrap the calls that create or remove a resource, so that it is either not
    created or known to the code that removes it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[int] = []
    previous = {s: signal.getsignal(s) for s in _SIGNALS}
    for s in _SIGNALS:
        signal.signal(s, lambda signum, frame: held.append(signum))
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        for signum in dict.fromkeys(held):
            signal.raise_signal(signum)


_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int, signum: int) -> None:
    """Have the kernel send `signum` to this process when its parent dies, however it dies (`kill -9`
    included): SIGKILL for a batch worker (the resumed batch removes its container), SIGTERM for a
    compare fork (it cleans up). Linux only (prctl)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(1)
