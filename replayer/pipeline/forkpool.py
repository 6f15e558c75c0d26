"""Compare's runs, each in a process of its own (replayer/pipeline/fork.py), started ahead of their turn.

Up to `parallel` runs go on at once; up to `parallel` more wait, started before their turn: their process
is up while the prefix replays, and once the snapshot is ready each makes its copy of the boundary state
and starts its container while the runs before it go on. A run's turn is then a line on its stdin, and
its fork costs nothing but that line (`RunRecord.fork_s`). Every process has its own session: a Ctrl-C
reaches the compare only, which stops them all.

The runs draw on the compare's total output budget (`OutputLimit`); once one of them is refused for its
outputs (or the total is used up), no run is given its turn any more: the runs before go on, the rest are
recorded as not run (kind `output`), and `stopped` says why.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from replayer.floor import hostproc
from replayer.floor.compare_results import RunRecord
from replayer.floor.errors import last_line
from replayer.floor.events import OnEvent, RunEnded, Stage, ignore
from replayer.floor.io import write_bytes_atomic
from replayer.floor.output_budget import SharedTotal
from replayer.pipeline.fork import BoundaryReady, ForkJob, Turn
from replayer.pipeline.rootfs import RootfsDiff

_POLL_S = 0.05
_STOP_GRACE_S = 30.0
OnRun = Callable[[RunRecord], None]
logger = logging.getLogger(__name__)


def _collect(job: ForkJob, proc: hostproc.Popen[bytes]) -> RunRecord:
    path = job.run_dir / "run.json"
    (job.run_dir / "job.json").unlink(missing_ok=True)  # its paths name the partial output directory
    if path.is_file():
        return RunRecord.model_validate_json(path.read_bytes())
    last = last_line((job.run_dir / "fork.log").read_bytes()[-600:]) or ""
    return _failed(job, "worker", f"the run's process exited {proc.returncode} without a record: {last}")


def _failed(job: ForkJob, kind: str, error: str) -> RunRecord:
    return RunRecord(
        variant=job.variant.name,
        repeat=job.repeat,
        status="failed",
        error_kind=kind,
        error=error,
        dir=job.dir,
    )


def _send(proc: hostproc.Popen[bytes], line: BaseModel) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(OSError):  # it ended already: collected as it is
        proc.stdin.write(line.model_dump_json().encode() + b"\n")
        proc.stdin.flush()


@dataclass
class OutputLimit:
    """A compare's total output budget, shared by its pools (every boundary's, with `compare -n a,b`)."""

    total: SharedTotal
    stopped: str | None = None
    """Why no run gets its turn any more (the first refused for its outputs, or the total used up)."""

    def check(self, idle: bool) -> str | None:
        """Why no more runs go on; `idle`: no run holds a draw of the total (what is left is exact)."""
        if self.stopped is None and idle and self.total.left() <= 0:
            self.stopped = "the compare's outputs reached its total output budget (see --limits output=)"
        return self.stopped


class ForkPool:
    def __init__(self, jobs: list[ForkJob], parallel: int, limit: OutputLimit | None = None):
        self.jobs = jobs
        self.parallel = parallel
        self.limit = limit
        self.queue = list(range(len(jobs)))
        self.waiting: dict[int, hostproc.Popen[bytes]] = {}
        """Started, not yet given their turn, in the order they get it."""
        self.running: dict[int, hostproc.Popen[bytes]] = {}
        self.records: dict[int, RunRecord] = {}
        self.boundary: BoundaryReady | None = None

    def start_ahead(self) -> None:
        """Start processes until `parallel` of them wait (told of the boundary if it is ready)."""
        while self.queue and len(self.waiting) < self.parallel:
            index = self.queue.pop(0)
            job = self.jobs[index]
            if self.boundary is not None:  # ready now: nothing to start ahead of it
                job = job.model_copy(update={"prestart_image": None})
            job.run_dir.mkdir(parents=True)
            write_bytes_atomic(job.run_dir / "job.json", job.model_dump_json().encode())
            with (job.run_dir / "fork.log").open("wb") as log:
                proc = hostproc.start(
                    hostproc.python(
                        sys.executable,
                        "-m",
                        "replayer.pipeline.fork",
                        str(job.run_dir / "job.json"),
                        str(os.getpid()),
                    ),
                    env=os.environ,  # the replayer itself, with the user's settings and key
                    stdin=hostproc.PIPE,
                    stdout=log,
                    stderr=hostproc.STDOUT,
                    start_new_session=True,
                )
            self.waiting[index] = proc
            if self.boundary is not None:
                _send(proc, self.boundary)

    def announce(self, image: str, sealed: Path | None, rootfs: RootfsDiff | str | None = None) -> None:
        """The snapshot is ready: every waiting process (and each started later) makes its state and
        mounts it into its pre-started container (given the boundary's `rootfs` changes), or starts its
        container from the snapshot `image` (and the sealed boundary state)."""
        self.boundary = BoundaryReady(image=image, sealed=sealed, at=time.time(), rootfs=rootfs)
        for proc in self.waiting.values():
            _send(proc, self.boundary)

    def run(self, on_run: OnRun | None, on_event: OnEvent = ignore) -> list[RunRecord]:
        """Every run, once announced, `parallel` at a time; their records in job order."""
        assert self.boundary is not None
        on_event(Stage("runs", len(self.jobs)))
        try:
            while self.queue or self.waiting or self.running:
                if self.limit is not None and self.limit.check(idle=not self.running):
                    self._not_run(self.limit.stopped or "", on_run, on_event)
                self.start_ahead()
                while self.waiting and len(self.running) < self.parallel:
                    index = next(iter(self.waiting))
                    proc = self.waiting.pop(index)
                    _send(proc, Turn(at=time.time()))
                    logger.debug("run %s/%d goes on", self.jobs[index].variant.name, self.jobs[index].repeat)
                    self.running[index] = proc
                for group in (self.running, self.waiting):
                    for index, proc in list(group.items()):
                        if proc.poll() is None:
                            continue
                        del group[index]
                        if proc.stdin is not None:  # a line it never read (it ended first) cannot flush
                            with contextlib.suppress(OSError):
                                proc.stdin.close()
                        record = _collect(self.jobs[index], proc)
                        if (
                            self.limit is not None
                            and record.error_kind == "output"
                            and not self.limit.stopped
                        ):
                            self.limit.stopped = record.error
                        self._ended(index, record, on_run, on_event)
                time.sleep(_POLL_S)
        except BaseException:
            self.stop()
            raise
        return [self.records[i] for i in range(len(self.jobs))]

    def _ended(self, index: int, record: RunRecord, on_run: OnRun | None, on_event: OnEvent) -> None:
        self.records[index] = record
        logger.debug("run %s/%d ended: %s", record.variant, record.repeat, record.status)
        if on_run is not None:
            on_run(record)
        cont = record.continuation
        failed = record.status == "failed"
        outcome = (record.error or "") if failed else (cont.agent_status if cont else "-")
        on_event(RunEnded(record.variant, record.repeat, outcome, failed, len(self.records), len(self.jobs)))

    def _not_run(self, why: str, on_run: OnRun | None, on_event: OnEvent) -> None:
        """Every run not given its turn yet is not carried out: its process stopped, its directory removed,
        its record says `why`."""
        left = [*self.waiting, *self.queue]
        _stop(list(self.waiting.values()))
        self.waiting.clear()
        self.queue.clear()
        for index in left:
            job = self.jobs[index]
            shutil.rmtree(job.run_dir, ignore_errors=True)
            with contextlib.suppress(OSError):  # runs/NAME/, when none of its runs was carried out
                job.run_dir.parent.rmdir()
            self._ended(index, _failed(job, "output", f"not run: {why}"), on_run, on_event)

    def stop(self) -> None:
        """SIGTERM to every process (each removes its container and state), SIGKILL after a grace."""
        procs = [*self.waiting.values(), *self.running.values()]
        self.waiting.clear()
        self.running.clear()
        _stop(procs)


def _stop(procs: list[hostproc.Popen[bytes]]) -> None:
    """SIGTERM to `procs`, SIGKILL to those that outlive the grace."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_S
    for proc in procs:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.1))
        except hostproc.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
