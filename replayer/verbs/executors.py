"""Where batch jobs run: a local process pool (default) or a Ray cluster; the same `run_job` on both."""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import signal
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from replayer.floor import signals
from replayer.floor.errors import ReplayError, SandboxError
from replayer.floor.signals import die_with_parent
from replayer.verbs.batch import (
    CRASH,
    Job,
    JobOutcome,
    crash_reason,
    keep_containers_ahead,
    outcome_of,
    run_group,
)

OnDone = Callable[[JobOutcome], None]


def _died(job: Job, why: str) -> JobOutcome:
    return outcome_of(job, "failed", "worker", why)


def _pool(workers: int, ahead: bool) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_worker,
        initargs=(os.getpid(), ahead),
    )


def _worker(parent: int, ahead: bool) -> None:
    die_with_parent(parent, signal.SIGKILL)
    if ahead:
        keep_containers_ahead()


Unit = list[Job]
"""What a worker runs at once: one job, or the boundaries of one replay (`replayer.batch.groups`)."""


def _outcome(future: Future[list[JobOutcome]], unit: Unit) -> tuple[list[JobOutcome], bool]:
    """The unit's outcomes, and whether the pool broke (a worker process died while it was in flight)."""
    try:
        return future.result(), False
    except BrokenProcessPool:
        return [_died(job, "a worker process died while the job was in flight") for job in unit], True
    except Exception as exc:  # run_group returns every outcome; this is a failure to ship them back
        return [outcome_of(job, "failed", CRASH, crash_reason(exc)) for job in unit], False


def run_local(
    jobs: list[Unit],
    out: Path,
    workers: int,
    on_done: OnDone,
    labels: dict[str, str],
    ahead: bool = True,
) -> None:
    """Units of jobs are submitted as workers free up, two per worker at a time, so that the parent holds no future
    per job. A worker that dies fails the jobs in flight (not on disk: the next run retries them) and the
    batch goes on in a new pool. Ctrl-C cancels what has not started; jobs in flight are interrupted and
    leave no result. `ahead`: each worker keeps the next job's container started (sandboxes/ahead.py)."""
    pool = _pool(workers, ahead)
    queue: Iterator[Unit] = iter(jobs)
    running: dict[Future[list[JobOutcome]], Unit] = {}
    try:
        while True:
            broken = False
            for job in itertools.islice(queue, 2 * workers - len(running)):
                try:
                    running[pool.submit(run_group, job, out, labels)] = job
                except BrokenProcessPool:  # a worker died since the last wait: run this job in the next pool
                    queue = itertools.chain([job], queue)
                    broken = True
                    break
            if not running and not broken:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                outcomes, died = _outcome(future, running.pop(future))
                broken |= died
                for outcome in outcomes:
                    on_done(outcome)
            if broken:  # every job still in flight fails with the pool: record them, then start a new pool
                for future in wait(running)[0]:
                    for outcome in _outcome(future, running.pop(future))[0]:
                        on_done(outcome)
                pool.shutdown(wait=True)
                pool = _pool(workers, ahead)
    except BaseException:
        _end(pool, labels)
        raise
    pool.shutdown(wait=True)


def _end(pool: ProcessPoolExecutor, labels: dict[str, str]) -> None:
    """At an interruption: end the workers now, then remove what they held (their jobs' containers and the
    containers ahead, by the batch's label; their slots and states, whose owners are gone), so that nothing
    waits for the next batch or `replayer gc`."""
    from replayer.sandboxes.docker import connect, remove_containers
    from replayer.sandboxes.quota import sweep_states

    workers = list((getattr(pool, "_processes", None) or {}).values())
    pool.shutdown(wait=False, cancel_futures=True)
    with signals.deferred():
        for worker in workers:
            worker.kill()
        for worker in workers:
            worker.join(timeout=10)
        with contextlib.suppress(ReplayError, OSError):  # the engine gone too: the next batch removes them
            for key, value in labels.items():
                remove_containers(connect(), label=f"{key}={value}")
            sweep_states()


def run_ray(
    jobs: list[Unit],
    out: Path,
    address: str,
    workers: int,
    on_done: OnDone,
    labels: dict[str, str],
) -> None:
    """`address` "local" starts a local cluster with `workers` CPUs; anything else is ray.init's address.

    Each job is a task of one CPU spread over the nodes (SPREAD), submitted as CPUs free up: at most two per
    CPU of the cluster in flight, counted again at every round (a node that joins gets work), so the driver
    holds no reference per job. `out` must be the same directory on every node (a shared file system)."""
    try:
        import ray
    except ImportError:
        raise SandboxError("--ray needs the ray package (pip install 'sandbox-replayer[ray]')") from None
    if address == "local":
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False)
    refs: dict[object, Unit] = {}
    try:
        task = ray.remote(_on_node).options(num_cpus=1, scheduling_strategy="SPREAD")
        queue = iter(jobs)
        while True:
            room = 2 * (int(ray.cluster_resources().get("CPU", 0)) or workers) - len(refs)
            for job in itertools.islice(queue, max(room, 0)):
                refs[task.remote(job, out, labels)] = job
            if not refs:
                break
            done, _ = ray.wait(list(refs), num_returns=1)
            job = refs.pop(done[0])
            try:
                outcomes = ray.get(done[0])
            except ray.exceptions.RayError as exc:
                outcomes = [_died(one, f"the Ray task failed: {type(exc).__name__}") for one in job]
            for outcome in outcomes:
                on_done(outcome)
    except BaseException:
        for ref in refs:
            ray.cancel(ref, force=True)
        raise
    finally:
        ray.shutdown()


def _on_node(unit: Unit, out: Path, labels: dict[str, str]) -> list[JobOutcome]:
    """A Ray task: the unit on the node Ray chose, which its outcomes name."""
    import ray

    return run_group(unit, out, labels, ray.get_runtime_context().get_node_id())
