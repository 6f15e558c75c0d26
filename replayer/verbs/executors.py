"""Where batch jobs run: a local process pool (default) or a Ray cluster; the same `run_job` on both."""

from __future__ import annotations

import contextlib
import itertools
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, Executor, Future, wait
from pathlib import Path
from typing import Any

from replayer.floor import hostproc, signals
from replayer.floor.errors import ReplayError, SandboxError
from replayer.floor.signals import die_with_parent
from replayer.verbs.batch import CRASH, crash_reason, landed, run_group
from replayer.verbs.batch_jobs import Job
from replayer.verbs.batch_tally import JobOutcome, outcome_of
from replayer.verbs.containers_ahead import keep_containers_ahead, stop_containers_ahead

OnDone = Callable[[JobOutcome], None]
logger = logging.getLogger(__name__)


def _died(job: Job, out: Path, why: str) -> JobOutcome:
    """A job in flight on a worker that died: failed, unless it landed before the worker died."""
    return landed(job, out) or outcome_of(job, "failed", "worker", why)


def _pool(workers: int, ahead: bool) -> Executor:
    return hostproc.process_pool(workers, _worker, (os.getpid(), ahead))


def _worker(parent: int, ahead: bool) -> None:
    die_with_parent(parent, signal.SIGKILL)
    if ahead:
        keep_containers_ahead()


Unit = list[Job]
"""What a worker runs at once: one job, or the boundaries of one replay (`replayer.batch.groups`)."""


def _outcome(future: Future[list[JobOutcome]], unit: Unit, out: Path) -> tuple[list[JobOutcome], bool]:
    """The unit's outcomes, and whether the pool broke (a worker process died while it was in flight)."""
    try:
        return future.result(), False
    except BrokenExecutor:
        return [_died(job, out, "a worker process died while the job was in flight") for job in unit], True
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
    per job. A worker that dies fails the jobs in flight that had not landed (not on disk: the next run retries
    them) and the batch goes on in a new pool. Ctrl-C cancels what has not started; jobs in flight are interrupted and
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
                except BrokenExecutor:  # a worker died since the last wait: run this job in the next pool
                    queue = itertools.chain([job], queue)
                    broken = True
                    break
            if not running and not broken:
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                outcomes, died = _outcome(future, running.pop(future), out)
                broken |= died
                for outcome in outcomes:
                    on_done(outcome)
            if broken:  # every job still in flight fails with the pool: record them, then start a new pool
                for future in wait(running)[0]:
                    for outcome in _outcome(future, running.pop(future), out)[0]:
                        on_done(outcome)
                pool.shutdown(wait=True)
                pool = _pool(workers, ahead)
    except BaseException:
        _end(pool, labels)
        raise
    pool.shutdown(wait=True)


def _end(pool: Executor, labels: dict[str, str]) -> None:
    """At an interruption: end the workers now, then remove what they held (their jobs' containers, the
    containers ahead and the snapshot images of continue jobs, by the batch's label; their slots and states,
    whose owners are gone), so that nothing
    waits for the next batch or `replayer gc`."""
    from replayer.sandboxes import engines
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
                engines.chosen().remove_containers(f"{key}={value}")
                engines.chosen().remove_images(f"{key}={value}")  # the snapshots of continue jobs
            sweep_states()


