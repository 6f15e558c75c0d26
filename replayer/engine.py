"""execute(request) -> result: parse, plan, sandbox, rerun, rebuild; owns directories, budgets and pins."""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

import adapters
from adapters.base import Adapter, Rebuild, Rerunner
from replayer import __version__, continuation
from replayer.divergence import compare, kept
from replayer.errors import BadInput, ConfinementError, PlanRefused, WorkspaceError
from replayer.io import OutputDir, Workspace, write_bytes_atomic
from replayer.models import (
    ContinuationResult,
    Degradation,
    Divergence,
    Observation,
    Pins,
    ReplayRequest,
    ReplayResult,
    Timings,
    Trajectory,
)
from replayer.pins import load_pins
from replayer.plan import Plan, make_plan

JSON_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
OnBoundary = Callable[[Any, Path], None]
"""Called in run mode with the sandbox and the state directory once the prefix is rebuilt, before any
continuation (compare snapshots the boundary there)."""


def load(path: Path, task: str | None = None) -> tuple[Adapter, Trajectory]:
    adapter = adapters.detect(path)
    if task is not None and not adapter.takes_task:
        raise BadInput(f"--task applies to formats that do not store the prompt; {adapter.name} stores it")
    return adapter, adapter.parse(path, task)


def pins_for(adapter: Adapter) -> Pins:
    pins = load_pins()
    agent = pins.agents.get(adapter.name)
    return Pins(
        replayer=__version__,
        adapter=adapter.name,
        cli_package=agent.package if agent else None,
        cli_version=agent.version if agent else None,
        base_image=pins.base_image.tag,
    )


def execute(
    request: ReplayRequest,
    adapter: Adapter | None = None,
    trajectory: Trajectory | None = None,
    on_boundary: OnBoundary | None = None,
) -> ReplayResult:
    """`adapter` overrides detection (tests inject faults through it); `trajectory` is an earlier parse of
    `request.trajectory` by that adapter (batches share one parse between the jobs of a trajectory)."""
    started = time.monotonic()
    if adapter is None:
        adapter, traj = load(request.trajectory, request.task)
    else:
        traj = trajectory if trajectory is not None else adapter.parse(request.trajectory, request.task)
    parse_s = time.monotonic() - started
    plan = make_plan(
        adapter, traj, request.after_step, request.allow_degraded, executes=request.mode == "run"
    )
    if request.mode == "run":
        _check_workspace(request.workspace)
        if not traj.cwd:
            raise PlanRefused("the trajectory records no working directory to mount the workspace at")
    if request.continuation is not None:
        model = request.continuation.model or adapter.default_model(traj)
        refusal = adapter.continuation_refusal(traj, model)
        if refusal:
            raise PlanRefused(f"cannot continue: {refusal}")
    out = OutputDir(request.out, force=request.force)
    try:
        result = _execute_into(out.tmp, request, adapter, traj, plan, parse_s, started, on_boundary)
        write_bytes_atomic(
            out.tmp / "result.json", orjson.dumps(result.model_dump(mode="json"), option=JSON_OPTS)
        )
        out.commit()
    except BaseException:
        out.discard()
        raise
    return result


def _rebuild(
    adapter: Adapter, traj: Trajectory, plan: Plan, observations: dict[str, Observation], tmp: Path
) -> Rebuild:
    rebuild = adapter.rebuild(traj, plan.after_step, observations, tmp / "native")
    write_bytes_atomic(tmp / "expected_prefix.json", orjson.dumps(rebuild.expected_prefix, option=JSON_OPTS))
    write_bytes_atomic(tmp / "continuation.json", orjson.dumps(rebuild.continuation, option=JSON_OPTS))
    return rebuild


def _check_workspace(workspace: Path | None) -> None:
    if workspace is None:
        raise WorkspaceError("--workspace is required for run")
    if not workspace.is_dir():
        raise WorkspaceError(f"workspace {workspace} does not exist or is not a directory")


