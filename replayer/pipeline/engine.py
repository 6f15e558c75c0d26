"""execute(request) -> result: parse, then the named steps of replayer/pipeline/steps.py (plan, state, sandbox,
rerun, rebuild, continue); owns the output directory, budgets and pins."""

from __future__ import annotations

import errno
import logging
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from replayer import adapters
from replayer.adapters.base import Adapter
from replayer.floor import bundles, cwdinfer
from replayer.floor.cwdinfer import is_absolute_cwd
from replayer.floor.divergence import kept
from replayer.floor.errors import BadInput, OutputError, ReplayError, SandboxError, WorkspaceError, excerpt
from replayer.floor.events import Event, Installing, OnEvent, Stage, ignore
from replayer.floor.heap import collector_paused
from replayer.floor.io import OutputDir, write_bytes_atomic
from replayer.floor.models import (
    ASKS_FOR_CWD,
    DEFAULT_CWD,
    CwdSource,
    InstalledBundle,
    ReplayRequest,
    ReplayResult,
    Trajectory,
)
from replayer.floor.pins import running_version
from replayer.floor.rundirs import RunDirs
from replayer.floor.safecopy import copy_untrusted
from replayer.pipeline import multisession, steps, workspaces
from replayer.pipeline.context import RunContext
from replayer.pipeline.continuation import Continuing
from replayer.pipeline.plan import Plan
from replayer.pipeline.result import Done, Replayed, assemble, sandbox_record, used_up
from replayer.pipeline.steps import JSON_OPTS, RERUNS
from replayer.sandboxes.base import Backend, Sandbox

logger = logging.getLogger(__name__)
OnBoundary = Callable[[Sandbox, RunDirs, Path], None]
"""Called in run mode with the sandbox, the run's state folders and the rebuilt native directory once the
prefix is rebuilt, before any continuation (compare snapshots the boundary there)."""


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
        if traj.cwd is not None:
            return traj
        found = adapter.inferred_cwd(traj)
        if found is not None:
            return _with_cwd(traj, found, "inferred")
        inputs = (c.input for s in traj.steps for c in s.calls)
        return traj if cwdinfer.workspace_path(inputs) else _with_cwd(traj, DEFAULT_CWD, "default")
    parts = cwd.split("/")[1:]
    if not cwd.startswith("/") or "\x00" in cwd or (cwd != "/" and {"", ".", ".."} & set(parts)):
        raise BadInput(f"--cwd must be an absolute, normalized POSIX path, got {excerpt(cwd)}")
    # a recorded cwd that is no absolute path (a publisher anonymised it) is overridden
    if traj.cwd is not None and traj.cwd != cwd and is_absolute_cwd(traj.cwd):
        raise BadInput(
            f"the trajectory records the working directory {traj.cwd}; --cwd is for files that record none"
        )
    return _with_cwd(traj, cwd, "stated")


def _with_cwd(traj: Trajectory, cwd: str, source: CwdSource) -> Trajectory:
    """The trajectory with a working directory it does not record: the parse notes asking for one go."""
    notes = [n for n in traj.parse_notes if not n.endswith(ASKS_FOR_CWD)]
    return traj.model_copy(update={"cwd": cwd, "cwd_source": source, "parse_notes": notes})


Outcome = ReplayResult | ReplayError
"""A boundary's result, or why it has none (its output directory is then not there)."""


@dataclass
class Begun:
    """A run request checked and its inputs made ready: what the replay of its boundaries starts from."""

    replayed: Replayed
    plans: dict[int, tuple[ReplayRequest, Plan]]
    """Each boundary's own request (its out, its continuation) and plan."""
    key: str
    """The upstream key the continuations send ("" without one, or with a cassette)."""
    workspace: Path | None
    """The workspace the state copies (None: a prepare, or every boundary refused)."""


