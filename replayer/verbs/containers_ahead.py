"""A batch worker's containers ahead: the next job's container starts while the current job runs
(sandboxes/ahead.py), one spare a worker process, removed as the process exits."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from replayer.sandboxes.base import Ahead


_AHEAD: list[Ahead] = []
"""This worker's Ahead backend (sandboxes/ahead.py), once `keep_containers_ahead` made it."""


def keep_containers_ahead() -> None:
    """From now on this process's jobs start their containers through an AheadBackend: the next job's container
    starts while the current job runs. Its spare is removed as the process exits (multiprocessing runs the
    finalizer in a pool worker; a SIGKILL leaves it to the sweeps of the dead owner's containers and slots)."""
    import multiprocessing.util

    from replayer.sandboxes import engines

    if not _AHEAD and (ahead := engines.chosen().ahead()) is not None:  # None: an engine without (Podman)
        _AHEAD.append(ahead)
        multiprocessing.util.Finalize(None, _AHEAD[0].close, exitpriority=10)


def stop_containers_ahead() -> tuple[int, int]:
    """This process's spare removed (none is started after); how many job starts took a spare and how many
    started their own container. (0, 0) when it kept none."""
    if not _AHEAD:
        return 0, 0
    _AHEAD[0].close()
    return _AHEAD[0].served, _AHEAD[0].started


def backend() -> Ahead | None:
    return _AHEAD[0] if _AHEAD else None