def run_ray(
    jobs: list[Unit],
    out: Path,
    address: str,
    workers: int,
    on_done: OnDone,
    labels: dict[str, str],
    ahead: bool = True,
) -> None:
    """`address` "local" starts a local cluster with `workers` CPUs; anything else is ray.init's address.

    The units run on Ray actors of one CPU each, one per CPU of the cluster, placed SPREAD over the nodes
    (counted again at every round: a node that joins gets actors). The driver gives each ready actor at most
    two units at a time, as it frees up, so that it holds no reference per job, and an actor knows its next
    unit while it runs one: `ahead`, it keeps that unit's container started (sandboxes/ahead.py), on its own
    node. An actor that dies fails its units in flight (the next run retries them) and is replaced.

    At the end, and at an interruption (then at once, without waiting for the jobs in flight), the actors
    are ended and every node that ran one removes the batch's containers (jobs' and spares') and the
    states and slots their dead owners left (`_clean_node`). `out` must be the same directory on every
    node (a shared file system)."""
    try:
        import ray
    except ImportError:
        raise SandboxError("--ray needs the ray package (pip install 'sandbox-replayer[ray]')") from None
    # the driver's Ray prints its cluster's errors (a worker that died) to stdout, which is `--json`'s
    with contextlib.redirect_stdout(sys.stderr):
        if address == "local":
            hostproc.start_ray(ray, num_cpus=workers, include_dashboard=False, log_to_driver=False)
        else:
            hostproc.start_ray(ray, address=address, log_to_driver=False)
        pool = _Actors(ray, ahead)
        try:
            _Dispatch(ray, pool, jobs, out, labels, on_done).run(workers)
        except BaseException:
            with signals.deferred():
                pool.end(labels, close=False)
            raise
        else:
            pool.end(labels, close=True)
        finally:
            ray.shutdown()


class _Dispatch:
    """The units to the ready actors, at most two in flight each, each outcome to `on_done` as it comes."""

    def __init__(
        self, ray: Any, pool: _Actors, jobs: list[Unit], out: Path, labels: dict[str, str], on_done: OnDone
    ) -> None:
        self.ray, self.pool, self.out, self.labels, self.on_done = ray, pool, out, labels, on_done
        self.queue: Iterator[Unit] = iter(jobs)
        self.held: list[Unit] = []
        """Taken from the queue, no actor free for it yet."""
        self.refs: dict[object, tuple[_Actor, Unit]] = {}

    def run(self, workers: int) -> None:
        # Ray's calls are C code that a signal handler raising inside breaks (SystemError): each round runs
        # with the signals held, and waits briefly, so that a Ctrl-C ends the batch between two rounds
        while True:
            with signals.deferred():
                if not self.round(workers):
                    return

    def round(self, workers: int) -> bool:
        """Units to the free actors, then the next outcome or started actor (if one comes within a short
        wait) handled; False when every unit is done."""
        ray, pool = self.ray, self.pool
        pool.grow(int(ray.cluster_resources().get("CPU", 0)) or workers)
        for actor in pool.free():
            unit = self.held.pop() if self.held else next(self.queue, None)
            if unit is None:
                break
            actor.load += 1
            self.refs[actor.handle.run.remote(unit, self.out, self.labels)] = (actor, unit)
        if not self.held and not self.refs:
            self.held.extend(itertools.islice(self.queue, 1))
            if not self.held:
                return False
        done, _ = ray.wait([*self.refs, *pool.starting], num_returns=1, timeout=_ROUND_WAIT_S)
        if not done:
            return True
        if done[0] in pool.starting:
            pool.started(done[0])
            return True
        actor, unit = self.refs.pop(done[0])
        actor.load -= 1
        try:
            outcomes = ray.get(done[0])
        except ray.exceptions.RayActorError:
            pool.drop(actor)
            outcomes = [_died(one, self.out, "the Ray actor running it died") for one in unit]
        except ray.exceptions.RayError as exc:
            outcomes = [_died(one, self.out, f"the Ray task failed: {type(exc).__name__}") for one in unit]
        for outcome in outcomes:
            self.on_done(outcome)
        return True


_ROUND_WAIT_S = 0.5


class _NodeWorker:
    """A Ray actor: the units the driver gives it, one after another, on its node; `ahead`, the next one's
    container started while one runs."""

    def __init__(self, ahead: bool) -> None:
        import ray

        self.node = str(ray.get_runtime_context().get_node_id())
        if ahead:
            keep_containers_ahead()

    def where(self) -> tuple[str, str]:
        """Its node, and itself as an owner (host, pid, start time: sandboxes/owner.py)."""
        from replayer.floor.owner import owner

        return self.node, owner()

    def run(self, unit: Unit, out: Path, labels: dict[str, str]) -> list[JobOutcome]:
        return run_group(unit, out, labels, self.node)

    def close(self) -> tuple[int, int]:
        """The spare removed; how many job starts took a spare, and how many started their own."""
        return stop_containers_ahead()


class _Actor:
    def __init__(self, handle: Any) -> None:
        self.handle = handle
        self.node = ""
        self.owner = ""
        self.load = 0
        """Its units in flight."""


