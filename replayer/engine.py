"""execute(request) -> result: parse, plan, sandbox, rerun, rebuild; owns directories, budgets and pins."""

from __future__ import annotations

import errno
import logging
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

import adapters
from adapters.base import Adapter, Rebuild, Rerunner
from replayer import __version__, bundles, cassette, continuation, multisession, versions, workspaces
from replayer.divergence import divergence_of, kept, model_text, workspace_hint
from replayer.errors import (
    BadInput,
    ConfinementError,
    OutputError,
    PlanRefused,
    SandboxError,
    WorkspaceError,
    excerpt,
)
from replayer.events import CallRerun, OnEvent, Stage, ignore
from replayer.heap import collector_paused
from replayer.io import OutputDir, Workspace, write_bytes_atomic
from replayer.models import (
    ContinuationResult,
    ContinueRequest,
    Degradation,
    Divergence,
    Observation,
    Pins,
    ReplayRequest,
    ReplayResult,
    RerunRecord,
    SandboxRecord,
    Timings,
    Trajectory,
)
from replayer.pins import load_pins, pinned_version, running_version
from replayer.plan import NO_CWD, Plan, make_plan
from replayer.safecopy import Links, copy_untrusted

logger = logging.getLogger(__name__)
JSON_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
RERUNS = "reruns.json"
OnBoundary = Callable[[Any, Path, Path], None]
"""Called in run mode with the sandbox, the state directory (workspace/, home/) and the rebuilt native
directory once the prefix is rebuilt, before any continuation (compare snapshots the boundary there)."""


_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EIO, errno.EFBIG}
_DAMAGED = (
    KeyError,
    TypeError,
    AttributeError,
    IndexError,
    ValueError,
    UnicodeError,
    OverflowError,
    RecursionError,
)
"""What a parser that missed a check raises on a damaged record: a refusal of the file, never a crash."""


def load(
    path: Path, task: str | None = None, cwd: str | None = None, session: str | None = None
) -> tuple[Adapter, Trajectory]:
    """`session` (--session) selects one session of a file that holds several (multisession.py)."""
    with collector_paused():
        return _load(path, task, cwd, session)


def _load(path: Path, task: str | None, cwd: str | None, session: str | None) -> tuple[Adapter, Trajectory]:
    held = multisession.held(path)
    if held and session is None:
        raise BadInput(
            f"{path} holds {len(held)} sessions: pass --session ID (`replayer inspect` lists them)"
        )
    source = multisession.extract(path, held, session) if held and session is not None else path
    adapter = adapters.detect(source)
    if task is not None and not adapter.takes_task:
        raise BadInput(f"--task applies to formats that do not store the prompt; {adapter.name} stores it")
    traj = parse(adapter, source, task, cwd)
    if session is not None and not held and traj.session_id != session:
        raise BadInput(f"{path} holds one session, {traj.session_id}, not {excerpt(session)}")
    return adapter, traj.model_copy(update={"source": str(path)}) if held else traj


