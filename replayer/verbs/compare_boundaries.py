"""`replayer compare -n a,b,...`: the prefix replayed once (replayer/pipeline/multiboundary.py), each boundary
snapshotted as the replay passes it, every variant forked from every boundary. OUT/after-K/ holds what
`compare -n K` writes alone; OUT/summary.json the tally of every boundary.

Each boundary is a compare of its own (`Comparison`, verbs/compare.py): its output directory, its runs'
pool, its snapshot (the retried commit of run -n a,b --continue, replayer/pipeline/fanout.py). The first
boundary's runs start ahead of the replay, as a compare's do; a later boundary's start while the runs of
the one before go on. What differs from `compare -n K` alone: the replay goes on after a boundary, so the
check at the boundary runs in a container of its own, from the snapshot image over a copy of the boundary
state; and a later boundary's runs start from its snapshot image, not pre-started (`RunRecord.fork_path`).
A refused boundary does not stop the others.
"""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from replayer.adapters.base import Adapter
from replayer.floor.compare_results import BoundaryComparison, CompareBoundaries, CompareResult
from replayer.floor.errors import Interrupted, ReplayError
from replayer.floor.events import OnEvent, ignore
from replayer.floor.io import write_bytes_atomic
from replayer.floor.requests import CompareRequest
from replayer.floor.results import ReplayResult
from replayer.floor.rundirs import RunDirs
from replayer.floor.trajectory import Trajectory
from replayer.pipeline.context import RunContext
from replayer.pipeline.engine import execute_many
from replayer.pipeline.forkpool import OnRun
from replayer.pipeline.multiboundary import boundary_dir
from replayer.pipeline.steps import JSON_OPTS
from replayer.sandboxes import engines
from replayer.sandboxes.base import Backend, Sandbox
from replayer.verbs.compare import Comparison, _preflight, loaded, replay_request

Outcome = CompareResult | ReplayError
SUMMARY = "summary.json"


def compare_boundaries(
    request: CompareRequest,
    boundaries: list[int],
    on_run: OnRun | None = None,
    on_event: OnEvent = ignore,
    backend: Backend | None = None,
    parsed: tuple[Adapter, Trajectory] | None = None,
) -> dict[int, Outcome]:
    """`request` (its after_step and out are each boundary's own: OUT/after-K/) at every boundary of
    `boundaries` from one replay (`parsed`: the trajectory's earlier parse); each boundary's comparison,
    or why it has none. OUT/summary.json is written last."""
    started = time.monotonic()
    adapter, traj, version = loaded(request, parsed)
    outcomes: dict[int, Outcome] = {}
    requests: dict[int, CompareRequest] = {}
    for k in sorted(set(boundaries)):
        one = request.model_copy(update={"after_step": k, "out": boundary_dir(request.out, k)})
        try:
            _preflight(one, adapter, traj, version, on_event)
        except ReplayError as exc:
            outcomes[k] = exc
        else:
            requests[k] = one
    replay_s = 0.0
    try:
        with RunContext() as ctx:
            sides: dict[int, Comparison] = {}
            for k, one in requests.items():
                try:
                    sides[k] = Comparison(ctx, one, adapter, traj, version, check_here=False)
                except ReplayError as exc:
                    outcomes[k] = exc
            if sides:
                order = sorted(sides)
                sides[order[0]].pool.start_ahead()  # its runs start up while the prefix replays

                def passed(k: int, box: Sandbox, dirs: RunDirs, native: Path) -> None:
                    sides[k].snapshot(box, dirs, native)

                replayed = execute_many(
                    replay_request(request, request.out, order[-1]),
                    {k: side.out.tmp / "replay" for k, side in sides.items()},
                    adapter,
                    traj,
                    on_event=on_event,
                    backend=backend,
                    on_passed=passed,
                )
                replay_s = time.monotonic() - started
                for i, k in enumerate(order):
                    outcomes[k] = _finish(
                        sides, order[i:], replayed, replay_s, started, on_run, on_event, backend
                    )
    except KeyboardInterrupt:
        raise Interrupted("SIGINT") from None
    _summarize(request, outcomes, replay_s, started)
    return dict(sorted(outcomes.items()))


def _finish(
    sides: dict[int, Comparison],
    order: list[int],
    replayed: dict[int, ReplayResult | ReplayError],
    replay_s: float,
    started: float,
    on_run: OnRun | None,
    on_event: OnEvent,
    backend: Backend | None,
) -> Outcome:
    """The comparison of boundary `order[0]` (the next one's runs starting meanwhile), or why it has none
    (its runs, state and output gone)."""
    side = sides[order[0]]
    done = replayed.get(order[0])
    if not isinstance(done, ReplayResult):
        side.discard()
        return done if done is not None else ReplayError("the replay did not reach this boundary")
    later = [k for k in order[1:] if isinstance(replayed.get(k), ReplayResult)]
    if later:
        sides[later[0]].pool.start_ahead()  # from its snapshot, while this boundary's runs go on
    try:
        side.snapshot.check_apart(backend or engines.chosen(), side.adapter, side.traj)
        return side.finish(done, replay_s, started, on_run, on_event)
    except ReplayError as exc:
        side.discard()
        return exc


def _summarize(
    request: CompareRequest, outcomes: dict[int, Outcome], replay_s: float, started: float
) -> CompareBoundaries:
    rows = []
    for k, outcome in sorted(outcomes.items()):
        rel = boundary_dir(Path(), k).as_posix()
        if isinstance(outcome, ReplayError):
            rows.append(
                BoundaryComparison(after_step=k, dir=rel, error_kind=outcome.kind, error=str(outcome))
            )
        else:
            rows.append(
                BoundaryComparison(
                    after_step=k,
                    dir=rel,
                    divergences=outcome.divergences,
                    boundary_check=outcome.boundary_check,
                    variants=outcome.variants,
                )
            )
    summary = CompareBoundaries(
        request=request, boundaries=rows, replay_s=replay_s, total_s=time.monotonic() - started
    )
    request.out.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(request.out / SUMMARY, orjson.dumps(summary.model_dump(mode="json"), option=JSON_OPTS))
    return summary
