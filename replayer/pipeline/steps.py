"""The engine's named steps, shared by `run`/`prepare` (engine.py), a compare's runs (fork.py) and its
preflight (compare.py): check, resolve the version, plan, materialize the state, start the sandbox,
rerun the prefix, rebuild, continue the agent, export the state."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import orjson

from replayer.adapters.base import Adapter, Rebuild, Rerunner, StepwiseRerunner
from replayer.floor import cwdinfer
from replayer.floor.cwdinfer import is_absolute_cwd
from replayer.floor.divergence import divergence_of, kept, model_text
from replayer.floor.errors import BadInput, ConfinementError, PlanRefused, WorkspaceError, excerpt
from replayer.floor.events import CallRerun, OnEvent, Stage
from replayer.floor.io import write_bytes_atomic
from replayer.floor.limits import SandboxLimits
from replayer.floor.pins import load_pins, pinned_version, running_version
from replayer.floor.requests import ContinueRequest, ReplayRequest
from replayer.floor.results import ContinuationResult, Degradation, Divergence, RerunRecord
from replayer.floor.rundirs import RunDirs
from replayer.floor.safecopy import CopyReport, Links, copy_untrusted
from replayer.floor.trajectory import Observation, Trajectory
from replayer.floor.versions import VersionRecord
from replayer.pipeline import agent_version as versions
from replayer.pipeline import cassette, continue_run
from replayer.pipeline.context import RunContext
from replayer.pipeline.plan import NO_CWD, Plan, make_plan
from replayer.sandboxes.base import Backend, Sandbox, SandboxSpec
from replayer.sandboxes.envoverlay import with_env
from replayer.sandboxes.quota import StateDir

logger = logging.getLogger(__name__)
JSON_OPTS = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
RERUNS = "reruns.json"
OnStep = Callable[[int, Rerunner, dict[str, Observation], list[Divergence]], None]
"""Called by `rerun_prefix` once steps 1..n are rerun and before any call of a later step runs (n = 0
before the first), with the rerunner, the fresh observations and the divergences so far: where one
replay takes the state of each boundary it passes (replayer/pipeline/multiboundary.py)."""


# checks: every refusal before anything starts ------------------------------------------------------
def check_cwd(traj: Trajectory) -> str:
    if not traj.cwd:
        named = cwdinfer.workspace_path(c.input for s in traj.steps for c in s.calls)
        if named is None:
            raise PlanRefused(f"{NO_CWD}: pass --cwd")
        raise PlanRefused(
            f"{NO_CWD}, and its calls name {excerpt(named)}, which a default directory would not hold: "
            "pass --cwd DIR, the directory it ran in"
        )
    if not is_absolute_cwd(traj.cwd):
        raise PlanRefused(
            f"the trajectory records the working directory {excerpt(traj.cwd)}, not an absolute path "
            "(anonymised?): pass --cwd DIR, the directory it ran in"
        )
    return traj.cwd


def check_workspace(workspace: Path | None) -> None:
    if workspace is None:
        raise WorkspaceError("--workspace is required for run")
    if not workspace.is_dir():
        raise WorkspaceError(f"workspace {workspace} does not exist or is not a directory")


def sandbox_image(stated: str | None, traj: Trajectory) -> str:
    """--image: an image, `auto` (the environment image the trajectory names), or None (the base image)."""
    if stated != "auto":
        return stated or load_pins().base_image.tag
    if traj.environment_image is None:
        raise PlanRefused("--image auto: the trajectory names no environment image; pass --image IMAGE")
    return traj.environment_image


def check_continuable(adapter: Adapter, traj: Trajectory, cont: ContinueRequest, what: str = "") -> None:
    """The adapter can continue this trajectory with the model the continuation would use."""
    if traj.subagent_of is not None:
        raise PlanRefused(f"{what}cannot continue: {traj.subagent_of.refusal(adapter.name)}")
    refusal = adapter.continuation_refusal(traj, cont.model or adapter.default_model(traj))
    if refusal:
        raise PlanRefused(f"{what}cannot continue: {refusal}")


def check_cassettes(cont: ContinueRequest, traj: Trajectory, after_step: int) -> None:
    """Before anything starts: the cassette to replay is intact and holds this boundary's continuation; the
    one to record does not exist yet."""
    if cont.cassette is not None and cont.record_cassette is not None:
        raise BadInput("--cassette replays a recording and --record-cassette makes one: give one of them")
    if cont.cassette is not None:
        cassette.check_origin(cassette.load(cont.cassette), cont.cassette, traj, after_step)
    if cont.record_cassette is not None:
        cassette.refuse_existing(cont.record_cassette)


def upstream_key(cont: ContinueRequest, adapter: Adapter) -> str:
    """The upstream key the continuation sends ("" when a cassette answers)."""
    return "" if cont.cassette else continue_run.upstream_key(cont, adapter)


def check_continuation(
    adapter: Adapter, traj: Trajectory, cont: ContinueRequest, after_step: int
) -> ContinueRequest:
    """The continuation of a run, checked; a folder of cassettes replaced by this boundary's."""
    check_continuable(adapter, traj, cont)
    if cont.cassette is not None:
        cont = cont.model_copy(update={"cassette": cassette.select(cont.cassette, traj, after_step)})
    check_cassettes(cont, traj, after_step)
    return cont


