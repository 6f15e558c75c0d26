"""`replayer compare`: replay the prefix once, snapshot the container at the boundary, fork every
variant R times from the snapshot (each run its own container and bridge, up to `parallel` at once),
then one compare.json and one report.html.

OUT/replay/            the ordinary result directory of the one replay (no continuation)
OUT/snapshot/          workspace/ and home/ at the boundary (the image holds the rest of the file system)
OUT/runs/NAME/K/       one run: run.json, agent/, bridge/, continued/, state/
OUT/compare.json, OUT/report.html
"""

from __future__ import annotations

import logging
import os
import shutil
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.base import Adapter
from replayer.floor import bundles
from replayer.floor.compare_results import (
    CheckResult,
    CompareResult,
    CompareTimings,
    RunRecord,
    VariantSummary,
)
from replayer.floor.errors import NO_UPSTREAM_HELP, BadInput, Interrupted, NoUpstream, ReplayError
from replayer.floor.events import OnEvent, ignore
from replayer.floor.io import OutputDir, write_bytes_atomic
from replayer.floor.pins import running_version
from replayer.floor.requests import CompareRequest, ContinueRequest, ReplayRequest, Variant
from replayer.floor.results import ReplayResult, TimelineEntry
from replayer.floor.rundirs import RunDirs
from replayer.floor.safecopy import copy_untrusted
from replayer.floor.trajectory import Trajectory
from replayer.pipeline import agent_version as versions
from replayer.pipeline import boundary, fanout, rootfs, steps
from replayer.pipeline.context import RunContext
from replayer.pipeline.engine import execute, load
from replayer.pipeline.fork import COMPARE_LABEL, ForkJob, run_check
from replayer.pipeline.forkpool import ForkPool, OnRun
from replayer.pipeline.result import pins_for
from replayer.pipeline.steps import JSON_OPTS
from replayer.sandboxes import engines
from replayer.sandboxes.base import Backend, Engine, Layered, Sandbox
from replayer.sandboxes.committable import escaped
from replayer.sandboxes.quota import StateDir
from replayer.verbs.report import render_html

logger = logging.getLogger(__name__)


def variant_continuation(defaults: ContinueRequest, variant: Variant) -> ContinueRequest:
    """The continuation of one variant's runs: its spec over the shared settings."""
    return defaults.merge(variant.spec).request()


TOKEN_LEDGER = "token-ledger.json"
"""The compare's token budget, when the user set one, shared by its variants' runs (bridges/budget.py)."""


def _shared_budget(defaults: ContinueRequest, variant: Variant, out: Path) -> ContinueRequest:
    """A variant's continuation; a `max_tokens` the user set for the compare spans every run of every
    variant that sets none of its own."""
    cont = variant_continuation(defaults, variant)
    if "max_tokens" not in defaults.model_fields_set or variant.spec.max_tokens is not None:
        return cont
    return cont.model_copy(update={"token_ledger": out / TOKEN_LEDGER})


def _preflight(
    request: CompareRequest,
    adapter: Adapter,
    traj: Trajectory,
    replay_version: str,
    on_event: OnEvent = ignore,
) -> None:
    """Every refusal a variant would meet, before any container starts (the engine's own checks, each
    asked of the version that continues: the variant's, else the replay's `replay_version`); a variant's
    version the cache lacks is installed (`on_event` hears it)."""
    steps.check_cwd(traj)
    if isinstance(request.workspace, Path):  # a repository is checked out by the replay
        steps.check_workspace(request.workspace)
    names = [v.name for v in request.variants]
    if not names:
        raise BadInput("compare needs at least one --variant")
    if len(set(names)) != len(names):
        raise BadInput(f"variant names must be unique: {', '.join(names)}")
    for variant in request.variants:
        cont = variant_continuation(request.defaults, variant)
        if cont.record_cassette is not None:
            raise BadInput("compare replays cassettes (--cassette); record one with `run --record-cassette`")
        if not cont.upstream and not cont.cassette:
            raise NoUpstream(
                f"variant {variant.name}: no upstream: {NO_UPSTREAM_HELP} "
                "(or upstream=URL|mock in the variant, or the upstream setting)"
            )
        version = versions.concrete(adapter.name, variant.spec.version) if variant.spec.version else None
        if version:
            bundles.ensure(adapter.name, version, on_event=on_event)
        with running_version(adapter.name, version or replay_version):
            steps.check_continuable(adapter, traj, cont, f"variant {variant.name}: ")
        if cont.cassette is None:
            steps.upstream_key(cont, adapter)
        else:
            steps.check_cassettes(cont, traj, request.after_step)
        patch = variant.spec.patch
        if patch is not None and not patch.is_file():
            raise BadInput(f"variant {variant.name}: patch {patch} is not a readable file")


