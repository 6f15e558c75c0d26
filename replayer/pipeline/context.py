"""A run's owner of its resources: the state folder, the sandbox, a fork's slot, the bridge and the model
stand-in of a continuation, snapshot images. Each is registered as it is made and released in the
reverse order on every path out of the `with` block (success, refusal, exception, Ctrl-C/SIGTERM as
`Interrupted`); one can be released earlier (a sandbox stopped before the state is exported).

The orchestration functions (engine, multiboundary, continuation, fork, compare) then read as their steps:
what they made is let go by the context, not by a `finally` of their own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import TracebackType
from typing import TypeVar

T = TypeVar("T")
logger = logging.getLogger(__name__)


@dataclass
class _Held:
    what: str
    resource: object
    release: Callable[[], object]
    released: bool = False


class RunContext:
    """Owns what a run made; `with RunContext() as ctx:` releases it all, last made first."""

    def __init__(self) -> None:
        self._held: list[_Held] = []
        self._ending: BaseException | None = None
        """The exception the `with` block ends with, if any."""

    def own(self, resource: T, release: Callable[[], object], what: str = "") -> T:
        """`resource`, released by `release()` when the context ends (or by `release(resource)` before).
        Owning a resource again moves it up: it is then released before what was made since (a container
        once another resource is mounted into it)."""
        self._held = [h for h in self._held if h.resource is not resource or h.released]
        self._held.append(_Held(what or type(resource).__name__, resource, release))
        return resource

    def enter(self, manager: AbstractContextManager[T], what: str = "") -> T:
        """Enter `manager` now, exit it when the context ends, told of the exception that ends the run (as
        a `with` would be; what it returns does not suppress it)."""
        value = manager.__enter__()

        def exit_() -> None:
            exc = self._ending
            manager.__exit__(type(exc) if exc else None, exc, exc.__traceback__ if exc else None)

        self.own(value, exit_, what or type(manager).__name__)
        return value

    def release(self, resource: object) -> None:
        """Release `resource` now; the context's end does not release it again."""
        for held in reversed(self._held):
            if held.resource is resource and not held.released:
                held.released = True
                held.release()

    def close(self) -> None:
        """Release everything not yet released, last made first. Every release runs even when one before
        it failed; the first failure is raised once all have run."""
        first: BaseException | None = None
        while self._held:
            held = self._held.pop()
            if held.released:
                continue
            held.released = True
            try:
                held.release()
            except BaseException as exc:  # noqa: BLE001 - the others are still released
                logger.debug("releasing %s failed: %s", held.what, exc)
                first = first or exc
        if first is not None:
            raise first

    def __enter__(self) -> RunContext:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # as a `finally` would: a release that fails raises, chained to the run's own exception
        self._ending = exc
        self.close()
