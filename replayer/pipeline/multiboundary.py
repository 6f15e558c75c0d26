"""The one replay: every verb that reruns a prefix (`run -n K`, `run -n 3,7,12`, a compare, a batch's
boundaries of one trajectory) reruns the steps once, in one container, up to the last boundary asked
for, and hands each boundary it passes to a consumer; `run -n K` is a list of one.

The reruns of steps 1..k do not depend on the cut. At each asked boundary (every step up to it rerun,
none after it started: `steps.rerun_prefix`'s `on_step`) the boundary takes the replay's state: its
fresh observations and divergences, the workspace and the agent home (the home as the rerunner's close
would leave it, `StepwiseRerunner.clean_home_copy`), and rebuilds its prefix from them into its own
atomic output directory. What is done then is the consumer's:

- write its result (no continuation): its state/ copied, `on_passed` heard (a compare snapshots the
  boundary there), result.json committed;
- continue in place (one boundary with a continuation): once the rerunner has closed, the agent
  continues in the replay's own container, through the bridge folder mounted from the start;
- snapshot and fork (several boundaries with a continuation): a snapshot is taken as the replay passes
  the boundary, and its continuation forks from it once the replay is done (replayer/pipeline/fanout.py).

A boundary that is refused (its plan, its output) is its own outcome and does not stop the others; a
replay that fails at step j leaves the boundaries before j done.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from replayer.adapters.base import Rerunner, StepwiseRerunner
from replayer.floor.errors import ReplayError
from replayer.floor.events import OnEvent, Stage, ignore
from replayer.floor.io import OutputDir
from replayer.floor.output_budget import OverBudget
from replayer.floor.pins import running_version
from replayer.floor.requests import ReplayRequest
from replayer.floor.results import Divergence, ReplayResult
from replayer.floor.rundirs import RunDirs
from replayer.floor.safecopy import copy_untrusted
from replayer.floor.trajectory import Observation
from replayer.pipeline import continue_run, fanout, steps
from replayer.pipeline.boundary_outputs import BoundaryOutputs
from replayer.pipeline.context import RunContext
from replayer.pipeline.plan import Plan
from replayer.pipeline.result import (
    Done,
    Outcome,
    Replayed,
    assemble,
    commit,
    failed,
    os_error,
    sandbox_record,
    used_up,
)
from replayer.pipeline.steps import RERUNS
from replayer.sandboxes import engines
from replayer.sandboxes.base import Ahead, Backend, Sandbox
from replayer.sandboxes.quota import StateDir

logger = logging.getLogger(__name__)
OnPassed = Callable[[int, Sandbox, RunDirs, Path], None]
"""Called, without a continuation, as the replay passes boundary K, before K's result is committed: the
replay's sandbox, K's state as `run -n K` exports it (its `state/`: the workspace, the home as the
rerunner's close leaves it) and K's rebuilt native directory (a compare snapshots K there). The
sandbox goes on replaying after it: what the hook runs in it must not change its state."""


def boundary_dir(out: Path, boundary: int) -> Path:
    """Where `run -n a,b,c -o OUT` writes boundary `boundary`."""
    return out / f"after-{boundary}"


@dataclass
class _Boundary:
    request: ReplayRequest
    plan: Plan
    out: OutputDir


@dataclass
class _Replay:
    """What the boundaries of one replay share."""

    request: ReplayRequest
    replayed: Replayed
    pending: dict[int, _Boundary]
    outcomes: dict[int, Outcome]
    in_place: bool
    """One boundary with a continuation: it continues in the replay's container once the rerunner closes."""
    box: Sandbox | None = None
    dirs: RunDirs | None = None
    state: StateDir | None = None
    sandbox_s: float = 0.0
    rerun_started: float = 0.0
    skips: steps.Skips = field(default_factory=steps.Skips)
    full: Plan | None = None
    """The last boundary's plan, which the replay runs (the reruns add their degradations to it)."""
    runtime_degradations: int = 0
    """How many of `full`'s degradations the plan made (those after them, the reruns added)."""
    keep: RunContext | None = None
    """With a continuation: owns the boundaries' snapshots and states until their continuations end."""
    replay_id: str = ""
    forks: dict[int, fanout.Forked] = field(default_factory=dict)
    """With a continuation: the boundaries passed, their continuations still to run."""
    on_passed: OnPassed | None = None
    on_event: OnEvent = ignore
    outputs: BoundaryOutputs | None = None
    """The run's total output budget, and the boundary committed last (boundary_outputs.py)."""


def replay(
    request: ReplayRequest,
    replayed: Replayed,
    plans: dict[int, tuple[ReplayRequest, Plan]],
    workspace: Path,
    key: str,
    backend: Backend,
    on_event: OnEvent,
    on_passed: OnPassed | None,
    outcomes: dict[int, Outcome],
) -> None:
    """Each boundary of `plans` (its own request and plan) from one replay of the workspace, its outcome
    added to `outcomes`: its output directories made, the prefix rerun once, each boundary consumed as the
    replay passes it, then the continuations (in place, or forked from the snapshots)."""
    assert replayed.image is not None
    assert request.continuation is None or on_passed is None, "a continued boundary is not snapshotted here"
    pending: dict[int, _Boundary] = {}
    forks: dict[int, fanout.Forked] = {}
    outputs = BoundaryOutputs.of(request.limits, hard_links=on_passed is None)  # compare forks from state/
    try:
        for k, (one, plan) in plans.items():
            tapes = [one.continuation.cassette, one.continuation.record_cassette] if one.continuation else []
            try:
                made = OutputDir(one.out, force=one.force, inputs=[one.trajectory, workspace, *tapes])
            except ReplayError as exc:
                outcomes[k] = exc
                continue
            pending[k] = _Boundary(one, plan, made)
        if not pending:
            return
        in_place = request.continuation is not None and len(pending) == 1
        run = _Replay(
            request,
            replayed,
            pending,
            outcomes,
            in_place,
            forks=forks,
            on_passed=on_passed,
            on_event=on_event,
            outputs=outputs,
        )
        agent, version = replayed.adapter.name, replayed.version.version
        with running_version(agent, version), RunContext() as keep:
            run.keep, run.replay_id = keep, f"mb-{uuid.uuid4().hex[:12]}"
            _rerun(run, workspace, replayed.image, backend, key, on_event)
            _continue_forks(run, _fork_backend(backend), key, on_event)
    finally:
        for left in pending.values():  # a replay that stopped before them
            left.out.discard()
        for fork in forks.values():  # continuations not carried out
            fork.out.discard()
        outputs.close()


def _fork_backend(backend: Backend) -> Backend:
    """What starts the forks' containers: they run snapshot images that no later job runs, so a spare shaped
    like one (sandboxes/ahead.py) would never be taken, and would hold the image the replay removes."""
    return engines.chosen() if isinstance(backend, Ahead) else backend


def _rerun(run: _Replay, workspace: Path, image: str, backend: Backend, key: str, on_event: OnEvent) -> None:
    """The state and the sandbox, the reruns up to the last boundary (each boundary consumed as they pass
    it), then the boundary that continues in place."""
    request, adapter, traj = run.request, run.replayed.adapter, run.replayed.traj
    last = max(run.pending)
    full = run.full = run.pending[last].plan
    run.runtime_degradations = len(full.degradations)
    with RunContext() as ctx:
        try:
            opened = steps.open_replay(
                ctx,
                backend,
                adapter,
                traj,
                workspace,
                image,
                # where an unlimited state goes: beside the outputs (hidden), never inside one that commits
                # mid-replay
                scratch=run.pending[last].out.final.parent,
                skips=run.skips,
                run_id=run.replay_id.removeprefix("mb-") or uuid.uuid4().hex[:12],  # its snapshots name it
                limits=request.limits,
                labels=request.labels,
                bridge=run.in_place,
                on_event=on_event,
            )
        except OSError as exc:  # a full quota, an unwritable state: the run's error
            known = os_error(exc, request)
            if known is None:
                raise
            raise known from None
        run.dirs, run.state = opened.dirs, opened.state
        run.box, run.sandbox_s = opened.box, opened.sandbox_s
        if run.keep is not None and request.continuation is not None and not run.in_place:
            fanout.own_images(run.keep, opened.box, run.replay_id)
        run.rerun_started = time.monotonic()
        try:
            steps.rerun_prefix(
                adapter,
                traj,
                opened.box,
                opened.dirs,
                full,
                request,
                on_event,
                on_step=lambda *a: _passed(run, *a),
            )
        except (ReplayError, OSError) as exc:
            for k in list(run.pending):  # the boundaries the replay did not reach
                boundary = run.pending.pop(k)
                run.outcomes[k] = failed(exc, boundary.out, boundary.request)
            for k in list(run.forks) if run.in_place else ():  # it was to continue in this container
                fork = run.forks.pop(k)
                run.outcomes[k] = failed(exc, fork.out, fork.request)
            return
        if run.in_place:
            _continue_in_place(run, key, on_event)


def _passed(
    run: _Replay,
    step: int,
    rerunner: Rerunner,
    observations: dict[str, Observation],
    divergences: list[Divergence],
) -> None:
    """Every boundary up to `step` takes the replay's state now."""
    for k in sorted(k for k in run.pending if k <= step):
        boundary = run.pending.pop(k)
        if not run.pending:  # the replay's last boundary: what follows is its rebuild (progress)
            run.on_event(Stage("rebuild"))
        try:
            written = _write(run, boundary, rerunner, observations, divergences)
            if isinstance(written, fanout.Forked):
                run.forks[k] = written
            else:
                run.outcomes[k] = written
        except (ReplayError, OSError) as exc:
            run.outcomes[k] = failed(exc, boundary.out, boundary.request)
            if isinstance(exc, OverBudget):
                raise  # the replay stops: the boundaries after this one are refused with it
        except BaseException:
            boundary.out.discard()
            raise


def _write(
    run: _Replay,
    boundary: _Boundary,
    rerunner: Rerunner,
    observations: dict[str, Observation],
    divergences: list[Divergence],
) -> ReplayResult | fanout.Forked:
    """Boundary k's result directory; with a continuation, its prefix written (and, forking, its snapshot
    taken), the continuation still to run."""
    assert run.dirs is not None and run.box is not None and run.state is not None
    assert run.outputs is not None
    request, adapter, traj, plan = boundary.request, run.replayed.adapter, run.replayed.traj, boundary.plan
    tmp, limits, dirs, box = boundary.out.tmp, request.limits, run.dirs, run.box
    rerun_s, t0 = time.monotonic() - run.rerun_started, time.monotonic()
    full = run.full
    if full is not None and plan is not full:  # degradations the reruns added (confinement waived) so far
        runtime = full.degradations[run.runtime_degradations :]
        plan.degradations.extend(d for d in runtime if (d.step or 0) <= plan.after_step)
    mine = {p.call.id for p in plan.calls}
    fresh = {cid: obs for cid, obs in observations.items() if cid in mine}
    steps.write_reruns(tmp / RERUNS, plan, fresh)
    skips = steps.Skips(list(run.skips.listed), run.skips.count)
    continuing = request.continuation is not None
    # the home as the rerunner's close leaves it, then the side files a rebuild starts from (a continued
    # boundary exports its state after the continuation: its home goes straight to native/); the host
    # reads these files whole, so their holes count
    outputs, k, home_rel = run.outputs, plan.after_step, "native/home" if continuing else "state/home"
    home_copy = tmp / home_rel
    home = outputs.copy(
        k, dirs.home, tmp, home_rel, links="skip", limits=limits, what="the agent home", holes="count"
    )
    if isinstance(rerunner, StepwiseRerunner):
        rerunner.clean_home_copy(home_copy)
    skips.add(home, "home")
    if not continuing:
        copy_untrusted(tmp / "state" / "home", tmp / "native" / "home", links="skip", limits=limits)
    made = steps.rebuild(adapter, traj, plan, fresh, tmp)
    if request.continuation is not None:  # asked of the reruns' process while it lives
        made = continue_run.facts_at_boundary(adapter, rerunner, traj, made, request.continuation)
    if not continuing:
        copied = outputs.copy(
            k, dirs.workspace, tmp, "state/workspace", links="keep", limits=limits, what="the workspace"
        )
        skips.add(copied, "state/workspace")
        skips.add(home, "state/home")
    rebuild_s = time.monotonic() - t0
    used = [] if continuing else used_up(run.state.used_up, box)  # a continued one's, once it has continued
    done = Done(
        made,
        divergences[: len(plan.calls)],
        rebuild_s,
        run.sandbox_s,
        rerun_s,
        box.image_id,
        box.name,
        sandbox=sandbox_record(limits, box, run.state.limited, used, skips.listed, skips.count),
    )
    if run.in_place:
        return fanout.Forked(request, boundary.out, plan, done, None, run.state, skips)
    if continuing:
        assert run.keep is not None
        image, state = fanout.take(
            run.keep,
            box,
            run.replay_id,
            plan.after_step,
            dirs,
            tmp / "native" / "home",
            boundary.out.final.parent,
            limits,
        )
        return fanout.Forked(request, boundary.out, plan, done, image, state, skips)
    if run.on_passed is not None:
        run.on_passed(plan.after_step, box, RunDirs(root=tmp / "state"), tmp / "native")
    result = assemble(request, plan, run.replayed, done, tmp)
    outputs.settle(k, tmp)
    commit(boundary.out, result)
    outputs.committed(boundary.out.final)
    return result


def _continue_in_place(run: _Replay, key: str, on_event: OnEvent) -> None:
    """The one boundary's continuation in the replay's own container, the rerunner closed: the rebuilt
    session laid over the live agent home, the agent continued, the state exported after it."""
    assert run.dirs is not None and run.box is not None
    for k, fork in list(run.forks.items()):
        del run.forks[k]
        limits = fork.request.limits
        try:
            copy_untrusted(
                fork.out.tmp / "native" / "home", run.dirs.home, links="skip", limits=limits, merge=True
            )
            result = fanout.continue_from(fork, run.box, run.replayed, key, on_event)
            assert run.outputs is not None
            run.outputs.settle(k, fork.out.tmp)
            commit(fork.out, result)
        except (ReplayError, OSError) as exc:
            run.outcomes[k] = failed(exc, fork.out, fork.request)
        except BaseException:
            fork.out.discard()
            raise
        else:
            run.outcomes[k] = result


def _continue_forks(run: _Replay, backend: Backend, key: str, on_event: OnEvent) -> None:
    """Each passed boundary's continuation, from its snapshot, in boundary order, the next one's
    container starting while one continues; a refused or failed one is that boundary's outcome (its
    directory not written), the others go on."""
    order = sorted(run.forks)
    with ThreadPoolExecutor(1, thread_name_prefix="boundary-ahead") as starter, RunContext() as ahead:

        def start(k: int) -> Future[Sandbox]:
            made = starter.submit(
                fanout.start, run.forks[k], run.replayed.adapter, run.replayed.traj, backend
            )
            ahead.own(made, lambda: _stop_started(made), f"the container of boundary {k}")
            return made

        boxes = {order[0]: start(order[0])} if order else {}
        for i, k in enumerate(order):
            if i + 1 < len(order):
                boxes[order[i + 1]] = start(order[i + 1])
            fork = run.forks[k]
            try:
                assert run.outputs is not None
                if run.outputs.budget.refused is not None:  # the outputs are full: no more forks
                    raise run.outputs.budget.refused
                box = boxes.pop(k).result()
                result = fanout.continue_from(fork, box, run.replayed, key, on_event)
                run.outputs.settle(k, fork.out.tmp)
                commit(fork.out, result)
            except (ReplayError, OSError) as exc:
                run.outcomes[k] = failed(exc, fork.out, fork.request)
            else:
                run.outcomes[k] = result
            finally:
                if run.keep is not None:
                    run.keep.release(fork.state)  # its continuation is over: its state goes now
            del run.forks[k]


def _stop_started(made: Future[Sandbox]) -> None:
    """The container started ahead, stopped (again: a container is removed once, the rest is a no-op)."""
    try:
        box = made.result()
    except Exception:  # it did not start: nothing to stop (its boundary says why)
        return
    box.stop()