class Snapshot:
    """The engine's boundary hook: commit the container, copy workspace and agent home (and seal a copy
    that forks clone, replayer/pipeline/boundary.py), run the check."""

    def __init__(
        self,
        request: CompareRequest,
        compare_id: str,
        dest: Path,
        cwd: str,
        pool: ForkPool,
        check_here: bool = True,
    ):
        self.pool = pool
        self.check_here = check_here
        """Run the check in the replay's container (False: the replay goes on after the boundary, and a
        check may write: `check_apart` runs it in a container of its own)."""
        self.cwd = cwd
        self.compare_id = compare_id
        self.dest = dest
        self.check = request.check
        self.check_timeout_s = request.check_timeout_s
        self.limits = request.limits
        self.image: str | None = None
        self.sealed: StateDir | None = None
        self.boundary_check: CheckResult | None = None
        self.seconds = 0.0

    def __call__(self, box: Sandbox, dirs: RunDirs, native: Path) -> None:
        started = time.monotonic()
        self.image = fanout.snapshot(
            box, f"sandbox-replayer/snapshot:{self.compare_id}", {COMPARE_LABEL: self.compare_id}
        )
        changes = self._rootfs(box, self.image)
        limits = self.limits
        copy_untrusted(
            dirs.workspace, self.dest / "workspace", links="keep", limits=limits, what="the workspace"
        )
        copy_untrusted(dirs.home, self.dest / "home", links="skip", limits=limits, what="the agent home")
        # the rebuilt native session, as a continuation in place would see it
        copy_untrusted(native / "home", self.dest / "home", links="skip", limits=limits, merge=True)
        self.sealed = boundary.seal(self.dest, limits)
        self.seconds = time.monotonic() - started
        # the first runs make their state and start their container while the replay ends
        self.pool.announce(self.image, self.sealed.path if self.sealed else None, changes)
        if self.check and self.check_here:
            self.boundary_check = run_check(box, self.check, self.cwd, self.check_timeout_s)

    def check_apart(self, backend: Backend, adapter: Adapter, traj: Trajectory) -> None:
        """The check at the boundary, in a container of its own from the snapshot image over a copy of the
        boundary state (both gone after it)."""
        if not self.check or self.check_here or self.image is None:
            return
        with RunContext() as ctx:
            state = boundary.fork_state(
                self.sealed.path if self.sealed else None, self.dest, self.limits, self.dest.parent
            )
            ctx.own(state, state.remove, "the check's state")
            box = steps.start_sandbox(
                backend,
                adapter,
                traj,
                RunDirs(root=state.path),
                self.image,
                run_id=f"{self.compare_id}-check",
                limits=self.limits,
                labels={COMPARE_LABEL: self.compare_id},
                bridge=False,
            )
            ctx.own(box, box.stop, "the check's container")
            self.boundary_check = run_check(box, self.check, self.cwd, self.check_timeout_s)

    def remove(self) -> None:
        """Remove the sealed boundary state (the forks' clones are their own)."""
        if self.sealed is not None:
            self.sealed.remove()

    def _rootfs(self, box: Sandbox, image: str) -> rootfs.RootfsDiff | str:
        """What pre-started runs apply to be the snapshot image's containers (replayer/pipeline/rootfs.py)."""
        if not isinstance(box, Layered) or not box.prestarts:
            return "the engine starts no fork before its boundary (Docker only)"
        folder = self.dest.parent / "rootfs"
        try:
            return rootfs.build(box, image, folder)
        except (ReplayError, OSError, ValueError) as exc:
            why = escaped(os.fsencode(str(exc)))  # an OSError names the path, in whatever bytes it has
            return f"the boundary's file-system changes could not be read: {why}"


