"""Compare's runs, each in a process of its own (replayer/pipeline/fork.py), started ahead of their turn.

Up to `parallel` runs go on at once; up to `parallel` more wait, started before their turn: their process
is up while the prefix replays, and once the snapshot is ready each makes its copy of the boundary state
and starts its container while the runs before it go on. A run's turn is then a line on its stdin, and
its fork costs nothing but that line (`RunRecord.fork_s`). Every process has its own session: a Ctrl-C
reaches the compare only, which stops them all.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from replayer.floor import hostproc
from replayer.floor.compare_results import RunRecord
from replayer.floor.errors import last_line
from replayer.floor.events import OnEvent, RunEnded, Stage, ignore
from replayer.floor.io import write_bytes_atomic
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
    return RunRecord(
        variant=job.variant.name,
        repeat=job.repeat,
        status="failed",
        error_kind="worker",
        error=f"the run's process exited {proc.returncode} without a record: {last}",
        dir=job.dir,
    )


def _send(proc: hostproc.Popen[bytes], line: BaseModel) -> None:
    assert proc.stdin is not None
    with contextlib.suppress(OSError):  # it ended already: collected as it is
        proc.stdin.write(line.model_dump_json().encode() + b"\n")
        proc.stdin.flush()


class ForkPool:
    def __init__(self, jobs: list[ForkJob], parallel: int):
        self.jobs = jobs
        self.parallel = parallel
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
                        record = self.records[index] = _collect(self.jobs[index], proc)
                        logger.debug("run %s/%d ended: %s", record.variant, record.repeat, record.status)
                        if on_run is not None:
                            on_run(record)
                        cont = record.continuation
                        failed = record.status == "failed"
                        outcome = (record.error or "") if failed else (cont.agent_status if cont else "-")
                        total = len(self.jobs)
                        on_event(
                            RunEnded(record.variant, record.repeat, outcome, failed, len(self.records), total)
                        )
                time.sleep(_POLL_S)
        except BaseException:
            self.stop()
            raise
        return [self.records[i] for i in range(len(self.jobs))]

    def stop(self) -> None:
        """SIGTERM to every process (each removes its container and state), SIGKILL after a grace."""
        procs = [*self.waiting.values(), *self.running.values()]
        self.waiting.clear()
        self.running.clear()
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
