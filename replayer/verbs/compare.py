"""`replayer compare` at one boundary: replay the prefix once, snapshot the container at the boundary, fork
every variant R times from the snapshot (each run its own container and bridge, up to `parallel` at once),
then one compare.json and one report.html. The orchestration, for one boundary or several, is
replayer/verbs/compare_boundaries.py; this module holds a boundary's parts: the checks before anything
starts, the snapshot, the runs' pool and the result.

OUT/replay/            the ordinary result directory of the one replay (no continuation)
OUT/snapshot/          workspace/ and home/ at the boundary (the image holds the rest of the file system)
OUT/runs/NAME/K/       one run: run.json, agent/, bridge/, continued/, state/
OUT/compare.json, OUT/report.html
OUT/token-ledger.json  the token budget every run shares, when the user set one

Everything the compare writes under OUT draws on one total output budget (`--limits output=`, `Spans`):
the replay and the snapshot before each file is written, each run its workspace before it is written and
the rest of its directory before it says ok. A run refused so is not kept (its record says why) and the
runs not started yet are not run: compare.json's `stopped` says so.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from replayer import installer
from replayer.adapters.base import Adapter
from replayer.floor.compare_results import (
    CheckResult,
    CompareResult,
    CompareTimings,
    RunRecord,
    VariantSummary,
)
from replayer.floor.errors import NO_UPSTREAM_HELP, BadInput, NoUpstream, ReplayError
from replayer.floor.events import OnEvent, ignore
from replayer.floor.io import OutputDir, write_bytes_atomic
from replayer.floor.output_budget import Earlier, OutputBudget, SharedTotal, tree_bytes
from replayer.floor.pins import running_version
from replayer.floor.requests import CompareRequest, ContinueRequest, ReplayRequest, Variant
from replayer.floor.results import ReplayResult, TimelineEntry
from replayer.floor.rundirs import RunDirs
from replayer.floor.safecopy import copy_untrusted
from replayer.floor.trajectory import Trajectory
from replayer.pipeline import agent_version as versions
from replayer.pipeline import boundary, fanout, rootfs, steps
from replayer.pipeline.boundary_outputs import BATCH_TOTAL
from replayer.pipeline.context import RunContext
from replayer.pipeline.engine import load
from replayer.pipeline.fork import COMPARE_LABEL, ForkJob, run_check
from replayer.pipeline.forkpool import ForkPool, OnRun, OutputLimit
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
OUTPUT_TOTAL = ".output-total"
"""The compare's total output budget as its runs draw on it (`SharedTotal`); gone once the compare ends."""


@dataclass
class Spans:
    """The budgets that span a compare, every run of every variant (at every boundary of `compare -n a,b`),
    kept in `folder`: its total output budget and, when the user set one, its token budget."""

    folder: Path
    limit: OutputLimit

    @classmethod
    def make(cls, folder: Path, total: int) -> Spans:
        """Both anew in `folder` (a ledger an earlier compare left there is not this one's)."""
        (folder / TOKEN_LEDGER).unlink(missing_ok=True)
        shared = SharedTotal.create(folder / OUTPUT_TOTAL, total, "the compare's", "--limits output=")
        return cls(folder, OutputLimit(shared))

    @property
    def ledger(self) -> Path:
        return self.folder / TOKEN_LEDGER

    def budget(self, total: int) -> OutputBudget:
        """What one writer draws on the total through (close it after use)."""
        return OutputBudget(total, self.limit.total, after="runs")

    @contextlib.contextmanager
    def drawing(self) -> Iterator[None]:
        """The replay run in the block draws on the total."""
        token = BATCH_TOTAL.set(self.limit.total)
        try:
            yield
        finally:
            BATCH_TOTAL.reset(token)

    def charge(self, *written: Path) -> None:
        """The records written after the runs (they say what happened: always written, counted)."""
        self.limit.total.draw(sum(p.stat().st_size for p in written), force=True)

    def remove(self) -> None:
        self.limit.total.path.unlink(missing_ok=True)