def parse(adapter: Adapter, path: Path, task: str | None, cwd: str | None = None) -> Trajectory:
    """The adapter's parse; the parsers validate each record where they read it, and this is the net
    below them: a damaged record they did not foresee is still a bad_input refusal. `cwd` (--cwd) is the
    working directory of a file that records none."""
    try:
        with collector_paused():
            traj = adapter.parse(path, task)
    except _DAMAGED as exc:
        raise BadInput(
            f"{path} is a damaged {adapter.name} file ({type(exc).__name__}: {excerpt(str(exc))})"
        ) from None
    if cwd is None:
        return traj
    parts = cwd.split("/")[1:]
    if not cwd.startswith("/") or "\x00" in cwd or (cwd != "/" and {"", ".", ".."} & set(parts)):
        raise BadInput(f"--cwd must be an absolute, normalized POSIX path, got {excerpt(cwd)}")
    if traj.cwd is not None and traj.cwd != cwd:
        raise BadInput(
            f"the trajectory records the working directory {traj.cwd}; --cwd is for files that record none"
        )
    return traj.model_copy(update={"cwd": cwd})


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
    on_event: OnEvent = ignore,
) -> ReplayResult:
    """`adapter` overrides detection (tests inject faults through it); `trajectory` is an earlier parse of
    `request.trajectory` by that adapter (batches share one parse between the jobs of a trajectory);
    `on_event` hears the progress (events.py)."""
    started = time.monotonic()
    logger.debug(
        "%s %s after step %d -> %s", request.mode, request.trajectory, request.after_step, request.out
    )
    on_event(Stage("parse"))
    if adapter is None:
        adapter, traj = load(request.trajectory, request.task, request.cwd, request.session)
    else:
        traj = (
            trajectory
            if trajectory is not None
            else parse(adapter, request.trajectory, request.task, request.cwd)
        )
    parse_s = time.monotonic() - started
    logger.debug("parsed %s: %s, %d step(s), %.2f s", traj.source, adapter.name, len(traj.steps), parse_s)
    version = versions.resolve(
        adapter,
        traj.agent_version,
        traj.agent_version_inferred,
        request.agent_version,
        traj.runs_as,
    )
    if request.require_verified and version.status != "verified":
        raise PlanRefused(
            f"{adapter.name} {version.version} ({version.source}) is not verified "
            f"(verified: {pinned_version(adapter.name)}); without --require-verified it runs, recorded as unverified"
        )
    with running_version(adapter.name, version.version):  # a driven version classifies its own tools
        plan = make_plan(
            adapter, traj, request.after_step, request.allow_degraded, executes=request.mode == "run"
        )
    logger.debug(
        "plan: %s %s (%s, %s), boundary after step %d, %d call(s)",
        adapter.name,
        version.version,
        version.source,
        version.status,
        plan.after_step,
        len(plan.calls),
    )
    if request.mode == "run":
        if request.workspace is None:
            raise WorkspaceError("--workspace is required for run")
        if not traj.cwd:
            raise PlanRefused(NO_CWD)
    image = sandbox_image(request.image, traj) if request.mode == "run" else None
    if request.continuation is not None:
        model = request.continuation.model or adapter.default_model(traj)
        refusal = adapter.continuation_refusal(traj, model)
        if refusal:
            raise PlanRefused(f"cannot continue: {refusal}")
        if request.continuation.cassette is not None:  # a folder of cassettes: this boundary's
            chosen = cassette.select(request.continuation.cassette, traj, plan.after_step)
            request = request.model_copy(
                update={"continuation": request.continuation.model_copy(update={"cassette": chosen})}
            )
        assert request.continuation is not None
        check_cassettes(request.continuation, traj, plan.after_step)
    workspace, checkout = None, None
    if request.mode == "run":  # a prepare copies no workspace: a repository is not cloned for it
        workspace, checkout = workspaces.materialize(request.workspace)
        check_workspace(workspace)
        bundles.ensure(adapter.name, version.version)
    cont = request.continuation
    tapes = [cont.cassette, cont.record_cassette] if cont else []
    out = OutputDir(request.out, force=request.force, inputs=[request.trajectory, workspace, *tapes])
    try:
        with running_version(adapter.name, version.version):
            result = _execute_into(
                out.tmp,
                request,
                adapter,
                traj,
                plan,
                parse_s,
                started,
                on_boundary,
                workspace,
                image,
                on_event,
            )
        result = result.model_copy(update={"version": version, "workspace_checkout": checkout})
        write_bytes_atomic(
            out.tmp / "result.json", orjson.dumps(result.model_dump(mode="json"), option=JSON_OPTS)
        )
        out.commit()
        logger.debug("wrote %s in %.2f s", request.out, result.timings.total_s)
    except OSError as exc:
        out.discard()
        if exc.errno == errno.EDQUOT:
            raise SandboxError(
                f"the sandbox used up its disk quota of {request.limits.disk_bytes} bytes, and the run "
                "could not go on (see --limits disk=)"
            ) from None
        if exc.errno in _OUTPUT_ERRNOS:
            raise OutputError(f"cannot write the output {request.out}: {exc.strerror}") from None
        raise
    except BaseException:
        out.discard()
        raise
    return result


