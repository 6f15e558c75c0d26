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
from replayer.floor.errors import NO_UPSTREAM_HELP, BadInput, Interrupted, NoUpstream, ReplayError
from replayer.floor.events import OnEvent, ignore
from replayer.floor.io import OutputDir, write_bytes_atomic
from replayer.floor.models import (
    CheckResult,
    CompareRequest,
    CompareResult,
    CompareTimings,
    ContinueRequest,
    ReplayRequest,
    RunRecord,
    TimelineEntry,
    Trajectory,
    Variant,
    VariantSummary,
)
from replayer.floor.pins import running_version
from replayer.floor.rundirs import RunDirs
from replayer.floor.safecopy import copy_untrusted
from replayer.pipeline import agent_version as versions
from replayer.pipeline import boundary, rootfs, steps
from replayer.pipeline.context import RunContext
from replayer.pipeline.engine import JSON_OPTS, execute, load, pins_for
from replayer.pipeline.fork import COMPARE_LABEL, ForkJob, run_check
from replayer.pipeline.forkpool import ForkPool, OnRun
from replayer.sandboxes.base import Sandbox
from replayer.sandboxes.committable import escaped
from replayer.sandboxes.docker import DockerSandbox
from replayer.sandboxes.quota import StateDir
from replayer.verbs.report import render_html

logger = logging.getLogger(__name__)


def variant_continuation(defaults: ContinueRequest, variant: Variant) -> ContinueRequest:
    """The continuation of one variant's runs: its spec over the shared settings."""
    return defaults.merge(variant.spec).request()


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
        if variant.spec.version:
            bundles.ensure(adapter.name, variant.spec.version, on_event=on_event)
        with running_version(adapter.name, variant.spec.version or replay_version):
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

    def __init__(self, request: CompareRequest, compare_id: str, dest: Path, cwd: str, pool: ForkPool):
        self.pool = pool
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
        self.image = box.snapshot(
            f"sandbox-replayer/snapshot:{self.compare_id}", labels={COMPARE_LABEL: self.compare_id}
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
        if self.check:
            self.boundary_check = run_check(box, self.check, self.cwd, self.check_timeout_s)

    def remove(self) -> None:
        """Remove the sealed boundary state (the forks' clones are their own)."""
        if self.sealed is not None:
            self.sealed.remove()

    def _rootfs(self, box: Sandbox, image: str) -> rootfs.RootfsDiff | str:
        """What pre-started runs apply to be the snapshot image's containers (replayer/pipeline/rootfs.py)."""
        if not isinstance(box, DockerSandbox):
            return "the boundary is not a Docker container"
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
                    continuation=variant_continuation(request.defaults, variant),
                    check=request.check,
                    check_timeout_s=request.check_timeout_s,
                    limits=request.limits,
                    agent=agent,
                    agent_version=variant.spec.version or version,
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
    from replayer.sandboxes.docker import connect

    started = time.monotonic()
    adapter, traj = load(request.trajectory, request.task, request.cwd, request.session)
    version = versions.resolve(  # the replay's, as execute resolves it: the forks start before it
        adapter, traj.agent_version, traj.agent_version_inferred, request.agent_version, traj.runs_as
    )
    _preflight(request, adapter, traj, version.version, on_event)
    client = connect()
    compare_id = f"cmp-{uuid.uuid4().hex[:10]}"
    local = request.workspace if isinstance(request.workspace, Path) else None  # a clone is the cache's
    kept = False
    try:
        with RunContext() as ctx:
            # the compare's containers and (unless kept) its snapshot image go last, whatever happened
            ctx.own(compare_id, lambda: _remove_docker(client, compare_id, kept), "containers and images")
            out = OutputDir(request.out, force=request.force, inputs=[request.trajectory, local])
            ctx.own(out, out.discard, "the partial output")  # nothing left to discard once committed
            assert traj.cwd
            image = steps.sandbox_image(request.image, traj)
            (out.tmp / "rootfs").mkdir()
            jobs = _jobs(request, compare_id, out.tmp, adapter.name, version.version, image)
            pool = ForkPool(jobs, request.parallel)
            snapshot = Snapshot(request, compare_id, out.tmp / "snapshot", traj.cwd, pool)
            ctx.own(snapshot, snapshot.remove, "the sealed boundary state")
            ctx.own(pool, pool.stop, "the runs' processes")  # each removes its container and state
            pool.start_ahead()  # the runs' processes start up while the prefix replays
            result = _replay_and_fork(
                request, adapter, traj, out.tmp, snapshot, pool, started, on_run, on_event
            )
            write_bytes_atomic(
                out.tmp / "compare.json", orjson.dumps(result.model_dump(mode="json"), option=JSON_OPTS)
            )
            write_bytes_atomic(out.tmp / "report.html", render_html(result).encode())
            out.commit()
            kept = request.keep_snapshot
    except KeyboardInterrupt:
        raise Interrupted("SIGINT") from None
    return result


def _remove_docker(client: Any, compare_id: str, kept: bool) -> None:
    from replayer.sandboxes.docker import remove_containers, remove_images

    remove_containers(client, f"{COMPARE_LABEL}={compare_id}")
    if not kept:
        remove_images(client, f"{COMPARE_LABEL}={compare_id}")


def _replay_and_fork(
    request: CompareRequest,
    adapter: Adapter,
    traj: Trajectory,
    tmp: Path,
    snapshot: Snapshot,
    pool: ForkPool,
    started: float,
    on_run: OnRun | None,
    on_event: OnEvent,
) -> CompareResult:
    """The prefix replayed once with `snapshot` at its boundary, then every run forked by `pool`
    (`started`: when the compare began, which its timings count from)."""
    replay = execute(
        ReplayRequest(
            mode="run",
            trajectory=request.trajectory,
            after_step=request.after_step,
            out=tmp / "replay",
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
        ),
        adapter,
        traj,
        on_boundary=snapshot,
        on_event=on_event,
    )
    replay_s = time.monotonic() - started
    logger.debug("boundary snapshot %s (%.2f s)", snapshot.image, snapshot.seconds)
    assert snapshot.image is not None
    t0 = time.monotonic()
    runs = pool.run(on_run, on_event)
    shutil.rmtree(tmp / "rootfs")  # the runs' copy of the boundary's own changes: the image has them
    runs, common, reference = with_differences(runs)
    return CompareResult(
        request=request,
        pins=pins_for(adapter),
        agent=traj.agent,
        agent_version=traj.agent_version,
        after_step=replay.after_step,
        version=replay.version,
        divergences=dict(Counter(d.status for d in replay.divergences)),
        degradations=replay.degradations,
        snapshot_image=snapshot.image,
        snapshot_kept=request.keep_snapshot,
        boundary_check=snapshot.boundary_check,
        reference_run=reference,
        common_actions=common,
        variants=summaries(request, runs),
        runs=runs,
        timings=CompareTimings(
            replay_s=replay_s,
            snapshot_s=snapshot.seconds,
            runs_s=time.monotonic() - t0,
            total_s=time.monotonic() - started,
        ),
    )