def _jobs(
    request: CompareRequest, compare_id: str, tmp: Path, agent: str, version: str, image: str | None
) -> list[ForkJob]:
    jobs = []
    for repeat in range(1, request.repeat + 1):  # round-robin: every variant gets its first run early
        for variant in request.variants:
            rel = f"runs/{variant.name}/{repeat}"
            jobs.append(
                ForkJob(
                    compare_id=compare_id,
                    trajectory=request.trajectory.absolute(),
                    task=request.task,
                    cwd=request.cwd,
                    session=request.session,
                    replay_dir=tmp / "replay",
                    boundary_state=tmp / "snapshot",
                    run_dir=tmp / rel,
                    dir=rel,
                    variant=variant,
                    repeat=repeat,
                    continuation=_shared_budget(request.defaults, variant, tmp),
                    check=request.check,
                    check_timeout_s=request.check_timeout_s,
                    limits=request.limits,
                    agent=agent,
                    agent_version=versions.concrete(agent, variant.spec.version)
                    if variant.spec.version
                    else version,
                    after_step=request.after_step,
                    prestart_image=image,
                    rootfs_dir=tmp / "rootfs",
                )
            )
    return jobs


def _actions(timeline: list[TimelineEntry]) -> list[tuple[int, tuple[Any, ...]]]:
    """(timeline index, what the agent did) for each assistant message: tool results carry volatile
    details (wall times, ids), so runs are told apart by their actions."""
    return [
        (i, (e.text, tuple((c.name, c.arguments) for c in e.tool_calls)))
        for i, e in enumerate(timeline)
        if e.role == "assistant"
    ]


def first_difference(reference: list[TimelineEntry], other: list[TimelineEntry]) -> int | None:
    """The timeline index in `other` of its first action that differs from `reference`'s (None: same)."""
    mine, theirs = _actions(other), _actions(reference)
    for (index, action), (_, expected) in zip(mine, theirs, strict=False):
        if action != expected:
            return index
    if len(mine) == len(theirs):
        return None
    return mine[len(theirs)][0] if len(mine) > len(theirs) else len(other)


VARIANT_FAILURES = {"patch_failed"}
"""Error kinds of a failed run that are the variant's own doing: it counts as a run that did not pass."""


def infrastructure_failure(run: RunRecord) -> str | None:
    """Why a run tells nothing about its variant: it could not be carried out (container, bridge, install,
    worker), or the gate refused the rebuilt prefix. None: the agent and the check decided the run."""
    if run.status == "failed" and run.error_kind not in VARIANT_FAILURES:
        return f"{run.error_kind}: {run.error}"
    cont = run.continuation
    if cont is not None and cont.agent_status == "bridge_refused":
        return "bridge_refused: the gate refused the rebuilt prefix" + (
            f" at {cont.mismatch.path}" if cont.mismatch and cont.mismatch.path else ""
        )
    return None


