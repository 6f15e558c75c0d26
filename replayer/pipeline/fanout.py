"""Many continuations, one prefix: `run -n 3,7 --continue` (and a batch's continue jobs of one trajectory)
replay the steps once (replayer/pipeline/multiboundary.py) and fork each boundary's continuation from
the state the replay passed there.

At each boundary the replay's container is committed as a snapshot image (its own file system: what the
reruns changed outside the mounts) and the boundary's workspace and rebuilt agent home are copied into a
state of the boundary's own (`take`). Once the replay is done, each boundary continues in a container of
its own, started from its snapshot image over that state, through its own bridge, and its result
directory is written as `run -n K --continue` writes it (`continue_from`): result.json with the
continuation, agent/, bridge/, continued/, and state/ as the continuation left it.

What differs from a standalone continuation: the processes the prefix left running are not in the fork
(a container starts from an image with none), so `continuation.leftovers` counts none.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from replayer.adapters.base import Adapter
from replayer.floor.errors import SandboxError
from replayer.floor.events import OnEvent
from replayer.floor.io import OutputDir
from replayer.floor.limits import SandboxLimits
from replayer.floor.requests import ReplayRequest
from replayer.floor.results import ReplayResult
from replayer.floor.rundirs import RunDirs
from replayer.floor.safecopy import copy_untrusted
from replayer.floor.trajectory import Trajectory
from replayer.pipeline import steps
from replayer.pipeline.context import RunContext
from replayer.pipeline.continue_run import Continuing
from replayer.pipeline.plan import Plan
from replayer.pipeline.result import Done, Replayed, assemble, sandbox_record, used_up
from replayer.sandboxes.base import LABEL, Backend, Sandbox
from replayer.sandboxes.quota import StateDir

FANOUT_LABEL = f"{LABEL}.boundary"
"""On the snapshot images of one replay's boundaries (value: the replay's id), removed when it ends."""
logger = logging.getLogger(__name__)


@dataclass
class Forked:
    """A boundary whose prefix is written (not yet committed) and whose continuation forks from its
    snapshot."""

    request: ReplayRequest
    """The boundary's request, with its own continuation (a cassette of a folder chosen for it)."""
    out: OutputDir
    plan: Plan
    done: Done
    """What the replay made for it (its result, without the continuation)."""
    image: str | None
    """The snapshot image of the replay's container at the boundary (None: it continues in place, in the
    replay's own container)."""
    state: StateDir
    """The boundary's own workspace and agent home (with the rebuilt session)."""
    skips: steps.Skips


def own_images(keep: RunContext, box: Sandbox, replay_id: str) -> None:
    """The snapshot images `take` will make of `box`, removed when `keep` ends."""
    keep.own(replay_id, lambda: box.remove_snapshots(f"{FANOUT_LABEL}={replay_id}"), "the snapshot images")


def take(
    keep: RunContext,
    box: Sandbox,
    replay_id: str,
    after_step: int,
    dirs: RunDirs,
    native_home: Path,
    scratch: Path,
    limits: SandboxLimits,
) -> tuple[str, StateDir]:
    """The boundary's snapshot image and its own state: the workspace as the replay has it now, the agent
    home as rebuilt (`native_home`); the state owned by `keep`, the context of the whole replay (an
    unlimited state goes under `scratch`)."""
    tag = f"sandbox-replayer/snapshot:{replay_id}-after-{after_step}"
    image = snapshot(box, tag, {FANOUT_LABEL: replay_id})
    state = StateDir.create(limits.disk_bytes, fallback_parent=scratch)
    keep.own(state, state.remove, f"the state of boundary {after_step}")
    mine = RunDirs(root=state.path)
    copy_untrusted(dirs.workspace, mine.workspace, links="keep", limits=limits, what="the workspace")
    copy_untrusted(native_home, mine.home, links="skip", limits=limits, what="the agent home")
    mine.bridge.mkdir(parents=True, exist_ok=True)
    return image, state


SNAPSHOT_TRIES = 3
"""The container is paused for the commit mid-replay, with the rerunner's processes alive: the kernel's
freezer can fail to stop them at once (`unable to freeze`), and a moment later succeed."""


def snapshot(box: Sandbox, tag: str, labels: dict[str, str]) -> str:
    """`box` committed as the image `tag` (labelled `labels`) while a replay runs in it, retried where
    the freezer fails at once (`SNAPSHOT_TRIES`)."""
    for attempt in range(1, SNAPSHOT_TRIES + 1):
        try:
            return box.snapshot(tag, labels=labels)
        except SandboxError as exc:
            if attempt == SNAPSHOT_TRIES or "refused" in str(exc):
                raise
            logger.debug("snapshot %s failed (%s), again", tag, exc)
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def start(fork: Forked, adapter: Adapter, traj: Trajectory, backend: Backend) -> Sandbox:
    """The boundary's container, from its snapshot image over its own state, its bridge folder mounted
    (started ahead of its turn, while the boundary before it continues)."""
    assert fork.image is not None, "a boundary that continues in place has no container of its own"
    return steps.start_sandbox(
        backend,
        adapter,
        traj,
        RunDirs(root=fork.state.path),
        fork.image,
        run_id=uuid.uuid4().hex[:12],
        limits=fork.request.limits,
        labels=fork.request.labels,
        bridge=True,
    )


def continue_from(
    fork: Forked, box: Sandbox, replayed: Replayed, key: str, on_event: OnEvent
) -> ReplayResult:
    """The boundary's continuation in its own container `box` (`start`); its result as `run -n K --continue`
    writes it."""
    request, tmp, limits = fork.request, fork.out.tmp, fork.request.limits
    cont = request.continuation
    assert cont is not None
    dirs = RunDirs(root=fork.state.path)
    with RunContext() as ctx:
        ctx.own(box, box.stop, "the boundary's container")
        continued = steps.continue_agent(
            Continuing(
                box,
                replayed.adapter,
                replayed.traj,
                fork.done.rebuild,
                cont,
                dirs,
                tmp,
                key,
                fork.plan.after_step,
                limits,
                on_event,
            )
        )
        used = used_up(fork.state.used_up, box)
        ctx.release(box)
    skips = fork.skips
    steps.export_state(dirs, tmp, limits, skips)
    record = sandbox_record(limits, box, fork.state.limited, used, skips.listed, skips.count)
    done = dataclasses.replace(fork.done, continued=continued, sandbox=record)
    return assemble(request, fork.plan, replayed, done, tmp)