# version and plan ----------------------------------------------------------------------------------
def resolve_version(adapter: Adapter, traj: Trajectory, request: ReplayRequest) -> VersionRecord:
    version = versions.of_trajectory(adapter, traj, request.agent_version)
    if request.require_verified and version.status != "verified":
        raise PlanRefused(
            f"{adapter.name} {version.version} ({version.source}) is not verified "
            f"(verified: {pinned_version(adapter.name)}); without --require-verified it runs, recorded as unverified"
        )
    return version


def plan(adapter: Adapter, traj: Trajectory, request: ReplayRequest, version: VersionRecord) -> Plan:
    with running_version(adapter.name, version.version):  # a driven version classifies its own tools
        made = make_plan(
            adapter, traj, request.after_step, request.allow_degraded, executes=request.mode == "run"
        )
    logger.debug(
        "plan: %s %s (%s, %s), boundary after step %d, %d call(s)",
        adapter.name,
        version.version,
        version.source,
        version.status,
        made.after_step,
        len(made.calls),
    )
    return made


# the run's state and its sandbox -------------------------------------------------------------------
@dataclass
class Skips:
    """What the copies of container-writable trees left out, over a run."""

    listed: list[str] = field(default_factory=list)
    count: int = 0

    def add(self, report: CopyReport, where: str) -> None:
        self.listed += report.listing(where)
        self.count += report.skipped_count


def materialize_state(
    workspace: Path, limits: SandboxLimits, fallback_parent: Path, skips: Skips
) -> tuple[StateDir, RunDirs]:
    """A fresh state directory with a copy of the workspace and an empty home and bridge folder, and its
    layout; the caller removes it."""
    state = StateDir.create(limits.disk_bytes, fallback_parent=fallback_parent)
    try:
        dirs = RunDirs(root=state.path)
        copied = copy_untrusted(workspace, dirs.workspace, links="keep", limits=limits, what="the workspace")
        skips.add(copied, "workspace")
        for d in (dirs.home, dirs.bridge):
            d.mkdir(parents=True)
    except BaseException:
        state.remove()
        raise
    return state, dirs


def start_sandbox(
    backend: Backend,
    adapter: Adapter,
    traj: Trajectory,
    dirs: RunDirs,
    image: str,
    *,
    run_id: str,
    limits: SandboxLimits,
    labels: dict[str, str],
    bridge: bool,
    extra_binds: dict[str, tuple[Path, bool]] | None = None,
) -> Sandbox:
    """The run's sandbox: the workspace copy at the trajectory's cwd, the adapter's mounts, the bridge's
    socket folder when the agent continues."""
    binds = sandbox_binds(adapter, traj, dirs, bridge, extra_binds)
    logger.debug("starting a sandbox of %s, limits %s", image, limits)
    spec = SandboxSpec(
        image=image, binds=binds, workdir=check_cwd(traj), run_id=run_id, limits=limits, labels=labels
    )
    return backend.start(spec)


def sandbox_binds(
    adapter: Adapter,
    traj: Trajectory,
    dirs: RunDirs,
    bridge: bool,
    extra_binds: dict[str, tuple[Path, bool]] | None = None,
) -> dict[str, tuple[Path, bool]]:
    """A run sandbox's mounts (container path -> (host path, read_only))."""
    binds = {check_cwd(traj): (dirs.workspace, False), **adapter.sandbox_binds(traj, dirs)}
    if bridge:
        dirs.bridge.mkdir(exist_ok=True)
        binds[continue_run.BRIDGE_MOUNT] = (dirs.bridge, False)
    binds.update(extra_binds or {})
    return binds


