"""One compare run, in a process of its own: a container from the boundary snapshot, the variant's patch,
the continuation through its own bridge, the check, the workspace diff and the timeline.

`python -m replayer.fork JOB.json PARENT_PID` is started ahead of its turn (replayer/forkpool.py): it
loads what it needs, then reads two lines on stdin. The first (`BoundaryReady`) says the snapshot is
ready: the run makes its own copy of the boundary state (a btrfs clone, sandboxes/quota.py) and starts its
container, then applies the patch. The second (`Turn`) says a slot is free: the agent continues. End of
input before either (the compare ended or no longer needs the run) ends it like SIGTERM/SIGINT do:
cleanly, container and state removed, no record written. Otherwise it writes RUN_DIR/run.json (a
RunRecord) atomically; a run that cannot be carried out is recorded as failed, never raised.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict

from adapters.base import Adapter, Rebuild
from replayer import signals, steps, timeline
from replayer.boundary import fork_state
from replayer.errors import Interrupted, PatchFailed, ReplayError
from replayer.events import ignore
from replayer.io import write_bytes_atomic
from replayer.models import (
    CheckResult,
    ContinueRequest,
    ReplayResult,
    RunRecord,
    SandboxLimits,
    Trajectory,
    Variant,
)
from replayer.pins import running_version
from replayer.rundirs import RunDirs
from replayer.safecopy import copy_untrusted
from sandboxes.base import Backend, Runtime, Sandbox
from sandboxes.docker import LABEL
from sandboxes.quota import StateDir

Line = TypeVar("Line", bound=BaseModel)
PATCH_MOUNT = "/run/replayer-patch"
CHECK_OUTPUT_BYTES = 64 * 1024
DIFF_BYTES = 256 * 1024
COMPARE_LABEL = f"{LABEL}.compare"


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


class BoundaryReady(BaseModel):
    """The first line a fork reads: the snapshot is ready."""

    model_config = ConfigDict(extra="forbid")
    image: str
    """The snapshot image."""
    sealed: Path | None
    """The sealed boundary state to clone (replayer/boundary.py); None: copy `boundary_state`."""
    at: float
    """When it was ready (time.time())."""


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


def workspace_diff(before: Path, after: Path) -> tuple[str, bool]:
    """`diff -ruN` of two workspace copies (`.git` left out), paths shown as a/ and b/, no timestamps."""
    proc = subprocess.run(
        ["diff", "-ruN", "--no-dereference", "-x", ".git", str(before), str(after)], capture_output=True
    )
    if proc.returncode > 1:
        return f"diff failed: {proc.stderr.decode(errors='replace')[:300]}", False
    old, new = str(before).encode() + b"/", str(after).encode() + b"/"
    lines = []
    for line in proc.stdout.splitlines(keepends=True):
        if line.startswith(b"diff -ruN "):
            _, _, paths = line.partition(b" -x .git ")
            line = b"diff " + paths
        elif line.startswith((b"--- ", b"+++ ")) and b"\t" in line:
            line = line.split(b"\t", 1)[0] + b"\n"
        elif not line.startswith((b"Binary files ", b"Only in ")):
            lines.append(line)
            continue
        lines.append(line.replace(old, b"a/").replace(new, b"b/"))
    return middle_cut(b"".join(lines), DIFF_BYTES)


def _rebuild_of(replay_dir: Path, adapter: Adapter) -> Rebuild[Any]:
    result = ReplayResult.model_validate_json((replay_dir / "result.json").read_bytes())
    return Rebuild(
        native_files=[replay_dir / p for p in result.native_files],
        expected_prefix=orjson.loads((replay_dir / result.expected_prefix).read_bytes()),
        agent_home=replay_dir / "native" / "home",
        continuation=adapter.load_continuation(replay_dir / "continuation.json"),
    )


def _prepare(
    job: ForkJob, adapter: Adapter, traj: Trajectory, boundary: BoundaryReady, dirs: RunDirs, backend: Backend
) -> Sandbox:
    """The run's container from the snapshot image, over its own state (the patch mounted, not applied)."""
    extra = {}
    patch = job.variant.spec.patch
    if patch is not None:
        folder = dirs.work("patch")
        (folder / "patch.diff").write_bytes(patch.read_bytes())
        extra[PATCH_MOUNT] = (folder, True)
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
        extra_binds=extra,
    )


