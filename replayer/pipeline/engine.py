"""The replay's entry points: `execute` (`run -n K`, a prepare) and `execute_many` (`run -n a,b`) both
`begin` (parse, version, each boundary planned, image, key, workspace, bundle), then hand the boundaries
to the one replay (replayer/pipeline/multiboundary.py); `run -n K` is a list of one."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from replayer import adapters, installer
from replayer.adapters.base import Adapter
from replayer.floor import cwdinfer, winpaths
from replayer.floor.cwdinfer import is_absolute_cwd
from replayer.floor.divergence import kept
from replayer.floor.errors import BadInput, ReplayError, WorkspaceError, excerpt
from replayer.floor.events import Event, Installing, OnEvent, Stage, ignore
from replayer.floor.heap import collector_paused
from replayer.floor.io import OutputDir
from replayer.floor.pins import running_version
from replayer.floor.requests import ReplayRequest
from replayer.floor.results import ReplayResult
from replayer.floor.rundirs import RunDirs
from replayer.floor.trajectory import ASKS_FOR_CWD, DEFAULT_CWD, CwdSource, Trajectory
from replayer.floor.versions import InstalledBundle
from replayer.pipeline import multiboundary, multisession, steps, windows, workspaces
from replayer.pipeline.boundary_outputs import BoundaryOutputs
from replayer.pipeline.plan import Plan
from replayer.pipeline.result import Done, Outcome, Replayed, assemble, commit, os_error
from replayer.sandboxes import engines
from replayer.sandboxes.base import Backend, Sandbox

logger = logging.getLogger(__name__)
OnBoundary = Callable[[Sandbox, RunDirs, Path], None]
"""`multiboundary.OnPassed` of a replay of one boundary (compare snapshots the boundary there)."""


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
    adapter, form = adapters.detect_form(source)
    if task is not None and not adapter.takes_task:
        raise BadInput(f"--task applies to formats that do not store the prompt; {adapter.name} stores it")
    traj = parse(adapter, source, task, cwd)
    if windows.recorded_on_windows(traj, source):
        traj = windows.mapped(source, traj, lambda copy: parse(adapter, copy, task, cwd))
    if session is not None and not held and traj.session_id != session:
        raise BadInput(f"{path} holds one session, {traj.session_id}, not {excerpt(session)}")
    derived = held or traj.recorded_on is not None
    kept = {"native_form": form.name, **({"source": str(path)} if derived else {})}
    return adapter, traj.model_copy(update=kept)


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
    # a recorded cwd that is no absolute path (a publisher anonymised it) is overridden; a Windows one is
    # read in its Git Bash form (windows.py), which another directory would contradict as any recorded one
    recorded = traj.cwd is not None and (is_absolute_cwd(traj.cwd) or winpaths.is_windows_path(traj.cwd))
    if recorded and traj.cwd != cwd:
        raise BadInput(
            f"the trajectory records the working directory {traj.cwd}; --cwd is for files that record none"
        )
    return _with_cwd(traj, cwd, "stated")


def _with_cwd(traj: Trajectory, cwd: str, source: CwdSource) -> Trajectory:
    """The trajectory with a working directory it does not record: the parse notes asking for one go."""
    notes = [n for n in traj.parse_notes if not n.endswith(ASKS_FOR_CWD)]
    return traj.model_copy(update={"cwd": cwd, "cwd_source": source, "parse_notes": notes})


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
    installer.ensure(adapter.name, version.version, on_event=hearing_installs(on_event, replayed.installed))
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
    """`run -n K` (a replay of one boundary, multiboundary.py) or a prepare. `adapter` overrides detection
    (tests inject faults through it); `trajectory` is an earlier parse of `request.trajectory` by that
    adapter (batches share one parse between the jobs of a trajectory); `on_boundary` hears the boundary
    as the replay passes it (run mode, no continuation); `on_event` hears the progress (events.py);
    `backend` starts the sandbox (default: Docker)."""
    logger.debug(
        "%s %s after step %d -> %s", request.mode, request.trajectory, request.after_step, request.out
    )
    if request.mode != "run":
        return _prepare(request, adapter, trajectory, on_event)
    passed = None if on_boundary is None else lambda _k, box, dirs, native: on_boundary(box, dirs, native)
    outcome = _execute(
        request, {request.after_step: request.out}, adapter, trajectory, on_event, backend, passed
    )
    done = outcome[request.after_step]
    if isinstance(done, ReplayError):
        raise done
    return done


def execute_many(
    request: ReplayRequest,
    outs: dict[int, Path],
    adapter: Adapter | None = None,
    trajectory: Trajectory | None = None,
    on_event: OnEvent = ignore,
    backend: Backend | None = None,
    on_passed: multiboundary.OnPassed | None = None,
) -> dict[int, Outcome]:
    """Run mode at every boundary of `outs` (boundary -> its output directory) in one replay; `request`
    holds the options (its after_step and out are each boundary's own). With a continuation, each
    boundary's continuation forks from its snapshot once the replay is done (fanout.py). Without one,
    `on_passed` hears each boundary as the replay passes it."""
    if request.mode != "run":
        raise BadInput("one replay serves many boundaries in run mode")
    cont = request.continuation
    if cont is not None and cont.record_cassette is not None and len(outs) > 1:
        raise BadInput("--record-cassette records one continuation: give one boundary")
    if not outs:
        return {}
    outcomes: dict[int, Outcome] = {}
    _execute(request, outs, adapter, trajectory, on_event, backend, on_passed, outcomes)
    return outcomes


def _execute(
    request: ReplayRequest,
    outs: dict[int, Path],
    adapter: Adapter | None,
    trajectory: Trajectory | None,
    on_event: OnEvent,
    backend: Backend | None,
    on_passed: multiboundary.OnPassed | None,
    refused: dict[int, Outcome] | None = None,
) -> dict[int, Outcome]:
    """Begin, then the one replay of `outs`' boundaries; each boundary's outcome (a refusal before the
    replay is raised, or kept in `refused` when given)."""
    outcomes: dict[int, Outcome] = {} if refused is None else refused
    begun = begin(request, outs, adapter, trajectory, on_event, refused)
    if begun.workspace is None:
        return outcomes
    multiboundary.replay(
        request,
        begun.replayed,
        begun.plans,
        begun.workspace,
        begun.key,
        backend or engines.chosen(),
        on_event,
        on_passed,
        outcomes,
    )
    return outcomes


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


def _prepare(
    request: ReplayRequest, adapter: Adapter | None, trajectory: Trajectory | None, on_event: OnEvent
) -> ReplayResult:
    """prepare: no sandbox; every call keeps its historical observation."""
    begun = begin(request, {request.after_step: request.out}, adapter, trajectory, on_event)
    one, plan = begun.plans[request.after_step]
    return _prepared(one, plan, begun.replayed, on_event)


def prepare_many(
    request: ReplayRequest,
    outs: dict[int, Path],
    adapter: Adapter | None = None,
    trajectory: Trajectory | None = None,
    on_event: OnEvent = ignore,
) -> dict[int, Outcome]:
    """prepare at every boundary of `outs` (boundary -> its output directory) from one parse: each its own
    complete directory, as a prepare of that boundary alone writes it; a boundary refused or failed keeps
    its error (the others go on)."""
    if request.mode != "prepare":
        raise BadInput("prepare_many prepares")
    outcomes: dict[int, Outcome] = {}
    begun = begin(request, outs, adapter, trajectory, on_event, outcomes)
    outputs = BoundaryOutputs.of(request.limits)  # the boundaries' outputs bounded as a whole, as a run's
    try:
        for k, (one, plan) in sorted(begun.plans.items()):
            try:
                if outputs.budget.refused is not None:  # the outputs are full: nothing more is written
                    raise outputs.budget.refused
                outcomes[k] = _prepared(one, plan, begun.replayed, on_event, (outputs, k))
            except ReplayError as exc:
                outcomes[k] = exc
    finally:
        outputs.close()
    return outcomes


def _prepared(
    request: ReplayRequest,
    plan: Plan,
    replayed: Replayed,
    on_event: OnEvent,
    bounded: tuple[BoundaryOutputs, int] | None = None,
) -> ReplayResult:
    """One boundary's prefix with the historical observations, written atomically into `request.out`;
    `bounded`: the outputs of several boundaries it counts against, and its boundary."""
    tapes = (
        [request.continuation.cassette, request.continuation.record_cassette] if request.continuation else []
    )
    out = OutputDir(request.out, force=request.force, inputs=[request.trajectory, *tapes])
    try:
        with running_version(replayed.adapter.name, replayed.version.version):
            divergences = [kept(p.step, p.call, p.kind) for p in plan.calls]
            t0 = time.monotonic()
            on_event(Stage("rebuild"))
            made = steps.rebuild(replayed.adapter, replayed.traj, plan, {}, out.tmp)
            done = Done(made, divergences, time.monotonic() - t0)
        result = assemble(request, plan, replayed, done, out.tmp)
        if bounded is not None:
            bounded[0].settle(bounded[1], out.tmp)
        commit(out, result)
        if bounded is not None:
            bounded[0].committed(out.final)
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