def begin(
    request: ReplayRequest,
    outs: dict[int, Path],
    adapter: Adapter | None,
    trajectory: Trajectory | None,
    on_event: OnEvent,
    refused: dict[int, Outcome] | None = None,
) -> Begun:
    """The run's checks, in the order they refuse, and its inputs: the parse, the version, each boundary of
    `outs` planned (its continuation checked by the version that continues), then the sandbox's image, the
    upstream key, the workspace and the bundle. A boundary's own refusal is raised, or kept in `refused`
    when given (the others go on)."""
    started = time.monotonic()
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
    version = steps.resolve_version(adapter, traj, request)
    replayed = Replayed(adapter, traj, version, started, parse_s)
    plans: dict[int, tuple[ReplayRequest, Plan]] = {}
    for k in sorted(outs):
        one = request.model_copy(update={"after_step": k, "out": outs[k]})
        try:
            plan = steps.plan(adapter, traj, one, version)
            if one.continuation is not None:
                with running_version(
                    adapter.name, version.version
                ):  # the refusals of the version that continues
                    chosen = steps.check_continuation(adapter, traj, one.continuation, plan.after_step)
                one = one.model_copy(update={"continuation": chosen})
            plans[k] = one, plan
        except ReplayError as exc:
            if refused is None:
                raise
            refused[k] = exc
    if not plans or request.mode != "run":  # a prepare copies no workspace: a repository is not cloned for it
        key = steps.upstream_key(request.continuation, adapter) if plans and request.continuation else ""
        return Begun(replayed, plans, key, None)
    if request.workspace is None:
        raise WorkspaceError("--workspace is required for run")
    steps.check_cwd(traj)
    replayed.image = steps.sandbox_image(request.image, traj)
    key = steps.upstream_key(request.continuation, adapter) if request.continuation else ""
    began = time.monotonic()
    workspace, replayed.checkout = workspaces.materialize(request.workspace, request.limits)
    steps.check_workspace(workspace)
    replayed.workspace_s = time.monotonic() - began
    bundles.ensure(adapter.name, version.version, on_event=hearing_installs(on_event, replayed.installed))
    replayed.install_s = time.monotonic() - began - replayed.workspace_s
    return Begun(replayed, plans, key, workspace)


def execute(
    request: ReplayRequest,
    adapter: Adapter | None = None,
    trajectory: Trajectory | None = None,
    on_boundary: OnBoundary | None = None,
    on_event: OnEvent = ignore,
    backend: Backend | None = None,
) -> ReplayResult:
    """`adapter` overrides detection (tests inject faults through it); `trajectory` is an earlier parse of
    `request.trajectory` by that adapter (batches share one parse between the jobs of a trajectory);
    `on_event` hears the progress (events.py); `backend` starts the sandbox (default: Docker)."""
    logger.debug(
        "%s %s after step %d -> %s", request.mode, request.trajectory, request.after_step, request.out
    )
    begun = begin(request, {request.after_step: request.out}, adapter, trajectory, on_event)
    replayed, workspace, image = begun.replayed, begun.workspace, begun.replayed.image
    adapter, traj, version = replayed.adapter, replayed.traj, replayed.version
    request, plan = begun.plans[request.after_step]
    key = begun.key
    cont = request.continuation
    tapes = [cont.cassette, cont.record_cassette] if cont else []
    out = OutputDir(request.out, force=request.force, inputs=[request.trajectory, workspace, *tapes])
    job = _Job(request, adapter, traj, plan, out.tmp, key, on_event)
    try:
        with running_version(adapter.name, version.version):
            if workspace is None:
                done = _prepare(job)
            else:
                assert image is not None
                done = _run(job, workspace, image, on_boundary, backend or _docker())
        result = assemble(request, plan, replayed, done, out.tmp)
        write_bytes_atomic(
            out.tmp / "result.json", orjson.dumps(result.model_dump(mode="json"), option=JSON_OPTS)
        )
        out.commit()
        logger.debug("wrote %s in %.2f s", request.out, result.timings.total_s)
    except OSError as exc:
        out.discard()
        known = os_error(exc, request)
        if known is not None:
            raise known from None
        raise
    except BaseException:
        out.discard()
        raise
    return result