def check_cassettes(cont: ContinueRequest, traj: Trajectory, after_step: int) -> None:
    """Before anything starts: the cassette to replay is intact and holds this boundary's continuation; the
    one to record does not exist yet."""
    if cont.cassette is not None and cont.record_cassette is not None:
        raise BadInput("--cassette replays a recording and --record-cassette makes one: give one of them")
    if cont.cassette is not None:
        cassette.check_origin(cassette.load(cont.cassette), cont.cassette, traj, after_step)
    if cont.record_cassette is not None:
        cassette.refuse_existing(cont.record_cassette)


def _rebuild(
    adapter: Adapter, traj: Trajectory, plan: Plan, observations: dict[str, Observation], tmp: Path
) -> Rebuild:
    rebuild = adapter.rebuild(traj, plan.after_step, observations, tmp / "native")
    write_bytes_atomic(tmp / "expected_prefix.json", orjson.dumps(rebuild.expected_prefix, option=JSON_OPTS))
    write_bytes_atomic(tmp / "continuation.json", orjson.dumps(rebuild.continuation, option=JSON_OPTS))
    return rebuild


def sandbox_image(stated: str | None, traj: Trajectory) -> str:
    """--image: an image, `auto` (the environment image the trajectory names), or None (the base image)."""
    if stated != "auto":
        return stated or load_pins().base_image.tag
    if traj.environment_image is None:
        raise PlanRefused("--image auto: the trajectory names no environment image; pass --image IMAGE")
    return traj.environment_image


def check_workspace(workspace: Path | None) -> None:
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
    on_event: OnEvent,
) -> None:
    """Rerun the planned calls in order; a confinement refusal is waived only with --allow-degraded."""
    total = sum(1 for p in plan.calls if p.kind == "rerun")
    on_event(Stage("rerun", total))
    done = 0
    for planned in plan.calls:
        if planned.kind != "rerun":
            divergences.append(kept(planned.step, planned.call, planned.kind))
            continue
        started = time.monotonic()
        done += 1
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
        else:
            observations[planned.call.id] = fresh
            divergences.append(divergence_of(planned.step, planned.call, planned.kind, fresh))
        last, seconds = divergences[-1], time.monotonic() - started
        logger.debug("step %d %s %s: %s (%.2f s)", last.step, last.tool, last.call_id, last.status, seconds)
        on_event(CallRerun(last.step, last.call_id, last.tool, last.status, seconds, done, total))


def _write_reruns(path: Path, plan: Plan, observations: dict[str, Observation]) -> None:
    """Each rerun call's historical and fresh observation, as the model saw them (`replayer view` shows
    them side by side; result.json's divergences hold only excerpts)."""
    records = [
        RerunRecord(
            step=p.step,
            call_id=p.call.id,
            tool=p.call.tool,
            historical=model_text(p.call.historical) if p.call.historical is not None else None,
            fresh=model_text(observations[p.call.id]),
        ).model_dump(mode="json")
        for p in plan.calls
        if p.call.id in observations
    ]
    write_bytes_atomic(path, orjson.dumps(records, option=JSON_OPTS))