def with_differences(runs: list[RunRecord]) -> tuple[list[RunRecord], int, str | None]:
    """The runs with their infrastructure failure and first difference marked, how many actions every ok
    run shares, and the reference run (NAME/K)."""
    runs = [r.model_copy(update={"infrastructure_failure": infrastructure_failure(r)}) for r in runs]
    ok = [r for r in runs if r.status == "ok"]
    if not ok:
        return runs, 0, None
    reference = ok[0].timeline
    marked = [
        r.model_copy(update={"first_difference": first_difference(reference, r.timeline)})
        if r.status == "ok"
        else r
        for r in runs
    ]
    common = min(len(_actions(r.timeline)) for r in ok)
    for r in ok:
        differs = first_difference(reference, r.timeline)
        if differs is not None:
            common = min(common, sum(1 for i, _ in _actions(r.timeline) if i < differs))
    return marked, common, f"{ok[0].variant}/{ok[0].repeat}"


def summaries(request: CompareRequest, runs: list[RunRecord]) -> list[VariantSummary]:
    out = []
    for variant in request.variants:
        mine = [r for r in runs if r.variant == variant.name]
        conts = [r.continuation for r in mine if r.continuation is not None]
        inputs = [c.counters.input_tokens for c in conts if c.counters.input_tokens is not None]
        outputs = [c.counters.output_tokens for c in conts if c.counters.output_tokens is not None]
        passed = sum(1 for r in mine if r.check is not None and r.check.passed)
        infra = sum(1 for r in mine if r.infrastructure_failure is not None)
        counted = len(mine) - infra
        out.append(
            VariantSummary(
                name=variant.name,
                spec=variant.spec,
                runs=len(mine),
                failed_runs=sum(1 for r in mine if r.status == "failed"),
                infrastructure_failures=infra,
                agent_status=dict(Counter(c.agent_status for c in conts)),
                steps_used=[c.steps_used for c in conts],
                check_passed=passed,
                check_pass_rate=passed / counted if request.check and counted else None,
                input_tokens=sum(inputs) if inputs else None,
                output_tokens=sum(outputs) if outputs else None,
                mean_wall_s=sum(r.wall_s for r in mine) / len(mine) if mine else 0.0,
            )
        )
    return out


def compare(
    request: CompareRequest, on_run: OnRun | None = None, on_event: OnEvent = ignore
) -> CompareResult:
    started = time.monotonic()
    adapter, traj, version = loaded(request)
    _preflight(request, adapter, traj, version, on_event)
    try:
        with RunContext() as ctx:
            side = Comparison(ctx, request, adapter, traj, version)
            side.pool.start_ahead()  # the runs' processes start up while the prefix replays
            replay = execute(
                replay_request(request, side.out.tmp / "replay"),
                adapter,
                traj,
                on_boundary=side.snapshot,
                on_event=on_event,
            )
            return side.finish(replay, time.monotonic() - started, started, on_run, on_event)
    except KeyboardInterrupt:
        raise Interrupted("SIGINT") from None


def loaded(
    request: CompareRequest, parsed: tuple[Adapter, Trajectory] | None = None
) -> tuple[Adapter, Trajectory, str]:
    """The trajectory (`parsed` earlier, else now), its adapter and the version the replay runs (as execute
    resolves it: the forks start before it)."""
    adapter, traj = parsed or load(request.trajectory, request.task, request.cwd, request.session)
    version = versions.of_trajectory(adapter, traj, request.agent_version)
    return adapter, traj, version.version


def replay_request(request: CompareRequest, out: Path, after_step: int | None = None) -> ReplayRequest:
    """The run (no continuation) that replays the compare's prefix into `out`."""
    return ReplayRequest(
        mode="run",
        trajectory=request.trajectory,
        after_step=request.after_step if after_step is None else after_step,
        out=out,
        workspace=request.workspace,
        image=request.image,
        allow_degraded=request.allow_degraded,
        budgets=request.budgets,
        task=request.task,
        cwd=request.cwd,
        session=request.session,
        limits=request.limits,
        agent_version=request.agent_version,
        require_verified=request.require_verified,
    )


