"""One compare run, in a process of its own: a container from the boundary snapshot, the variant's patch,
the continuation through its own bridge, the check, the workspace diff and the timeline.

`python -m replayer.pipeline.fork JOB.json PARENT_PID` is started ahead of its turn (replayer/pipeline/forkpool.py): it
loads what it needs and, when the boundary is not ready yet, starts its container from the replay's image
over an empty slot (sandboxes/slots.py). Then it reads two lines on stdin. The first (`BoundaryReady`)
says the snapshot is ready: the run makes its own copy of the boundary state (a btrfs clone,
sandboxes/quota.py) and mounts it into the pre-started container's slot, which applies the boundary's own
file-system changes (replayer/pipeline/rootfs.py); where that cannot be done it starts its container from the
snapshot image instead (`RunRecord.fork_path`, `fork_fallback`). Then it applies the patch. The second (`Turn`) says a slot is free: the agent continues. End of
input before either (the compare ended or no longer needs the run) ends it like SIGTERM/SIGINT do:
cleanly, container and state removed, no record written. Otherwise it writes RUN_DIR/run.json (a
RunRecord) atomically; a run that cannot be carried out is recorded as failed, never raised.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar, cast

import orjson
from pydantic import BaseModel, ConfigDict

from replayer.adapters.base import Adapter, Rebuild
from replayer.floor import hostproc, signals
from replayer.floor.compare_results import CheckResult, RunRecord, RunStatus
from replayer.floor.errors import Interrupted, PatchFailed, ReplayError, last_line
from replayer.floor.io import write_bytes_atomic
from replayer.floor.limits import SandboxLimits
from replayer.floor.output_budget import Earlier, OutputBudget, OverBudget, SharedTotal, tree_bytes
from replayer.floor.pins import running_version
from replayer.floor.requests import ContinueRequest, Variant
from replayer.floor.results import ContinuationResult, ReplayResult, TimelineEntry
from replayer.floor.rundirs import RunDirs
from replayer.floor.safecopy import copy_untrusted, shown
from replayer.floor.trajectory import Trajectory
from replayer.floor.versions import Pins
from replayer.pipeline import steps, timeline
from replayer.pipeline.boundary import fork_state
from replayer.pipeline.context import RunContext
from replayer.pipeline.continue_run import Continuing, continuation_error
from replayer.pipeline.oracle import is_file, workspace_changes, workspace_state
from replayer.pipeline.rootfs import ROOTFS_MOUNT, WAITER, RootfsDiff
from replayer.sandboxes import engines
from replayer.sandboxes.base import LABEL, Backend, LayeredSandbox, Runtime, Sandbox, SandboxSpec
from replayer.sandboxes.quota import StateDir
from replayer.sandboxes.slots import CONTROL_MOUNT, Slot

Line = TypeVar("Line", bound=BaseModel)
PATCH_MOUNT = "/run/replayer-patch"
CHECK_OUTPUT_BYTES = 64 * 1024
DIFF_BYTES = 256 * 1024
DIFF_FILE_BYTES = 4 << 20
"""The largest file a side given to `diff` (a larger one is named as changed)."""
DIFF_S = 120.0
"""The most time the workspace diff takes (the two reads, then the files' diffs)."""
COMPARE_LABEL = f"{LABEL}.compare"
_APPLY_TIMEOUT_S = 120.0


class ForkJob(BaseModel):
    model_config = ConfigDict(extra="forbid")
    compare_id: str
    trajectory: Path
    task: str | None
    cwd: str | None
    session: str | None
    replay_dir: Path
    """The replay's result directory: expected_prefix.json, continuation.json, native/."""
    boundary_state: Path
    """workspace/ and home/ at the boundary (what the workspace diff starts from)."""
    run_dir: Path
    dir: str
    """run_dir relative to the compare output."""
    variant: Variant
    repeat: int
    continuation: ContinueRequest
    check: str | None
    check_timeout_s: float
    limits: SandboxLimits = SandboxLimits()
    agent: str
    agent_version: str
    """The version the run continues: the variant's `version`, else the one the replay ran."""
    after_step: int
    prestart_image: str | None = None
    """The image the replay's container runs, when the boundary is not ready yet: the run's container
    starts from it ahead, over a slot. None: it starts at the boundary, from the snapshot image."""
    rootfs_dir: Path | None = None
    """Where compare writes the boundary's own file-system changes (replayer/pipeline/rootfs.py)."""
    output_total: Path | None = None
    """The compare's total output budget, which the run draws on (`SharedTotal`) before it writes its
    workspace and, once it ended, what else it wrote; None: not bounded as a whole."""


class BoundaryReady(BaseModel):
    """The first line a fork reads: the snapshot is ready."""

    model_config = ConfigDict(extra="forbid")
    image: str
    """The snapshot image."""
    sealed: Path | None
    """The sealed boundary state to clone (replayer/pipeline/boundary.py); None: copy `boundary_state`."""
    at: float
    """When it was ready (time.time())."""
    rootfs: RootfsDiff | str | None = None
    """The boundary container's own file-system changes (written in ForkJob.rootfs_dir), or why a
    pre-started container cannot be given them (it then starts from `image`)."""


class Turn(BaseModel):
    """The second line: a slot is free, the run goes on."""

    model_config = ConfigDict(extra="forbid")
    at: float
    """When the slot was given (time.time())."""


def receive(model: type[Line]) -> Line:
    line = sys.stdin.buffer.readline()
    if not line:
        raise Interrupted("the compare no longer needs this run")
    return model.model_validate_json(line)


def middle_cut(data: bytes, limit: int) -> tuple[str, bool]:
    """`data` as text, its middle replaced by a marker when it is longer than `limit` bytes."""
    if len(data) <= limit:
        return data.decode("utf-8", "replace"), False
    head, tail = data[: limit // 4], data[-(limit - limit // 4) :]
    marker = f"\n[... {len(data) - len(head) - len(tail)} bytes cut ...]\n".encode()
    return (head + marker + tail).decode("utf-8", "replace"), True


def run_check(box: Runtime, command: str, cwd: str, timeout_s: float) -> CheckResult:
    res = box.exec(["bash", "-c", "exec 2>&1; " + command], workdir=cwd, timeout_s=timeout_s)
    output, truncated = middle_cut(res.stdout + res.stderr, CHECK_OUTPUT_BYTES)
    return CheckResult(
        command=command,
        exit_code=res.exit_code,
        passed=res.exit_code == 0,
        timed_out=res.timed_out,
        output=output,
        output_bytes=len(res.stdout) + len(res.stderr),
        truncated=truncated or res.output_truncated,
        duration_s=res.duration_s,
    )


def workspace_diff(before: Path, after: Path, limits: SandboxLimits) -> tuple[str, bool]:
    """The unified diff of two workspace copies (`.git` left out), paths shown as a/ and b/, no timestamps;
    and whether a bound cut it. The changed files are found by the oracle's bounded, hole-aware digests
    (replayer/pipeline/oracle.py); only a changed regular file of at most DIFF_FILE_BYTES a side is given to
    `diff`, within DIFF_S in all; the rest are named, and what was left out is said in the text."""
    deadline = time.monotonic() + DIFF_S
    old, new = workspace_state(before, limits, DIFF_S), workspace_state(after, limits, DIFF_S)
    notes = [f"[{cut}]\n" for cut in dict.fromkeys(c for c in (old.cut, new.cut) if c)]
    parts: list[str] = []
    size = 0
    changed = workspace_changes(old.entries, new.entries)
    for n, (path, now) in enumerate(changed.items()):
        if size > DIFF_BYTES or time.monotonic() > deadline:
            notes.append(f"[{len(changed) - n} more changed entries not shown: the diff's bound]\n")
            break
        part = _file_diff(before, after, path, old.entries.get(path), now, deadline)
        parts.append(part)
        size += len(part)
    text, cut = middle_cut("".join(parts).encode(), DIFF_BYTES)
    return text + "".join(notes), cut or bool(notes)


def _file_diff(
    before: Path, after: Path, path: str, was: str | None, now: str | None, deadline: float
) -> str:
    """One changed entry: `diff -u` of two regular files (either may be missing), else a line naming it."""
    kinds = ["missing" if v is None else "file" if is_file(v) else v.partition(":")[0] for v in (was, now)]
    a, b = f"a/{shown(path)}", f"b/{shown(path)}"
    header = f"diff {a} {b}\n"
    if "link" in kinds and set(kinds) <= {"link", "missing"}:
        return header + f"Symbolic links {a} and {b} differ\n"
    if not set(kinds) <= {"file", "missing"}:
        return header + f"File {a}: {kinds[0]}; file {b}: {kinds[1]}\n"
    sides = [
        str(root / path) if kind == "file" else os.devnull
        for root, kind in zip((before, after), kinds, strict=True)
    ]
    big = any(side != os.devnull and os.lstat(side).st_size > DIFF_FILE_BYTES for side in sides)
    if big or any(v and v.startswith("sparse:") for v in (was, now)):
        return header + f"Files {a} and {b} differ (not diffed: sparse or above {DIFF_FILE_BYTES} bytes)\n"
    try:
        proc = hostproc.run(
            ["diff", "-u", "--label", a, "--label", b, "--", *sides],
            capture_output=True,
            timeout=max(0.1, deadline - time.monotonic()),
        )
    except hostproc.TimeoutExpired:
        return header + f"Files {a} and {b} differ (not diffed: the diff's time bound)\n"
    if proc.returncode > 1:
        return header + f"diff failed: {last_line(proc.stderr)}\n"
    return header + proc.stdout.decode("utf-8", "backslashreplace")


def _rebuild_of(replay_dir: Path, adapter: Adapter) -> Rebuild[Any]:
    """The replay's rebuild as its directory records it (what `steps.rebuild` returned in its process)."""
    result = ReplayResult.model_validate_json((replay_dir / "result.json").read_bytes())
    return Rebuild(
        native_files=[replay_dir / p for p in result.native_files],
        expected_prefix=orjson.loads((replay_dir / result.expected_prefix).read_bytes()),
        agent_home=replay_dir / "native" / "home",
        continuation=adapter.load_continuation(replay_dir / "continuation.json"),
        model=result.boundary_model,
    )


def _patch_bind(job: ForkJob, dirs: RunDirs) -> dict[str, tuple[Path, bool]]:
    patch = job.variant.spec.patch
    if patch is None:
        return {}
    folder = dirs.work("patch")
    (folder / "patch.diff").write_bytes(patch.read_bytes())
    return {PATCH_MOUNT: (folder, True)}


def _prepare(
    job: ForkJob, adapter: Adapter, traj: Trajectory, boundary: BoundaryReady, dirs: RunDirs, backend: Backend
) -> Sandbox:
    """The run's container from the snapshot image, over its own state (the patch mounted, not applied)."""
    return steps.start_sandbox(
        backend,
        adapter,
        traj,
        dirs,
        boundary.image,
        run_id=f"{job.compare_id}-{uuid.uuid4().hex[:6]}",
        limits=job.limits,
        labels={COMPARE_LABEL: job.compare_id},
        bridge=True,
        extra_binds=_patch_bind(job, dirs),
    )


class Prestarted:
    """A run's container started before the boundary over its slot's empty folders."""

    def __init__(self, slot: Slot, box: LayeredSandbox, folders: list[str]):
        self.slot = slot
        self.box = box
        self.folders = folders
        """The slot folders its writable mounts show (where the state's are mounted)."""
        self.mount_points = box.mount_points()

    @classmethod
    def start(cls, job: ForkJob, adapter: Adapter, traj: Trajectory, slot: Slot) -> Prestarted:
        """Its container from `job.prestart_image` over `slot` (the diff's folder read-only beside)."""
        assert job.prestart_image is not None and job.rootfs_dir is not None
        dirs = RunDirs(root=slot.path)
        extra = {
            **_patch_bind(job, dirs),
            ROOTFS_MOUNT: (job.rootfs_dir, True),
            CONTROL_MOUNT: (slot.make_control(), True),
        }
        binds = steps.sandbox_binds(adapter, traj, dirs, True, extra)
        propagated = {t: src for t, (src, ro) in binds.items() if not ro and src.is_relative_to(slot.path)}
        for src in propagated.values():
            src.mkdir(parents=True, exist_ok=True)
        spec = SandboxSpec(
            image=job.prestart_image,
            binds=binds,
            workdir=steps.check_cwd(traj),
            run_id=f"{job.compare_id}-{uuid.uuid4().hex[:6]}",
            limits=job.limits,
            labels={COMPARE_LABEL: job.compare_id},
            propagated=frozenset(propagated),
            command=["bash", "-c", WAITER],
        )
        # a prestart image is only made on an engine that prestarts (verbs/compare.py `_rootfs`)
        box = cast(LayeredSandbox, engines.chosen().start(spec))
        try:
            return cls(slot, box, [str(src.relative_to(slot.path)) for src in propagated.values()])
        except BaseException:
            box.stop()
            raise

    def attach(self, boundary: BoundaryReady, state: StateDir) -> str | None:
        """Mount `state` into the container and apply the boundary's own file-system changes; why not
        (nothing mounted then) or None."""
        rootfs = boundary.rootfs
        if not isinstance(rootfs, RootfsDiff):
            return rootfs or "the boundary's file-system changes are unknown"
        if rootfs.base_image != self.box.image_id:
            return "the boundary container ran another image than the pre-started one"
        conflict = rootfs.conflict(self.mount_points)
        if conflict is not None:
            return conflict
        try:
            self.slot.attach(state.path, self.folders)
            answer = self.slot.tell("skip" if rootfs.empty else "apply", _APPLY_TIMEOUT_S)
        except OSError as exc:
            return f"the state could not be mounted into the pre-started container: {exc}"
        if answer != "ok":
            return f"the boundary's file-system changes did not apply: {answer or 'no answer'}"
        return None

    def discard(self) -> None:
        self.box.stop()
        self.slot.release()


def _prestart(job: ForkJob, adapter: Adapter, traj: Trajectory, slot: Slot | None) -> Prestarted | str:
    if slot is None:
        return "no slot here (root and a btrfs FS_ROOT are needed)"
    try:
        return Prestarted.start(job, adapter, traj, slot)
    except (ReplayError, OSError) as exc:
        return f"the container did not pre-start: {exc}"


def _apply_patch(box: Runtime, patch: Path, cwd: str) -> None:
    applied = box.exec(["git", "apply", "--verbose", f"{PATCH_MOUNT}/patch.diff"], workdir=cwd, timeout_s=120)
    if applied.exit_code != 0:
        why = last_line(applied.stderr) or last_line(applied.stdout) or "git apply failed"
        raise PatchFailed(f"the patch {patch} does not apply: {why}")


@dataclass
class _Record:
    """What a run found so far (its RunRecord once it ends)."""

    variant: str
    repeat: int
    dir: str
    status: RunStatus = "failed"
    error_kind: str | None = None
    error: str | None = None
    pins: Pins | None = None
    container: str | None = None
    state_disk_limited: bool | None = None
    ready_s: float | None = None
    fork_path: Literal["prestarted", "cold"] | None = None
    fork_fallback: str | None = None
    patch_diff: str | None = None
    patch_diff_truncated: bool = False
    fork_s: float | None = None
    continuation: ContinuationResult | None = None
    continuation_error: str | None = None
    check: CheckResult | None = None
    timeline: list[TimelineEntry] = field(default_factory=list)
    workspace_diff: str = ""
    workspace_diff_truncated: bool = False
    turn_at: float | None = None
    """When the run's turn came (time.time()): its wall time counts from there."""

    def failed(self, kind: str, error: str) -> None:
        self.status, self.error_kind, self.error = "failed", kind, error

    def record(self) -> RunRecord:
        wall_s = time.time() - self.turn_at if self.turn_at is not None else 0.0
        found = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "turn_at"}
        return RunRecord(**found, wall_s=wall_s)


def run(
    job: ForkJob,
    boundary_line: Callable[[], BoundaryReady],
    turn_line: Callable[[], Turn],
    backend: Backend | None = None,
) -> RunRecord:
    """The run, told by `boundary_line` that the snapshot is ready and by `turn_line` that it may go on;
    `backend` starts its sandbox (default: Docker)."""
    record = _Record(job.variant.name, job.repeat, job.dir)
    budget = _budget(job)
    try:
        with RunContext() as ctx:
            _carry_out(job, ctx, record, boundary_line, turn_line, backend, budget)
    except Interrupted:
        raise
    except OverBudget as exc:  # what it wrote is not kept: only its record says why
        _drop_outputs(job.run_dir)
        record.failed(exc.kind, str(exc))
    except ReplayError as exc:
        record.failed(exc.kind, str(exc))
    except Exception as exc:  # recorded, so that one broken run never stops the others
        record.failed("internal", f"{type(exc).__name__}: {exc}")
    finally:
        if budget is not None:
            budget.close()
    return record.record()


KEPT_FILES = ("fork.log", "job.json")
"""What a run refused by the output budget keeps: its log, and the job its compare reads back."""


def _budget(job: ForkJob) -> OutputBudget | None:
    if job.output_total is None:
        return None
    shared = SharedTotal(job.output_total, "the compare's", "--limits output=")
    return OutputBudget(job.limits.output_total(), shared, after="runs")


def _drop_outputs(run_dir: Path) -> None:
    for entry in run_dir.iterdir() if run_dir.is_dir() else ():
        if entry.name in KEPT_FILES:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


def _carry_out(
    job: ForkJob,
    ctx: RunContext,
    record: _Record,
    boundary_line: Callable[[], BoundaryReady],
    turn_line: Callable[[], Turn],
    backend: Backend | None,
    budget: OutputBudget | None = None,
) -> None:
    """The run's steps, its resources owned by `ctx`, what it found in `record`; what it writes to its
    directory charged to `budget`, its copies before they are written, the rest before it says ok."""
    where = f"run {job.variant.name}/{job.repeat}"
    from replayer.pipeline.engine import load
    from replayer.pipeline.result import pins_for

    adapter, traj = load(job.trajectory, job.task, job.cwd, job.session)
    record.pins = pins_for(adapter)
    assert traj.cwd
    pre: Prestarted | str = "the boundary was ready when the run's process started"
    if job.prestart_image is not None and backend is None:
        with signals.deferred():  # made and known, or not made: a SIGTERM never leaks them
            slot = Slot.create()
            if slot is not None:
                ctx.own(slot, slot.release, "the slot")
            pre = _prestart(job, adapter, traj, slot)
            if isinstance(pre, Prestarted):
                ctx.own(pre, pre.discard, "the pre-started container")
    boundary = boundary_line()
    told = time.time()
    with signals.deferred():
        state_dir = fork_state(boundary.sealed, job.boundary_state, job.limits, fallback_parent=job.run_dir)
        ctx.own(state_dir, state_dir.remove, "the run's state")
    dirs = RunDirs(root=state_dir.path)
    box: Sandbox
    if isinstance(pre, Prestarted):
        # once the state is mounted into the slot, the container and its mounts go before the state
        ctx.own(pre, pre.discard, "the pre-started container over the state")
        why = pre.attach(boundary, state_dir)
        if why is None:
            box = pre.box
        else:
            ctx.release(pre)
            pre = why
    if isinstance(pre, str):
        box = _prepare(job, adapter, traj, boundary, dirs, backend or engines.chosen())
        ctx.own(box, box.stop, "the run's container")
    record.container = box.name
    record.state_disk_limited = state_dir.limited
    record.ready_s = time.time() - told
    record.fork_path = "cold" if isinstance(pre, str) else "prestarted"
    record.fork_fallback = pre if isinstance(pre, str) else None
    state = state_dir.path
    patch = job.variant.spec.patch
    patched = job.run_dir / "patched-workspace"
    ctx.own(patched, lambda: shutil.rmtree(patched, ignore_errors=True), "the patched workspace")
    if patch is not None:
        _apply_patch(box, patch, traj.cwd)
        # the agent's edits are diffed against this, the patch's own against the boundary
        _copy_workspace(state, patched, job.limits, "the patched workspace", Earlier(None, budget, where))
        record.patch_diff, record.patch_diff_truncated = workspace_diff(
            job.boundary_state / "workspace", patched, job.limits
        )
    record.turn_at = max(boundary.at, turn_line().at)
    record.fork_s = time.time() - record.turn_at  # ready long before the turn: the line's own latency
    rebuild = _rebuild_of(job.replay_dir, adapter)
    key = steps.upstream_key(job.continuation, adapter)
    record.continuation = steps.continue_agent(
        Continuing(
            box, adapter, traj, rebuild, job.continuation, dirs, job.run_dir, key, job.after_step, job.limits
        )
    )
    failure = continuation_error(record.continuation, job.run_dir)
    if failure is not None:  # its paths named from the compare's output, where the run dir ends up
        record.continuation_error = f"{failure.kind}: {failure}".replace(str(job.run_dir), record.dir)
    if job.check:
        record.check = run_check(box, job.check, traj.cwd, job.check_timeout_s)
    ctx.release(pre if isinstance(pre, Prestarted) else box)
    exported = job.run_dir / "state" / "workspace"
    _copy_workspace(state, exported, job.limits, "the workspace", Earlier(None, budget, where))
    launched = record.continuation.model if record.continuation else None
    record.timeline = timeline.continued(adapter, job.run_dir, rebuild.expected_prefix, launched)
    record.workspace_diff, record.workspace_diff_truncated = workspace_diff(
        patched if patch is not None else job.boundary_state / "workspace", exported, job.limits
    )
    if budget is not None:  # the rest: its logs, sessions, bridge log, a state kept in its directory
        budget.take(tree_bytes(job.run_dir) - budget.used, where)
    record.status = "ok"


def _copy_workspace(state: Path, dest: Path, limits: SandboxLimits, what: str, earlier: Earlier) -> None:
    """The run's workspace copied out of its state, each file charged to `earlier`'s budget before it is
    written."""
    copy_untrusted(state / "workspace", dest, links="keep", limits=limits, what=what, earlier=earlier)


def main(job_path: str, parent: int) -> int:
    signals.install()
    signals.die_with_parent(parent, signal.SIGTERM)  # a compare killed with -9 leaves no fork running
    job = ForkJob.model_validate_json(Path(job_path).read_bytes())
    try:
        with running_version(job.agent, job.agent_version):
            record = run(job, lambda: receive(BoundaryReady), lambda: receive(Turn))
    except Interrupted:
        return Interrupted.exit_code
    write_bytes_atomic(job.run_dir / "run.json", orjson.dumps(record.model_dump(mode="json")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
