"""The one place a ReplayResult is assembled: `run -n K`, each boundary of `run -n a,b` (continued or not)
and a prepare all end here, so a result says the same things whichever way the replay went."""

from __future__ import annotations

import errno
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import orjson

from replayer.adapters.base import Adapter, Rebuild
from replayer.floor.divergence import workspace_hint
from replayer.floor.errors import OutputError, ReplayError, SandboxError
from replayer.floor.io import OutputDir, write_bytes_atomic
from replayer.floor.limits import SandboxLimits
from replayer.floor.pins import load_pins
from replayer.floor.release import __version__
from replayer.floor.requests import GitCheckout, ReplayRequest
from replayer.floor.results import ContinuationResult, Divergence, ReplayResult, SandboxRecord, Timings
from replayer.floor.trajectory import Trajectory
from replayer.floor.versions import InstalledBundle, Pins, VersionRecord
from replayer.pipeline.plan import Plan
from replayer.pipeline.steps import JSON_OPTS
from replayer.sandboxes.base import Sandbox

logger = logging.getLogger(__name__)
Outcome = ReplayResult | ReplayError
"""A boundary's result, or why it has none (its output directory is then not there)."""
_OUTPUT_ERRNOS = {errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EIO, errno.EFBIG}


def commit(out: OutputDir, result: ReplayResult) -> None:
    """`result` written as the output's result.json, and the output committed whole."""
    write_bytes_atomic(
        out.tmp / "result.json", orjson.dumps(result.model_dump(mode="json"), option=JSON_OPTS)
    )
    out.commit()
    logger.debug("wrote %s (boundary %d)", result.request.out, result.after_step)


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


def failed(exc: ReplayError | OSError, out: OutputDir, request: ReplayRequest) -> ReplayError:
    """The outcome of a boundary that met `exc`, its output discarded: the refusal, or what a full quota or
    an unwritable output means (`os_error`); any other OSError is raised again."""
    out.discard()
    if isinstance(exc, ReplayError):
        return exc
    known = os_error(exc, request)
    if known is None:
        raise exc
    return known


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


@dataclass
class Replayed:
    """What every boundary of one replay shares: the trajectory, the version that replays it, where it
    ran, and what the run took before the sandbox."""

    adapter: Adapter
    traj: Trajectory
    version: VersionRecord
    started: float
    """When the run began (time.monotonic()): a result's total counts from there."""
    parse_s: float
    image: str | None = None
    """None: a prepare (no sandbox)."""
    checkout: GitCheckout | None = None
    installed: list[InstalledBundle] = field(default_factory=list)
    install_s: float = 0.0
    workspace_s: float = 0.0


@dataclass
class Done:
    """What the steps produced for one boundary."""

    rebuild: Rebuild
    divergences: list[Divergence]
    rebuild_s: float
    sandbox_s: float = 0.0
    rerun_s: float = 0.0
    image_id: str | None = None
    container: str | None = None
    continued: ContinuationResult | None = None
    sandbox: SandboxRecord | None = None


def used_up(state_used_up: Callable[[], bool], box: Sandbox) -> list[str]:
    """Where the sandbox used its disk quota up so far ("state", "container")."""
    return [p for p, full in (("state", state_used_up), ("container", box.disk_used_up)) if full()]


def sandbox_record(
    limits: SandboxLimits,
    box: Sandbox,
    state_limited: bool,
    disk_used_up: list[str],
    skipped: list[str],
    count: int,
) -> SandboxRecord:
    return SandboxRecord(
        limits=limits,
        capabilities_dropped=box.dropped_capabilities,
        state_disk_limited=state_limited,
        container_disk_limited=box.disk_limited,
        disk_used_up=disk_used_up,
        skipped=skipped,
        skipped_count=count,
    )


def disk_hint(used_up: list[str], limits: SandboxLimits) -> str | None:
    """A word when the sandbox used a disk quota up: what then failed inside may show only an exit code."""
    if not used_up:
        return None
    places = " and ".join(
        {"state": "the workspace and agent home", "container": "its own file system"}[p] for p in used_up
    )
    return (
        f"the sandbox used up its disk limit ({limits.disk_bytes >> 20} MiB) in {places}: commands that "
        "wrote there failed with `Disk quota exceeded`, and a rerun may show only its exit code "
        "(raise it with --limits disk=)"
    )


def assemble(request: ReplayRequest, plan: Plan, replayed: Replayed, done: Done, out: Path) -> ReplayResult:
    """Boundary `plan.after_step`'s result (`out`: its output's directory, which native files are named in)."""
    traj = replayed.traj
    used = done.sandbox.disk_used_up if done.sandbox is not None else []
    workspace = workspace_hint(done.divergences)
    # what the agent's CLI does by itself, unless the workspace already explains the differences (an `ls` of
    # an empty folder prints nothing, as an output the CLI cut would)
    cli = None if workspace else replayed.adapter.rerun_hint(done.divergences)
    hints = [workspace, cli, disk_hint(used, request.limits)]
    return ReplayResult(
        request=request.reported(),
        pins=pins_for(replayed.adapter),
        **traj.reported(),
        image=replayed.image,
        image_id=done.image_id,
        container=done.container,
        after_step=plan.after_step,
        boundary_call_ids=plan.boundary_call_ids,
        divergences=done.divergences,
        hints=[h for h in hints if h],
        degradations=plan.degradations,
        native_files=[str(p.relative_to(out)) for p in done.rebuild.native_files],
        boundary_model=done.rebuild.model,
        continuation=done.continued,
        sandbox=done.sandbox,
        timings=Timings(
            parse_s=replayed.parse_s,
            install_s=replayed.install_s,
            workspace_s=replayed.workspace_s,
            sandbox_start_s=done.sandbox_s,
            rerun_s=done.rerun_s,
            rebuild_s=done.rebuild_s,
            continue_s=done.continued.duration_s if done.continued else 0.0,
            total_s=time.monotonic() - replayed.started,
        ),
        version=replayed.version,
        workspace_checkout=replayed.checkout,
        installed=replayed.installed,
    )