def hearing_installs(on_event: OnEvent, installed: list[InstalledBundle]) -> OnEvent:
    """`on_event`, also keeping each finished install in `installed` (the result records it)."""

    def heard(event: Event) -> None:
        if isinstance(event, Installing) and event.phase == "done":
            installed.append(
                InstalledBundle(
                    agent=event.agent,
                    version=event.version,
                    source=event.source,
                    bytes=event.bytes,
                    seconds=event.seconds,
                )
            )
        on_event(event)

    return heard


def os_error(exc: OSError, request: ReplayRequest) -> ReplayError | None:
    """The error a run that met `exc` ends with (a full quota, an unwritable output); None: not one of those."""
    if exc.errno == errno.EDQUOT:
        return SandboxError(
            f"the sandbox used up its disk quota of {request.limits.disk_bytes} bytes, and the run "
            "could not go on (see --limits disk=)"
        )
    if exc.errno in _OUTPUT_ERRNOS:
        return OutputError(f"cannot write the output {request.out}: {exc.strerror}")
    return None


def _docker() -> Backend:
    from replayer.sandboxes.docker import DockerBackend

    return DockerBackend()


@dataclass
class _Job:
    """What every step of one execution reads."""

    request: ReplayRequest
    adapter: Adapter
    traj: Trajectory
    plan: Plan
    out: Path
    """The output's temporary directory (committed whole at the end)."""
    key: str
    """The upstream key a continuation sends ("" without one, or with a cassette)."""
    on_event: OnEvent


def _prepare(job: _Job) -> Done:
    """prepare: no sandbox; every call keeps its historical observation."""
    divergences = [kept(p.step, p.call, p.kind) for p in job.plan.calls]
    t0 = time.monotonic()
    job.on_event(Stage("rebuild"))
    made = steps.rebuild(job.adapter, job.traj, job.plan, {}, job.out)
    return Done(made, divergences, time.monotonic() - t0)


def _run(job: _Job, workspace: Path, image: str, on_boundary: OnBoundary | None, backend: Backend) -> Done:
    """run: the state, the sandbox, the reruns, the rebuild, the continuation, the state exported."""
    request, adapter, traj, tmp, on_event = job.request, job.adapter, job.traj, job.out, job.on_event
    cont, limits = request.continuation, request.limits
    skips = steps.Skips()
    with RunContext() as ctx:
        opened = steps.open_replay(
            ctx,
            backend,
            adapter,
            traj,
            workspace,
            image,
            scratch=tmp,
            skips=skips,
            run_id=uuid.uuid4().hex[:12],
            limits=limits,
            labels=request.labels,
            bridge=cont is not None,
            on_event=on_event,
        )
        state, dirs, box = opened.state, opened.dirs, opened.box
        t1 = time.monotonic()
        observations, divergences = steps.rerun_prefix(adapter, traj, box, dirs, job.plan, request, on_event)
        steps.write_reruns(tmp / RERUNS, job.plan, observations)
        rerun_s, t2 = time.monotonic() - t1, time.monotonic()
        on_event(Stage("rebuild"))
        # side files the reruns left in the agent home (persisted outputs); the container could
        # write there, so nothing in it is followed or trusted
        native = tmp / "native"
        side = copy_untrusted(
            dirs.home, native / "home", links="skip", limits=limits, what="the agent home", holes="count"
        )
        skips.add(side, "home")
        made = steps.rebuild(adapter, traj, job.plan, observations, tmp)
        done = Done(
            made, divergences, time.monotonic() - t2, opened.sandbox_s, rerun_s, box.image_id, box.name
        )
        if on_boundary is not None:
            on_boundary(box, dirs, native)
        if cont:
            copy_untrusted(native / "home", dirs.home, links="skip", limits=limits, merge=True)
            done.continued = steps.continue_agent(
                Continuing(
                    box, adapter, traj, made, cont, dirs, tmp, job.key, job.plan.after_step, limits, on_event
                )
            )
        used = used_up(state.used_up, box)
        ctx.release(box)
        steps.export_state(dirs, tmp, limits, skips)
        done.sandbox = sandbox_record(limits, box, state.limited, used, skips.listed, skips.count)
    return done