class _Actors:
    """The batch's actors: those starting (their `where` call pending), those ready, and the node and
    process of every one that ever ran, which `end` cleans after."""

    def __init__(self, ray: Any, ahead: bool) -> None:
        self.ray = ray
        self.ahead = ahead
        self.make = ray.remote(_NodeWorker).options(
            num_cpus=1, scheduling_strategy="SPREAD", max_restarts=0, max_task_retries=0
        )
        self.starting: dict[object, _Actor] = {}
        self.ready: list[_Actor] = []
        self.ran: dict[str, list[str]] = {}
        """Node id -> the actors it held, as owners."""

    def grow(self, cpus: int) -> None:
        while len(self.starting) + len(self.ready) < cpus:
            actor = _Actor(self.make.remote(self.ahead))
            self.starting[actor.handle.where.remote()] = actor

    def started(self, ref: object) -> None:
        actor = self.starting.pop(ref)
        try:
            actor.node, actor.owner = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:  # its node went away: another is made next round
            logger.debug("a Ray actor did not start: %s", type(exc).__name__)
            return
        self.ran.setdefault(actor.node, []).append(actor.owner)
        self.ready.append(actor)

    def free(self) -> list[_Actor]:
        """Ready actors with room for a unit (two in flight each), once per free place, the least loaded
        first."""
        places = [(a.load + k, n, a) for n, a in enumerate(self.ready) for k in range(2 - a.load)]
        return [a for _, _, a in sorted(places, key=lambda p: p[:2])]

    def drop(self, actor: _Actor) -> None:
        if actor in self.ready:
            self.ready.remove(actor)

    def end(self, labels: dict[str, str], close: bool) -> None:
        """`close`: each ready actor removes its spare first (its count logged). Then every actor is ended,
        and each node that ran one removes what they left."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        ray = self.ray
        if close and self.ready:
            calls = {a.handle.close.remote(): a for a in self.ready}
            done, _ = ray.wait(list(calls), num_returns=len(calls), timeout=_CLOSE_S)
            for ref in done:
                with contextlib.suppress(ray.exceptions.RayError):
                    served, started = ray.get(ref)
                    logger.debug(
                        "containers ahead on node %s: %d start(s) took a spare, %d started their own",
                        calls[ref].node,
                        served,
                        started,
                    )
        for actor in [*self.ready, *self.starting.values()]:
            with contextlib.suppress(Exception):
                ray.kill(actor.handle, no_restart=True)
        self.ready.clear()
        self.starting.clear()
        cleaners = [
            ray.remote(_clean_node)
            .options(
                num_cpus=0,
                max_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            )
            .remote(owners, labels)
            for node, owners in self.ran.items()
        ]
        done, _ = ray.wait(cleaners, num_returns=len(cleaners), timeout=_CLOSE_S)
        for ref in done:
            with contextlib.suppress(ray.exceptions.RayError):
                ray.get(ref)


_CLOSE_S = 60.0
"""How long the end of a Ray batch waits for its actors' closes and its nodes' cleanup; past it, what is
left goes to the sweeps of dead owners and `replayer gc`."""


def _clean_node(owners: list[str], labels: dict[str, str]) -> None:
    """A Ray task on a node the batch's actors ran on, once they were ended: wait for their processes to be
    gone (SIGKILL past a grace, each checked to be the same process by its start time), then remove the
    batch's containers on this node's engine and the slots and states their dead owners left."""
    from replayer.floor.owner import owner_alive
    from replayer.sandboxes import engines
    from replayer.sandboxes.quota import sweep_states

    deadline = time.monotonic() + _ACTOR_EXIT_S
    while (alive := [o for o in owners if owner_alive(o)]) and time.monotonic() < deadline:
        time.sleep(0.05)
    for one in alive:
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.kill(int(one.split(":")[1]), signal.SIGKILL)
    with contextlib.suppress(ReplayError, OSError):
        for key, value in labels.items():
            engines.chosen().remove_containers(f"{key}={value}")
            engines.chosen().remove_images(f"{key}={value}")
        sweep_states()


_ACTOR_EXIT_S = 10.0