def _rerun(
    rerunner: Rerunner,
    plan: Plan,
    request: ReplayRequest,
    observations: dict[str, Observation],
    divergences: list[Divergence],
) -> None:
    """Rerun the planned calls in order; a confinement refusal is waived only with --allow-degraded."""
    for planned in plan.calls:
        if planned.kind != "rerun":
            divergences.append(kept(planned.step, planned.call, planned.kind))
            continue
        try:
            fresh = rerunner.run(planned.call)
        except ConfinementError as exc:
            reason = f"{planned.call.tool} call {planned.call.id} in step {planned.step}: {exc}"
            if not request.allow_degraded:
                raise ConfinementError(
                    reason + "; --allow-degraded keeps its historical observation"
                ) from None
            plan.degradations.append(Degradation.historical_kept(planned.step, planned.call, reason))
            divergences.append(kept(planned.step, planned.call, "unknown"))
            continue
        observations[planned.call.id] = fresh
        divergences.append(compare(planned.step, planned.call, planned.kind, fresh))


def _execute_into(
    tmp: Path,
    request: ReplayRequest,
    adapter: Adapter,
    traj: Trajectory,
    plan: Plan,
    parse_s: float,
    started: float,
    on_boundary: OnBoundary | None = None,
) -> ReplayResult:
    observations: dict[str, Observation] = {}
    divergences: list[Divergence] = []
    image = image_id = container = None
    sandbox_s = rerun_s = 0.0
    cont = request.continuation
    key = continuation.upstream_key(cont, adapter) if cont else ""
    native = tmp / "native"
    continued: ContinuationResult | None = None
    if request.mode == "prepare":
        divergences = [kept(p.step, p.call, p.kind) for p in plan.calls]
        t2 = time.monotonic()
        rebuild = _rebuild(adapter, traj, plan, observations, tmp)
        rebuild_s = time.monotonic() - t2
    else:
        from sandboxes.docker import DockerSandbox, connect

        assert request.workspace is not None and traj.cwd
        state = tmp / "state"
        workspace_copy = state / "workspace"
        shutil.copytree(request.workspace, workspace_copy, symlinks=True)
        agent_home = state / "home"
        bridge_dir = state / "bridge"
        for d in (agent_home, bridge_dir):
            d.mkdir(parents=True)
        image = request.image or load_pins().base_image.tag
        t0 = time.monotonic()
        client = connect()
        binds = {traj.cwd: (workspace_copy, False), **adapter.sandbox_binds(traj, agent_home)}
        if cont:
            binds[continuation.BRIDGE_MOUNT] = (bridge_dir, False)
        box = DockerSandbox.start(client, image, binds=binds, workdir=traj.cwd, run_id=uuid.uuid4().hex[:12])
        image_id = box.image_id
        container = box.container.name
        sandbox_s = time.monotonic() - t0
        try:
            t1 = time.monotonic()
            rerunner = adapter.rerunner(traj, box, Workspace(workspace_copy, traj.cwd), request.budgets)
            try:
                _rerun(rerunner, plan, request, observations, divergences)
            finally:
                rerunner.close()
            rerun_s = time.monotonic() - t1
            t2 = time.monotonic()
            shutil.copytree(agent_home, native / "home")  # side files the reruns left (persisted outputs)
            rebuild = _rebuild(adapter, traj, plan, observations, tmp)
            rebuild_s = time.monotonic() - t2
            if on_boundary is not None:
                on_boundary(box, state)
            if cont:
                shutil.copytree(native / "home", agent_home, dirs_exist_ok=True)
                continued = continuation.run(
                    box,
                    adapter,
                    traj,
                    rebuild,
                    cont,
                    key=key,
                    socket_dir=bridge_dir,
                    home=agent_home,
                    out=tmp,
                )
        finally:
            box.stop()
    return ReplayResult(
        request=request,
        pins=pins_for(adapter),
        agent=traj.agent,
        agent_version=traj.agent_version,
        session_id=traj.session_id,
        cwd=traj.cwd,
        source_sha256=traj.source_sha256,
        image=image,
        image_id=image_id,
        container=container,
        after_step=plan.after_step,
        boundary_call_ids=plan.boundary_call_ids,
        divergences=divergences,
        degradations=plan.degradations,
        native_files=[str(p.relative_to(tmp)) for p in rebuild.native_files],
        continuation=continued,
        timings=Timings(
            parse_s=parse_s,
            sandbox_start_s=sandbox_s,
            rerun_s=rerun_s,
            rebuild_s=rebuild_s,
            total_s=time.monotonic() - started,
        ),
    )