def _apply_patch(box: Runtime, patch: Path, cwd: str) -> None:
    applied = box.exec(["git", "apply", "--verbose", f"{PATCH_MOUNT}/patch.diff"], workdir=cwd, timeout_s=120)
    if applied.exit_code != 0:
        why = (applied.stderr or applied.stdout).decode(errors="replace").strip().splitlines()
        raise PatchFailed(f"the patch {patch} does not apply: {why[-1] if why else 'git apply failed'}")


def run(
    job: ForkJob,
    boundary_line: Callable[[], BoundaryReady],
    turn_line: Callable[[], Turn],
    backend: Backend | None = None,
) -> RunRecord:
    """The run, told by `boundary_line` that the snapshot is ready and by `turn_line` that it may go on;
    `backend` starts its sandbox (default: Docker)."""
    from replayer.engine import load, pins_for
    from sandboxes.docker import DockerBackend

    record: dict[str, Any] = {"variant": job.variant.name, "repeat": job.repeat, "dir": job.dir}
    box: Sandbox | None = None
    state_dir: StateDir | None = None
    patched = job.run_dir / "patched-workspace"
    turn_at: float | None = None
    try:
        adapter, traj = load(job.trajectory, job.task, job.cwd, job.session)
        record["pins"] = pins_for(adapter)
        assert traj.cwd
        boundary = boundary_line()
        with signals.deferred():  # made and known, or not made: a SIGTERM never leaks it
            state_dir = fork_state(
                boundary.sealed, job.boundary_state, job.limits, fallback_parent=job.run_dir
            )
        dirs = RunDirs(root=state_dir.path)
        box = _prepare(job, adapter, traj, boundary, dirs, backend or DockerBackend())
        record.update(container=box.name, state_disk_limited=state_dir.limited)
        state = state_dir.path
        patch = job.variant.spec.patch
        if patch is not None:
            _apply_patch(box, patch, traj.cwd)
            # the agent's edits are diffed against this, the patch's own against the boundary
            copy_untrusted(
                state / "workspace", patched, links="keep", limits=job.limits, what="the patched workspace"
            )
            diff, cut = workspace_diff(job.boundary_state / "workspace", patched)
            record.update(patch_diff=diff, patch_diff_truncated=cut)
        turn_at = max(boundary.at, turn_line().at)
        record["fork_s"] = time.time() - turn_at  # ready long before the turn: the line's own latency
        rebuild = _rebuild_of(job.replay_dir, adapter)
        key = steps.upstream_key(job.continuation, adapter)
        record["continuation"] = steps.continue_agent(
            box,
            adapter,
            traj,
            rebuild,
            job.continuation,
            dirs,
            job.run_dir,
            key=key,
            after_step=job.after_step,
            on_event=ignore,
        )
        if job.check:
            record["check"] = run_check(box, job.check, traj.cwd, job.check_timeout_s)
        box.stop()
        box = None
        exported = job.run_dir / "state" / "workspace"
        copy_untrusted(state / "workspace", exported, links="keep", limits=job.limits, what="the workspace")
        record["timeline"] = timeline.continued(adapter, job.run_dir, rebuild.expected_prefix)
        diff, cut = workspace_diff(
            patched if patch is not None else job.boundary_state / "workspace", exported
        )
        record.update(workspace_diff=diff, workspace_diff_truncated=cut, status="ok")
    except Interrupted:
        raise
    except ReplayError as exc:
        record.update(status="failed", error_kind=exc.kind, error=str(exc))
    except Exception as exc:  # recorded, so that one broken run never stops the others
        record.update(status="failed", error_kind="internal", error=f"{type(exc).__name__}: {exc}")
    finally:
        if box is not None:
            box.stop()
        if state_dir is not None:
            state_dir.remove()
        shutil.rmtree(patched, ignore_errors=True)
    record["wall_s"] = time.time() - turn_at if turn_at is not None else 0.0
    return RunRecord.model_validate(record)


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