def _execute_into(
    tmp: Path,
    request: ReplayRequest,
    adapter: Adapter,
    traj: Trajectory,
    plan: Plan,
    parse_s: float,
    started: float,
    on_boundary: OnBoundary | None,
    workspace: Path | None,
    image: str | None,
    on_event: OnEvent,
) -> ReplayResult:
    observations: dict[str, Observation] = {}
    divergences: list[Divergence] = []
    image_id = container = None
    sandbox_s = rerun_s = 0.0
    cont = request.continuation
    key = continuation.upstream_key(cont, adapter) if cont and not cont.cassette else ""
    native = tmp / "native"
    continued: ContinuationResult | None = None
    sandbox_record: SandboxRecord | None = None
    if request.mode == "prepare":
        divergences = [kept(p.step, p.call, p.kind) for p in plan.calls]
        t2 = time.monotonic()
        on_event(Stage("rebuild"))
        rebuild = _rebuild(adapter, traj, plan, observations, tmp)
        rebuild_s = time.monotonic() - t2
    else:
        from sandboxes.docker import DROPPED_CAPABILITIES, DockerSandbox, connect
        from sandboxes.quota import StateDir

        assert workspace is not None and image is not None and traj.cwd
        limits = request.limits
        state = StateDir.create(limits.disk_bytes, fallback_parent=tmp)
        try:
            workspace_copy = state.path / "workspace"
            copied = copy_untrusted(
                workspace, workspace_copy, links="keep", limits=limits, what="the workspace"
            )
            skipped = copied.listing("workspace")
            skipped_count = copied.skipped_count
            agent_home = state.path / "home"
            bridge_dir = state.path / "bridge"
            for d in (agent_home, bridge_dir):
                d.mkdir(parents=True)
            t0 = time.monotonic()
            on_event(Stage("sandbox"))
            logger.debug("starting a container of %s, limits %s", image, limits)
            client = connect()
            binds = {traj.cwd: (workspace_copy, False), **adapter.sandbox_binds(traj, agent_home)}
            if cont:
                binds[continuation.BRIDGE_MOUNT] = (bridge_dir, False)
            box = DockerSandbox.start(
                client,
                image,
                binds=binds,
                workdir=traj.cwd,
                run_id=uuid.uuid4().hex[:12],
                limits=limits,
                labels=request.labels,
            )
            try:
                image_id = box.image_id
                container = box.container.name
                sandbox_s = time.monotonic() - t0
                t1 = time.monotonic()
                rerunner = adapter.rerunner(traj, box, Workspace(workspace_copy, traj.cwd), request.budgets)
                try:
                    _rerun(rerunner, plan, request, observations, divergences, on_event)
                finally:
                    rerunner.close()
                _write_reruns(tmp / RERUNS, plan, observations)
                rerun_s = time.monotonic() - t1
                t2 = time.monotonic()
                on_event(Stage("rebuild"))
                # side files the reruns left in the agent home (persisted outputs); the container could
                # write there, so nothing in it is followed or trusted
                side = copy_untrusted(
                    agent_home, native / "home", links="skip", limits=limits, what="the agent home"
                )
                skipped += side.listing("home")
                skipped_count += side.skipped_count
                rebuild = _rebuild(adapter, traj, plan, observations, tmp)
                rebuild_s = time.monotonic() - t2
                if on_boundary is not None:
                    on_boundary(box, state.path, native)
                if cont:
                    on_event(Stage("continue"))
                    logger.debug("continuing %s through the bridge to %s", adapter.name, cont.upstream)
                    copy_untrusted(native / "home", agent_home, links="skip", limits=limits, merge=True)
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
                        workspace=workspace_copy,
                        after_step=plan.after_step,
                        on_event=on_event,
                    )
            finally:
                box.stop()
            exports: list[tuple[str, Links]] = [("workspace", "keep"), ("home", "skip")]
            for place, links in exports:
                final = copy_untrusted(
                    state.path / place, tmp / "state" / place, links=links, limits=limits, what=f"the {place}"
                )
                skipped += final.listing(f"state/{place}")
                skipped_count += final.skipped_count
            sandbox_record = SandboxRecord(
                limits=limits,
                capabilities_dropped=DROPPED_CAPABILITIES,
                state_disk_limited=state.limited,
                container_disk_limited=box.disk_limited,
                skipped=skipped,
                skipped_count=skipped_count,
            )
        finally:
            state.remove()
    return ReplayResult(
        request=request,
        pins=pins_for(adapter),
        agent=traj.agent,
        agent_version=traj.agent_version,
        session_id=traj.session_id,
        cwd=traj.cwd,
        source_sha256=traj.source_sha256,
        parse_notes=traj.parse_notes,
        image=image,
        image_id=image_id,
        container=container,
        after_step=plan.after_step,
        boundary_call_ids=plan.boundary_call_ids,
        divergences=divergences,
        hints=[h for h in [workspace_hint(divergences)] if h],
        degradations=plan.degradations,
        native_files=[str(p.relative_to(tmp)) for p in rebuild.native_files],
        continuation=continued,
        sandbox=sandbox_record,
        timings=Timings(
            parse_s=parse_s,
            sandbox_start_s=sandbox_s,
            rerun_s=rerun_s,
            rebuild_s=rebuild_s,
            total_s=time.monotonic() - started,
        ),
    )
