"""execute(request) -> result: parse, plan, sandbox, rerun, rebuild; owns directories, budgets and pins."""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import orjson

import adapters
from adapters.base import Adapter
from replayer import __version__
from replayer.divergence import compare, kept
from replayer.errors import ConfinementError, WorkspaceError
from replayer.io import OutputDir, Workspace, write_bytes_atomic
from replayer.models import (
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


def load(path: Path) -> tuple[Adapter, Trajectory]:
    adapter = adapters.detect(path)
    return adapter, adapter.parse(path)


def pins_for(adapter: Adapter) -> Pins:
    pins = load_pins()
    agent = pins.agents.get(adapter.name)
    return Pins(
        replayer=__version__,
        adapter=adapter.name,
        cli_package=agent.npm if agent else None,
        cli_version=agent.version if agent else None,
        base_image=pins.base_image.tag,
    )


def execute(request: ReplayRequest) -> ReplayResult:
    started = time.monotonic()
    adapter, traj = load(request.trajectory)
    parse_s = time.monotonic() - started
    plan = make_plan(
        adapter, traj, request.after_step, request.allow_degraded, executes=request.mode == "run"
    )
    if request.mode == "run":
        _check_workspace(request.workspace)
    out = OutputDir(request.out, force=request.force)
    try:
        result = _execute_into(out.tmp, request, adapter, traj, plan, parse_s, started)
        write_bytes_atomic(
            out.tmp / "result.json", orjson.dumps(result.model_dump(mode="json"), option=JSON_OPTS)
        )
        out.commit()
    except BaseException:
        out.discard()
        raise
    return result


def _check_workspace(workspace: Path | None) -> None:
    if workspace is None:
        raise WorkspaceError("--workspace is required for run")
    if not workspace.is_dir():
        raise WorkspaceError(f"workspace {workspace} does not exist or is not a directory")


def _execute_into(
    tmp: Path,
    request: ReplayRequest,
    adapter: Adapter,
    traj: Trajectory,
    plan: Plan,
    parse_s: float,
    started: float,
) -> ReplayResult:
    observations: dict[str, Observation] = {}
    divergences: list[Divergence] = []
    image = image_id = None
    sandbox_s = rerun_s = 0.0
    if request.mode == "run":
        from sandboxes.docker import DockerSandbox, connect

        assert request.workspace is not None and traj.cwd
        state = tmp / "state"
        workspace_copy = state / "workspace"
        shutil.copytree(request.workspace, workspace_copy, symlinks=True)
        agent_home = tmp / "native" / "home"
        agent_home.mkdir(parents=True)
        image = request.image or load_pins().base_image.tag
        t0 = time.monotonic()
        client = connect()
        run_id = uuid.uuid4().hex[:12]
        binds = {traj.cwd: (workspace_copy, False), **adapter.sandbox_binds(traj, agent_home)}
        box = DockerSandbox.start(client, image, binds=binds, workdir=traj.cwd, run_id=run_id)
        image_id = box.image_id
        sandbox_s = time.monotonic() - t0
        t1 = time.monotonic()
        try:
            rerunner = adapter.rerunner(traj, box, Workspace(workspace_copy, traj.cwd), request.budgets)
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
                    call = planned.call
                    plan.degradations.append(
                        Degradation(
                            reason=reason,
                            action="historical_kept",
                            step=planned.step,
                            call_id=call.id,
                            tool=call.tool,
                        )
                    )
                    divergences.append(kept(planned.step, call, "unknown"))
                    continue
                observations[planned.call.id] = fresh
                divergences.append(compare(planned.step, planned.call, planned.kind, fresh))
        finally:
            box.stop()
        rerun_s = time.monotonic() - t1
    else:
        divergences = [kept(p.step, p.call, p.kind) for p in plan.calls]
    t2 = time.monotonic()
    rebuild = adapter.rebuild(traj, plan.after_step, observations, tmp / "native")
    write_bytes_atomic(tmp / "expected_prefix.json", orjson.dumps(rebuild.expected_prefix, option=JSON_OPTS))
    write_bytes_atomic(tmp / "continuation.json", orjson.dumps(rebuild.continuation, option=JSON_OPTS))
    rebuild_s = time.monotonic() - t2
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
        after_step=plan.after_step,
        boundary_call_ids=plan.boundary_call_ids,
        divergences=divergences,
        degradations=plan.degradations,
        native_files=[str(p.relative_to(tmp)) for p in rebuild.native_files],
        timings=Timings(
            parse_s=parse_s,
            sandbox_start_s=sandbox_s,
            rerun_s=rerun_s,
            rebuild_s=rebuild_s,
            total_s=time.monotonic() - started,
        ),
    )