@dataclass
class Opened:
    """A replay's state and sandbox, as `open_replay` made them (both owned by the run's context)."""

    state: StateDir
    dirs: RunDirs
    box: Sandbox
    sandbox_s: float
    """Seconds the sandbox took to start."""


def open_replay(
    ctx: RunContext,
    backend: Backend,
    adapter: Adapter,
    traj: Trajectory,
    workspace: Path,
    image: str,
    *,
    scratch: Path,
    skips: Skips,
    run_id: str,
    limits: SandboxLimits,
    labels: dict[str, str],
    bridge: bool,
    on_event: OnEvent,
) -> Opened:
    """The opening of every replay (`run -n k`, `run -n a,b`): the state with the workspace's copy (an
    unlimited one goes under `scratch`), then the sandbox over it."""
    state, dirs = materialize_state(workspace, limits, scratch, skips)
    ctx.own(state, state.remove, "the state folder")
    t0 = time.monotonic()
    on_event(Stage("sandbox"))
    box = start_sandbox(
        backend, adapter, traj, dirs, image, run_id=run_id, limits=limits, labels=labels, bridge=bridge
    )
    ctx.own(box, box.stop, "the sandbox")
    return Opened(state, dirs, box, time.monotonic() - t0)


# rerun, rebuild, continue --------------------------------------------------------------------------
def rerun_prefix(
    adapter: Adapter,
    traj: Trajectory,
    box: Sandbox,
    dirs: RunDirs,
    plan: Plan,
    request: ReplayRequest,
    on_event: OnEvent,
    on_step: OnStep | None = None,
) -> tuple[dict[str, Observation], list[Divergence]]:
    """Rerun the planned calls in order; a confinement refusal is waived only with --allow-degraded."""
    observations: dict[str, Observation] = {}
    divergences: list[Divergence] = []
    rerunner = adapter.rerunner(traj, with_env(box, request.agent_env), dirs, request.budgets)
    if isinstance(rerunner, StepwiseRerunner):
        rerunner.kept = frozenset(p.call.id for p in plan.calls if p.kind == "unknown")
    try:
        total = sum(1 for p in plan.calls if p.kind == "rerun")
        on_event(Stage("rerun", total))
        done, passed = 0, -1
        for planned in plan.calls:
            if on_step is not None and planned.step - 1 > passed:
                passed = planned.step - 1
                on_step(passed, rerunner, observations, divergences)
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
                tool = planned.call.tool
                divergences.append(
                    divergence_of(
                        planned.step,
                        planned.call,
                        planned.kind,
                        fresh,
                        adapter.normalizers(tool),
                        partial(adapter.own_text, tool),
                    )
                )
            last, seconds = divergences[-1], time.monotonic() - started
            logger.debug(
                "step %d %s %s: %s (%.2f s)", last.step, last.tool, last.call_id, last.status, seconds
            )
            on_event(CallRerun(last.step, last.call_id, last.tool, last.status, seconds, done, total))
        if on_step is not None:
            on_step(plan.after_step, rerunner, observations, divergences)
    finally:
        rerunner.close()
    return observations, divergences


def write_reruns(path: Path, plan: Plan, observations: dict[str, Observation]) -> None:
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


def rebuild(
    adapter: Adapter, traj: Trajectory, plan: Plan, observations: dict[str, Observation], out: Path
) -> Rebuild:
    """The native session prefix under out/native, its expected prefix and continuation facts beside it."""
    made = adapter.rebuild(traj, plan.after_step, observations, out / "native")
    write_bytes_atomic(out / "expected_prefix.json", orjson.dumps(made.expected_prefix, option=JSON_OPTS))
    write_bytes_atomic(
        out / "continuation.json", orjson.dumps(made.continuation.model_dump(mode="json"), option=JSON_OPTS)
    )
    return made


def continue_agent(c: continue_run.Continuing) -> ContinuationResult:
    """The pinned agent, continued in the sandbox through the bridge."""
    c.on_event(Stage("continue"))
    logger.debug("continuing %s through the bridge to %s", c.adapter.name, c.request.upstream)
    return continue_run.run(c)


def export_state(dirs: RunDirs, out: Path, limits: SandboxLimits, skips: Skips) -> None:
    """The final workspace and agent home, copied to out/state without trusting anything in them."""
    exports: list[tuple[str, Links]] = [("workspace", "keep"), ("home", "skip")]
    for place, links in exports:
        final = copy_untrusted(
            dirs.root / place, out / "state" / place, links=links, limits=limits, what=f"the {place}"
        )
        skips.add(final, f"state/{place}")