class Comparison:
    """One boundary's compare, owned by `ctx`: its output directory, its runs' pool and the snapshot that
    tells them the boundary is ready; `finish` runs them and writes compare.json and report.html."""

    def __init__(
        self,
        ctx: RunContext,
        request: CompareRequest,
        adapter: Adapter,
        traj: Trajectory,
        version: str,
        check_here: bool = True,
    ):
        self.ctx = ctx
        self.request = request
        self.adapter = adapter
        self.traj = traj
        self.kept = False
        engine = engines.chosen()
        engine.check()
        compare_id = f"cmp-{uuid.uuid4().hex[:10]}"
        # the compare's containers and (unless kept) its snapshot image go last, whatever happened
        ctx.own(compare_id, lambda: _remove(engine, compare_id, self.kept), "containers and images")
        local = request.workspace if isinstance(request.workspace, Path) else None  # a clone is the cache's
        self.out = OutputDir(request.out, force=request.force, inputs=[request.trajectory, local])
        ctx.own(self.out, self.out.discard, "the partial output")  # nothing left to discard once committed
        assert traj.cwd
        image = steps.sandbox_image(request.image, traj)
        (self.out.tmp / "rootfs").mkdir()
        jobs = _jobs(request, compare_id, self.out.tmp, adapter.name, version, image)
        self.pool = ForkPool(jobs, request.parallel)
        self.snapshot = Snapshot(
            request, compare_id, self.out.tmp / "snapshot", traj.cwd, self.pool, check_here
        )
        ctx.own(self.snapshot, self.snapshot.remove, "the sealed boundary state")
        ctx.own(self.pool, self.pool.stop, "the runs' processes")  # each removes its container and state

    def discard(self) -> None:
        """No comparison here: the runs stopped, the boundary state and the partial output removed (the
        containers and images go with the context)."""
        for made in (self.pool, self.snapshot, self.out):
            self.ctx.release(made)

    def finish(
        self,
        replay: ReplayResult,
        replay_s: float,
        started: float,
        on_run: OnRun | None,
        on_event: OnEvent,
    ) -> CompareResult:
        """Every run forked by the pool from the boundary `replay` passed (`replay_s` after `started`, when
        the compare began: its timings count from there), the result written and committed."""
        request, tmp = self.request, self.out.tmp
        logger.debug("boundary snapshot %s (%.2f s)", self.snapshot.image, self.snapshot.seconds)
        assert self.snapshot.image is not None
        t0 = time.monotonic()
        runs = self.pool.run(on_run, on_event)
        shutil.rmtree(tmp / "rootfs")  # the runs' copy of the boundary's own changes: the image has them
        runs, common, reference = with_differences(runs)
        result = CompareResult(
            request=request,
            pins=pins_for(self.adapter),
            agent=self.traj.agent,
            agent_version=self.traj.agent_version,
            after_step=replay.after_step,
            version=replay.version,
            divergences=dict(Counter(d.status for d in replay.divergences)),
            degradations=replay.degradations,
            snapshot_image=self.snapshot.image,
            snapshot_kept=request.keep_snapshot,
            boundary_check=self.snapshot.boundary_check,
            reference_run=reference,
            common_actions=common,
            variants=summaries(request, runs),
            runs=runs,
            timings=CompareTimings(
                replay_s=replay_s,
                snapshot_s=self.snapshot.seconds,
                runs_s=time.monotonic() - t0,
                total_s=time.monotonic() - started,
            ),
        )
        write_bytes_atomic(
            tmp / "compare.json", orjson.dumps(result.model_dump(mode="json"), option=JSON_OPTS)
        )
        write_bytes_atomic(tmp / "report.html", render_html(result).encode())
        self.out.commit()
        self.kept = request.keep_snapshot
        return result


def _remove(engine: Engine, compare_id: str, kept: bool) -> None:
    engine.remove_containers(f"{COMPARE_LABEL}={compare_id}")
    if not kept:
        engine.remove_images(f"{COMPARE_LABEL}={compare_id}")
