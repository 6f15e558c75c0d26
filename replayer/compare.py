"""`replayer compare`: replay the prefix once, snapshot the container at the boundary, fork every
variant R times from the snapshot (each run its own container and bridge, up to `parallel` at once),
then one compare.json and one report.html.

OUT/replay/            the ordinary result directory of the one replay (no continuation)
OUT/snapshot/          workspace/ and home/ at the boundary (the image holds the rest of the file system)
OUT/runs/NAME/K/       one run: run.json, agent/, bridge/, continued/, state/
OUT/compare.json, OUT/report.html
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from replayer import bundles, continuation
from replayer.engine import JSON_OPTS, execute, load, pins_for
from replayer.errors import BadInput, Interrupted, PlanRefused, WorkspaceError
from replayer.events import OnEvent, RunEnded, Stage, ignore
from replayer.fork import COMPARE_LABEL, ForkJob, run_check
from replayer.io import OutputDir, write_bytes_atomic
from replayer.models import (
    CheckResult,
    CompareRequest,
    CompareResult,
    CompareTimings,
    ContinueRequest,
    ReplayRequest,
    RunRecord,
    TimelineEntry,
    Variant,
    VariantSummary,
)
from replayer.plan import NO_CWD
from replayer.report import render_html
from replayer.safecopy import copy_untrusted

_POLL_S = 0.2
logger = logging.getLogger(__name__)
_STOP_GRACE_S = 30.0
OnRun = Callable[[RunRecord], None]


def variant_continuation(defaults: ContinueRequest, variant: Variant) -> ContinueRequest:
    spec = variant.spec
    changes: dict[str, Any] = {
        "model": spec.model,
        "boundary_prompt": spec.prompt,
        "upstream": spec.upstream,
        "upstream_key_env": spec.upstream_key_env,
        "max_steps": spec.max_steps,
        "idle_timeout_s": spec.idle_timeout_s,
    }
    merged = defaults.model_dump()
    merged.update({k: v for k, v in changes.items() if v is not None})
    merged["agent_env"] = {**defaults.agent_env, **spec.agent_env}
    return ContinueRequest.model_validate(merged)


def _preflight(request: CompareRequest, adapter: Any, traj: Any) -> None:
    """Every refusal a variant would meet, before any container starts."""
    if not traj.cwd:
        raise PlanRefused(NO_CWD)
    if isinstance(request.workspace, Path) and not request.workspace.is_dir():
        raise WorkspaceError(f"workspace {request.workspace} does not exist or is not a directory")
    names = [v.name for v in request.variants]
    if not names:
        raise BadInput("compare needs at least one --variant")
    if len(set(names)) != len(names):
        raise BadInput(f"variant names must be unique: {', '.join(names)}")
    for variant in request.variants:
        cont = variant_continuation(request.defaults, variant)
        if not cont.upstream:
            raise BadInput(
                f"variant {variant.name}: no upstream (give --upstream, upstream=URL, or the upstream setting)"
            )
        model = cont.model or adapter.default_model(traj)
        refusal = adapter.continuation_refusal(traj, model)
        if refusal:
            raise PlanRefused(f"variant {variant.name}: cannot continue: {refusal}")
        continuation.upstream_key(cont, adapter)
        if variant.spec.version:
            bundles.ensure(adapter.name, variant.spec.version)
        patch = variant.spec.patch
        if patch is not None and not patch.is_file():
            raise BadInput(f"variant {variant.name}: patch {patch} is not a readable file")


class Snapshot:
    """The engine's boundary hook: commit the container, copy workspace and agent home, run the check."""

    def __init__(self, compare_id: str, dest: Path, cwd: str, check: str | None, check_timeout_s: float):
        self.cwd = cwd
        self.compare_id = compare_id
        self.dest = dest
        self.check = check
        self.check_timeout_s = check_timeout_s
        self.image: str | None = None
        self.boundary_check: CheckResult | None = None
        self.seconds = 0.0

    def __call__(self, box: Any, state: Path, native: Path) -> None:
        started = time.monotonic()
        self.image = box.snapshot(
            f"sandbox-replayer/snapshot:{self.compare_id}", labels={COMPARE_LABEL: self.compare_id}
        )
        copy_untrusted(state / "workspace", self.dest / "workspace", links="keep", what="the workspace")
        copy_untrusted(state / "home", self.dest / "home", links="skip", what="the agent home")
        # the rebuilt native session, as a continuation in place would see it
        copy_untrusted(native / "home", self.dest / "home", links="skip", merge=True)
        self.seconds = time.monotonic() - started
        if self.check:
            self.boundary_check = run_check(box, self.check, self.cwd, self.check_timeout_s)


def _jobs(
    request: CompareRequest, compare_id: str, tmp: Path, image: str, agent: str, version: str
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
                    image=image,
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
                )
            )
    return jobs


def _collect(job: ForkJob, proc: subprocess.Popen[bytes]) -> RunRecord:
    path = job.run_dir / "run.json"
    (job.run_dir / "job.json").unlink(missing_ok=True)  # its paths name the partial output directory
    if path.is_file():
        return RunRecord.model_validate_json(path.read_bytes())
    log = (job.run_dir / "fork.log").read_bytes()[-600:].decode(errors="replace").strip()
    last = log.splitlines()[-1] if log else ""
    return RunRecord(
        variant=job.variant.name,
        repeat=job.repeat,
        status="failed",
        error_kind="worker",
        error=f"the run's process exited {proc.returncode} without a record: {last}",
        dir=job.dir,
    )


