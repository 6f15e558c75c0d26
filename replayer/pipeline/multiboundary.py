"""One replay, many boundaries: `run -n 3,7,12` (and a batch's boundaries of one trajectory) rerun the
steps once, in one container, and write each boundary's own complete result directory as the replay
passes it, equal to what `run -n k` writes alone.

The reruns of steps 1..k do not depend on the cut. At each asked boundary (every step up to it rerun,
none after it started: `steps.rerun_prefix`'s `on_step`) the boundary takes the replay's state: its
fresh observations and divergences, the workspace and the agent home (the home as the rerunner's close
would leave it, `StepwiseRerunner.clean_home_copy`), and rebuilds its prefix from them into its own
atomic output directory. A boundary that is refused (its plan, its output) is its own outcome and does
not stop the others; a replay that fails at step j leaves the boundaries before j done.

With a continuation, each boundary also takes a snapshot as the replay passes it, and its continuation
forks from it once the replay is done (replayer/pipeline/fanout.py): one replay, K continuations.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from replayer.adapters.base import Adapter, Rerunner, StepwiseRerunner
from replayer.floor.errors import BadInput, ReplayError
from replayer.floor.events import OnEvent, ignore
from replayer.floor.io import OutputDir, write_bytes_atomic
from replayer.floor.models import (
    Divergence,
    Observation,
    ReplayRequest,
    ReplayResult,
    Trajectory,
)
from replayer.floor.output_budget import OverBudget
from replayer.floor.pins import running_version
from replayer.floor.rundirs import RunDirs
from replayer.floor.safecopy import copy_untrusted
from replayer.pipeline import fanout, steps
from replayer.pipeline.boundary_outputs import BoundaryOutputs
from replayer.pipeline.context import RunContext
from replayer.pipeline.engine import Outcome, begin, os_error
from replayer.pipeline.plan import Plan
from replayer.pipeline.result import Done, Replayed, assemble, sandbox_record, used_up
from replayer.pipeline.steps import JSON_OPTS, RERUNS
from replayer.sandboxes import engines
from replayer.sandboxes.base import Ahead, Backend, Sandbox
from replayer.sandboxes.quota import StateDir

logger = logging.getLogger(__name__)
OnPassed = Callable[[int, Sandbox, RunDirs, Path], None]
"""Called, without a continuation, as the replay passes boundary K, before K's result is committed: the
replay's sandbox, K's state as `run -n K` exports it (its `state/`: the workspace, the home as the
rerunner's close leaves it) and K's rebuilt native directory (`compare -n a,b` snapshots K there). The
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
    outcomes: dict[int, Outcome] = field(default_factory=dict)
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
    outputs: BoundaryOutputs | None = None
    """The run's total output budget, and the boundary committed last (boundary_outputs.py)."""


def execute_many(
    request: ReplayRequest,
    outs: dict[int, Path],
    adapter: Adapter | None = None,
    trajectory: Trajectory | None = None,
    on_event: OnEvent = ignore,
    backend: Backend | None = None,
    on_passed: OnPassed | None = None,
) -> dict[int, Outcome]:
    """Run mode at every boundary of `outs` (boundary -> its output directory) in one replay; `request`
    holds the options (its after_step and out are each boundary's own). With a continuation, each
    boundary's continuation forks from its snapshot once the replay is done (fanout.py). Without one,
    `on_passed` hears each boundary as the replay passes it."""
    if request.mode != "run":
        raise BadInput("one replay serves many boundaries in run mode")
    cont = request.continuation
    assert cont is None or on_passed is None, "a continued boundary is snapshotted by fanout.py"
    if cont is not None and cont.record_cassette is not None and len(outs) > 1:
        raise BadInput("--record-cassette records one continuation: give one boundary")
    if not outs:
        return {}
    outcomes: dict[int, Outcome] = {}
    begun = begin(request, outs, adapter, trajectory, on_event, outcomes)
    replayed, workspace, key = begun.replayed, begun.workspace, begun.key
    adapter, version = replayed.adapter, replayed.version
    if workspace is None:
        return outcomes
    assert replayed.image is not None
    pending: dict[int, _Boundary] = {}
    forks: dict[int, fanout.Forked] = {}
    outputs = BoundaryOutputs.of(request.limits, hard_links=on_passed is None)  # compare forks from state/
    try:
        for k, (one, plan) in begun.plans.items():
            tapes = [one.continuation.cassette, one.continuation.record_cassette] if one.continuation else []
            try:
                made = OutputDir(one.out, force=one.force, inputs=[one.trajectory, workspace, *tapes])
            except ReplayError as exc:
                outcomes[k] = exc
                continue
            pending[k] = _Boundary(one, plan, made)
        replay = _Replay(
            request, replayed, pending, outcomes, forks=forks, on_passed=on_passed, outputs=outputs
        )
        if pending:
            with running_version(adapter.name, version.version), RunContext() as keep:
                replay.keep, replay.replay_id = keep, f"mb-{uuid.uuid4().hex[:10]}"
                backend = backend or engines.chosen()
                _run(replay, workspace, replayed.image, backend, on_event)
                _continue_forks(replay, _fork_backend(backend), key, on_event)
    finally:
        for left in pending.values():  # a replay that stopped before them
            left.out.discard()
        for fork in forks.values():  # continuations not carried out
            fork.out.discard()
        outputs.close()
    return outcomes


def _fork_backend(backend: Backend) -> Backend:
    """What starts the forks' containers: they run snapshot images that no later job runs, so a spare shaped
    like one (sandboxes/ahead.py) would never be taken, and would hold the image the replay removes."""
    return engines.chosen() if isinstance(backend, Ahead) else backend


def _run(replay: _Replay, workspace: Path, image: str, backend: Backend, on_event: OnEvent) -> None:
    request, adapter, traj = replay.request, replay.replayed.adapter, replay.replayed.traj
    last = max(replay.pending)
    full = replay.full = replay.pending[last].plan
    replay.runtime_degradations = len(full.degradations)
    with RunContext() as ctx:
        opened = steps.open_replay(
            ctx,
            backend,
            adapter,
            traj,
            workspace,
            image,
            # where an unlimited state goes: beside the outputs (hidden), never inside one that commits
            # mid-replay
            scratch=replay.pending[last].out.final.parent,
            skips=replay.skips,
            run_id=uuid.uuid4().hex[:12],
            limits=request.limits,
            labels=request.labels,
            bridge=False,
            on_event=on_event,
        )
        replay.dirs, replay.state = opened.dirs, opened.state
        replay.box, replay.sandbox_s = opened.box, opened.sandbox_s
        if replay.keep is not None and request.continuation is not None:
            fanout.own_images(replay.keep, opened.box, replay.replay_id)
        replay.rerun_started = time.monotonic()
        try:
            steps.rerun_prefix(
                adapter,
                traj,
                opened.box,
                opened.dirs,
                full,
                request,
                on_event,
                on_step=lambda *a: _passed(replay, *a),
            )
        except ReplayError as exc:
            for k in list(replay.pending):  # the boundaries the replay did not reach
                replay.outcomes[k] = exc
                replay.pending.pop(k).out.discard()


def _passed(
    replay: _Replay,
    step: int,
    rerunner: Rerunner,
    observations: dict[str, Observation],
    divergences: list[Divergence],
) -> None:
    """Every boundary up to `step` takes the replay's state now."""
    for k in sorted(k for k in replay.pending if k <= step):
        boundary = replay.pending.pop(k)
        try:
            written = _write(replay, boundary, rerunner, observations, divergences)
            if isinstance(written, fanout.Forked):
                replay.forks[k] = written
            else:
                replay.outcomes[k] = written
        except (ReplayError, OSError) as exc:
            replay.outcomes[k] = _failed(exc, boundary.out, boundary.request)
            if isinstance(exc, OverBudget):
                raise  # the replay stops: the boundaries after this one are refused with it
        except BaseException:
            boundary.out.discard()
            raise


def _failed(exc: ReplayError | OSError, out: OutputDir, request: ReplayRequest) -> ReplayError:
    """The outcome of a boundary that met `exc`, its output discarded: the refusal, or what a full quota or
    an unwritable output means (`os_error`); any other OSError is raised again."""
    out.discard()
    if isinstance(exc, ReplayError):
        return exc
    known = os_error(exc, request)
    if known is None:
        raise exc
    return known


def _write(
    replay: _Replay,
    boundary: _Boundary,
    rerunner: Rerunner,
    observations: dict[str, Observation],
    divergences: list[Divergence],
) -> ReplayResult | fanout.Forked:
    """Boundary k's result directory, as `engine._run` writes it for `run -n k`; with a continuation, its
    prefix written and its snapshot taken, the continuation to fork from it."""
    assert replay.dirs is not None and replay.box is not None and replay.state is not None
    assert replay.outputs is not None
    request, adapter, traj, plan = (
        boundary.request,
        replay.replayed.adapter,
        replay.replayed.traj,
        boundary.plan,
    )
    tmp, limits, dirs, box = boundary.out.tmp, request.limits, replay.dirs, replay.box
    rerun_s, t0 = time.monotonic() - replay.rerun_started, time.monotonic()
    full = replay.full
    if full is not None and plan is not full:  # degradations the reruns added (confinement waived) so far
        runtime = full.degradations[replay.runtime_degradations :]
        plan.degradations.extend(d for d in runtime if (d.step or 0) <= plan.after_step)
    mine = {p.call.id for p in plan.calls}
    fresh = {cid: obs for cid, obs in observations.items() if cid in mine}
    steps.write_reruns(tmp / RERUNS, plan, fresh)
    skips = steps.Skips(list(replay.skips.listed), replay.skips.count)
    forking = request.continuation is not None
    # the home as the rerunner's close leaves it, then the side files a rebuild starts from (a continued
    # boundary exports its state after the continuation: its home goes straight to native/)
    outputs, k, home_rel = replay.outputs, plan.after_step, "native/home" if forking else "state/home"
    home_copy = tmp / home_rel
    home = outputs.copy(k, dirs.home, tmp, home_rel, links="skip", limits=limits, what="the agent home")
    if isinstance(rerunner, StepwiseRerunner):
        rerunner.clean_home_copy(home_copy)
    skips.add(home, "home")
    if not forking:
        copy_untrusted(tmp / "state" / "home", tmp / "native" / "home", links="skip", limits=limits)
    made = steps.rebuild(adapter, traj, plan, fresh, tmp)
    if not forking:
        copied = outputs.copy(
            k, dirs.workspace, tmp, "state/workspace", links="keep", limits=limits, what="the workspace"
        )
        skips.add(copied, "state/workspace")
        skips.add(home, "state/home")
    rebuild_s = time.monotonic() - t0
    used = [] if forking else used_up(replay.state.used_up, box)  # a fork's, once it has continued
    done = Done(
        made,
        divergences[: len(plan.calls)],
        rebuild_s,
        replay.sandbox_s,
        rerun_s,
        box.image_id,
        box.name,
        sandbox=sandbox_record(limits, box, replay.state.limited, used, skips.listed, skips.count),
    )
    if forking:
        assert replay.keep is not None
        scratch = boundary.out.final.parent
        image, state = fanout.take(
            replay.keep,
            box,
            replay.replay_id,
            plan.after_step,
            dirs,
            tmp / "native" / "home",
            scratch,
            limits,
        )
        return fanout.Forked(request, boundary.out, plan, done, image, state, skips)
    if replay.on_passed is not None:
        replay.on_passed(plan.after_step, box, RunDirs(root=tmp / "state"), tmp / "native")
    result = assemble(request, plan, replay.replayed, done, tmp)
    outputs.settle(k, tmp)
    _commit(boundary.out, result)
    outputs.committed(boundary.out.final)
    return result


def _commit(out: OutputDir, result: ReplayResult) -> None:
    write_bytes_atomic(
        out.tmp / "result.json", orjson.dumps(result.model_dump(mode="json"), option=JSON_OPTS)
    )
    out.commit()
    logger.debug("boundary %d written to %s", result.after_step, result.request.out)


def _continue_forks(replay: _Replay, backend: Backend, key: str, on_event: OnEvent) -> None:
    """Each passed boundary's continuation, from its snapshot, in boundary order, the next one's
    container starting while one continues; a refused or failed one is that boundary's outcome (its
    directory not written), the others go on."""
    order = sorted(replay.forks)
    with ThreadPoolExecutor(1, thread_name_prefix="boundary-ahead") as starter, RunContext() as ahead:

        def start(k: int) -> Future[Sandbox]:
            made = starter.submit(
                fanout.start, replay.forks[k], replay.replayed.adapter, replay.replayed.traj, backend
            )
            ahead.own(made, lambda: _stop_started(made), f"the container of boundary {k}")
            return made

        boxes = {order[0]: start(order[0])} if order else {}
        for i, k in enumerate(order):
            if i + 1 < len(order):
                boxes[order[i + 1]] = start(order[i + 1])
            fork = replay.forks[k]
            try:
                assert replay.outputs is not None
                if replay.outputs.budget.refused is not None:  # the outputs are full: no more forks
                    raise replay.outputs.budget.refused
                box = boxes.pop(k).result()
                result = fanout.continue_from(fork, box, replay.replayed, key, on_event)
                replay.outputs.settle(k, fork.out.tmp)
                _commit(fork.out, result)
            except (ReplayError, OSError) as exc:
                replay.outcomes[k] = _failed(exc, fork.out, fork.request)
            else:
                replay.outcomes[k] = result
            finally:
                if replay.keep is not None:
                    replay.keep.release(fork.state)  # its continuation is over: its state goes now
            del replay.forks[k]


def _stop_started(made: Future[Sandbox]) -> None:
    """The container started ahead, stopped (again: a container is removed once, the rest is a no-op)."""
    try:
        box = made.result()
    except Exception:  # it did not start: nothing to stop (its boundary says why)
        return
    box.stop()