def _shared_budget(defaults: ContinueRequest, variant: Variant, ledger: Path) -> ContinueRequest:
    """A variant's continuation; a `max_tokens` the user set for the compare spans every run of every
    variant that sets none of its own (the `ledger` file)."""
    cont = variant_continuation(defaults, variant)
    if "max_tokens" not in defaults.model_fields_set or variant.spec.max_tokens is not None:
        return cont
    return cont.model_copy(update={"token_ledger": ledger})


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
            installer.ensure(adapter.name, version, on_event=on_event)
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
        spans: Spans,
        check_here: bool = True,
    ):
        self.pool = pool
        self.spans = spans
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
        budget = self.spans.budget(limits.output_total())
        try:
            for src, rel, links, what in (
                (dirs.workspace, "workspace", "keep", "the workspace"),
                (dirs.home, "home", "skip", "the agent home"),
                # the rebuilt native session, as a continuation in place would see it
                (native / "home", "home", "skip", "the rebuilt agent home"),
            ):
                copy_untrusted(
                    src,
                    self.dest / rel,
                    links=links,  # type: ignore[arg-type]
                    limits=limits,
                    what=what,
                    merge=(self.dest / rel).is_dir(),
                    earlier=Earlier(None, budget, "the boundary snapshot"),
                )
        finally:
            budget.close()
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
            built = rootfs.build(box, image, folder)
        except (ReplayError, OSError, ValueError) as exc:
            why = escaped(os.fsencode(str(exc)))  # an OSError names the path, in whatever bytes it has
            return f"the boundary's file-system changes could not be read: {why}"
        if not self.spans.limit.total.draw(tree_bytes(folder)):  # the runs start cold instead
            for entry in folder.iterdir():
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            return "the boundary's file-system changes would pass the compare's total output budget"
        return built


def _jobs(
    request: CompareRequest,
    compare_id: str,
    tmp: Path,
    agent: str,
    version: str,
    image: str | None,
    spans: Spans,
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
                    continuation=_shared_budget(request.defaults, variant, spans.ledger),
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
                    output_total=spans.limit.total.path,
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
        at = f" at {cont.mismatch.path}" if cont.mismatch and cont.mismatch.path else ""
        if cont.gate == "refused":
            return f"bridge_refused: the gate refused the rebuilt prefix{at}"
        # the gate accepted the first request: a cassette refused a later one it does not hold
        return f"bridge_refused: the cassette holds no such request{at}"
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
        spans: Spans | None = None,
    ):
        """`spans`: the budgets this compare shares with others (the boundaries of `compare -n a,b`);
        None: its own, in its output."""
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
        self.own_spans = spans is None
        self.spans = spans or Spans.make(self.out.tmp, request.limits.output_total())
        jobs = _jobs(request, compare_id, self.out.tmp, adapter.name, version, image, self.spans)
        self.pool = ForkPool(jobs, request.parallel, self.spans.limit)
        self.snapshot = Snapshot(
            request, compare_id, self.out.tmp / "snapshot", traj.cwd, self.pool, self.spans, check_here
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
            stopped=self.spans.limit.stopped if any(r.error_kind == "output" for r in runs) else None,
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
        if self.own_spans:
            self.spans.remove()
        else:  # the records, once written, count against what the next boundary's runs may write
            records = filter(Path.is_file, (tmp / r.dir / "run.json" for r in runs))  # a run not run has none
            self.spans.charge(tmp / "compare.json", tmp / "report.html", *records)
        self.out.commit()
        self.kept = request.keep_snapshot
        return result


def _remove(engine: Engine, compare_id: str, kept: bool) -> None:
    engine.remove_containers(f"{COMPARE_LABEL}={compare_id}")
    if not kept:
        engine.remove_images(f"{COMPARE_LABEL}={compare_id}")
