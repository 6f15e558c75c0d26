"""Where batch jobs run: a local process pool (default) or a Ray cluster; the same `run_job` on both."""

from __future__ import annotations

import itertools
import multiprocessing
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from replayer.batch import Job, JobOutcome, outcome_of, run_job
from replayer.errors import SandboxError

OnDone = Callable[[JobOutcome], None]


def _died(job: Job, why: str) -> JobOutcome:
    return outcome_of(job, "failed", "worker", why)


def run_local(jobs: list[Job], out: Path, workers: int, on_done: OnDone) -> None:
    """Jobs are submitted as workers free up, two per worker at a time, so that the parent holds no future
    per job. Ctrl-C cancels what has not started; jobs in flight are interrupted and leave no result."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"))
    queue = iter(jobs)
    running: dict[Future[JobOutcome], Job] = {}
    try:
        while True:
            for job in itertools.islice(queue, 2 * workers - len(running)):
                try:
                    running[pool.submit(run_job, job, out)] = job
                except BrokenProcessPool:  # a worker died before: the pool runs nothing more
                    for lost in itertools.chain([job], queue):
                        on_done(_died(lost, "a worker process died"))
            if not running:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                job = running.pop(future)
                try:
                    on_done(future.result())
                except BrokenProcessPool:
                    on_done(_died(job, "a worker process died"))
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def run_ray(jobs: list[Job], out: Path, address: str, workers: int, on_done: OnDone) -> None:
    """`address` "local" starts a local cluster with `workers` CPUs; anything else is ray.init's address."""
    try:
        import ray
    except ImportError:
        raise SandboxError("--ray needs the ray package (pip install 'sandbox-replayer[ray]')") from None
    if address == "local":
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
    else:
        ray.init(address=address, log_to_driver=False)
    try:
        task = ray.remote(run_job)
        refs = {task.remote(job, out): job for job in jobs}
        while refs:
            done, _ = ray.wait(list(refs), num_returns=1)
            job = refs.pop(done[0])
            try:
                on_done(ray.get(done[0]))
            except ray.exceptions.RayError as exc:
                on_done(_died(job, f"the Ray task failed: {type(exc).__name__}"))
    except BaseException:
        for ref in refs:
            ray.cancel(ref, force=True)
        raise
    finally:
        ray.shutdown()