def _run_forks(
    jobs: list[ForkJob], parallel: int, on_run: OnRun | None, on_event: OnEvent = ignore
) -> list[RunRecord]:
    """Each fork in its own process (own session: a Ctrl-C reaches the parent only, which stops them)."""
    on_event(Stage("runs", len(jobs)))
    records: dict[int, RunRecord] = {}
    running: dict[int, subprocess.Popen[bytes]] = {}
    queue = list(enumerate(jobs))
    try:
        while queue or running:
            while queue and len(running) < parallel:
                index, job = queue.pop(0)
                logger.debug("starting run %s/%d from %s", job.variant.name, job.repeat, job.image)
                job.run_dir.mkdir(parents=True)
                write_bytes_atomic(job.run_dir / "job.json", job.model_dump_json().encode())
                with (job.run_dir / "fork.log").open("wb") as log:
                    running[index] = subprocess.Popen(
                        [
                            sys.executable,
                            "-m",
                            "replayer.fork",
                            str(job.run_dir / "job.json"),
                            str(os.getpid()),
                        ],
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
            for index, proc in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[index]
                record = records[index] = _collect(jobs[index], proc)
                logger.debug("run %s/%d ended: %s", record.variant, record.repeat, record.status)
                if on_run is not None:
                    on_run(record)
                failed = record.status == "failed"
                cont = record.continuation
                outcome = (record.error or "") if failed else (cont.agent_status if cont else "-")
                on_event(RunEnded(record.variant, record.repeat, outcome, failed, len(records), len(jobs)))
            time.sleep(_POLL_S)
    except BaseException:
        _stop(list(running.values()))
        raise
    return [records[i] for i in range(len(jobs))]


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + _STOP_GRACE_S
    for proc in procs:
        try:
            proc.wait(max(deadline - time.monotonic(), 0.1))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


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


def _with_differences(runs: list[RunRecord]) -> tuple[list[RunRecord], int, str | None]:
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


def _summaries(request: CompareRequest, runs: list[RunRecord]) -> list[VariantSummary]:
    out = []
    for variant in request.variants:
        mine = [r for r in runs if r.variant == variant.name]
        conts = [r.continuation for r in mine if r.continuation is not None]
        inputs = [c.counters.input_tokens for c in conts if c.counters.input_tokens is not None]
        outputs = [c.counters.output_tokens for c in conts if c.counters.output_tokens is not None]
        passed = sum(1 for r in mine if r.check is not None and r.check.passed)
        out.append(
            VariantSummary(
                name=variant.name,
                spec=variant.spec,
                runs=len(mine),
                failed_runs=sum(1 for r in mine if r.status == "failed"),
                agent_status=dict(Counter(c.agent_status for c in conts)),
                steps_used=[c.steps_used for c in conts],
                check_passed=passed,
                check_pass_rate=passed / len(mine) if request.check and mine else None,
                input_tokens=sum(inputs) if inputs else None,
                output_tokens=sum(outputs) if outputs else None,
                mean_wall_s=sum(r.wall_s for r in mine) / len(mine) if mine else 0.0,
            )
        )
    return out


def compare(
    request: CompareRequest, on_run: OnRun | None = None, on_event: OnEvent = ignore
) -> CompareResult:
    from sandboxes.docker import connect, remove_containers, remove_images

    started = time.monotonic()
    adapter, traj = load(request.trajectory, request.task, request.cwd, request.session)
    _preflight(request, adapter, traj)
    client = connect()
    compare_id = f"cmp-{uuid.uuid4().hex[:10]}"
    local = request.workspace if isinstance(request.workspace, Path) else None  # a clone is the cache's
    out = OutputDir(request.out, force=request.force, inputs=[request.trajectory, local])
    assert traj.cwd
    snapshot = Snapshot(compare_id, out.tmp / "snapshot", traj.cwd, request.check, request.check_timeout_s)
    kept = False
    try:
        replay = execute(
            ReplayRequest(
                mode="run",
                trajectory=request.trajectory,
                after_step=request.after_step,
                out=out.tmp / "replay",
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
        assert snapshot.image is not None and replay.version is not None
        t0 = time.monotonic()
        jobs = _jobs(request, compare_id, out.tmp, snapshot.image, adapter.name, replay.version.version)
        runs = _run_forks(jobs, request.parallel, on_run, on_event)
        runs, common, reference = _with_differences(runs)
        result = CompareResult(
            request=request,
            pins=pins_for(adapter),
            agent=traj.agent,
            agent_version=traj.agent_version,
            after_step=replay.after_step,
            divergences=dict(Counter(d.status for d in replay.divergences)),
            snapshot_image=snapshot.image,
            snapshot_kept=request.keep_snapshot,
            boundary_check=snapshot.boundary_check,
            reference_run=reference,
            common_actions=common,
            variants=_summaries(request, runs),
            runs=runs,
            timings=CompareTimings(
                replay_s=replay_s,
                snapshot_s=snapshot.seconds,
                runs_s=time.monotonic() - t0,
                total_s=time.monotonic() - started,
            ),
        )
        write_bytes_atomic(
            out.tmp / "compare.json", orjson.dumps(result.model_dump(mode="json"), option=JSON_OPTS)
        )
        write_bytes_atomic(out.tmp / "report.html", render_html(result).encode())
        out.commit()
        kept = request.keep_snapshot
    except BaseException as exc:
        out.discard()
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted("SIGINT") from None
        raise
    finally:
        remove_containers(client, f"{COMPARE_LABEL}={compare_id}")
        if not kept:
            remove_images(client, f"{COMPARE_LABEL}={compare_id}")
    return result
