"""One compare run, in a process of its own: a container from the boundary snapshot, the variant's patch,
the continuation through its own bridge, the check, the workspace diff and the timeline.

`python -m replayer.fork JOB.json` writes RUN_DIR/run.json (a RunRecord) atomically; a run that cannot be
carried out is recorded as failed, never raised. SIGTERM/SIGINT end it cleanly (container removed, no
record written).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict

from adapters.base import Adapter, Rebuild
from replayer import continuation, signals
from replayer.errors import Interrupted, PatchFailed, ReplayError
from replayer.io import write_bytes_atomic
from replayer.models import (
    CheckResult,
    ContinueRequest,
    ReplayResult,
    RunRecord,
    SandboxLimits,
    TimelineCall,
    TimelineEntry,
    Variant,
)
from replayer.pins import running_version
from replayer.safecopy import copy_untrusted
from sandboxes.docker import LABEL, DockerSandbox
from sandboxes.quota import StateDir

PATCH_MOUNT = "/run/replayer-patch"
CHECK_OUTPUT_BYTES = 64 * 1024
DIFF_BYTES = 256 * 1024
TIMELINE_TEXT_CHARS = 4000
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
    """workspace/ and home/ at the boundary."""
    image: str
    """The snapshot image."""
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


def middle_cut(data: bytes, limit: int) -> tuple[str, bool]:
    """`data` as text, its middle replaced by a marker when it is longer than `limit` bytes."""
    if len(data) <= limit:
        return data.decode("utf-8", "replace"), False
    head, tail = data[: limit // 4], data[-(limit - limit // 4) :]
    marker = f"\n[... {len(data) - len(head) - len(tail)} bytes cut ...]\n".encode()
    return (head + marker + tail).decode("utf-8", "replace"), True


def run_check(box: DockerSandbox, command: str, cwd: str, timeout_s: float) -> CheckResult:
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


def _clip(text: str) -> tuple[str, bool]:
    return (text, False) if len(text) <= TIMELINE_TEXT_CHARS else (text[:TIMELINE_TEXT_CHARS], True)


def timeline(adapter: Adapter, run_dir: Path, expected_prefix: list[dict[str, Any]]) -> list[TimelineEntry]:
    """What happened after the boundary, in chat form, from the cleaned continued native session."""
    continued = adapter.continued_prefix(run_dir)
    if continued is None:
        return []
    dialect = adapter.dialect()
    messages = dialect.to_chat(continued)[len(dialect.to_chat(expected_prefix)) :]
    entries = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
        text, cut = _clip(str(content or ""))
        calls = []
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            arguments, cut_args = _clip(str(function.get("arguments", "")))
            cut = cut or cut_args
            calls.append(TimelineCall(name=str(function.get("name", "")), arguments=arguments))
        entries.append(
            TimelineEntry(role=str(message.get("role")), text=text, tool_calls=calls, truncated=cut)
        )
    return entries


def _rebuild_of(replay_dir: Path) -> Rebuild:
    result = ReplayResult.model_validate_json((replay_dir / "result.json").read_bytes())
    return Rebuild(
        native_files=[replay_dir / p for p in result.native_files],
        expected_prefix=orjson.loads((replay_dir / result.expected_prefix).read_bytes()),
        agent_home=replay_dir / "native" / "home",
        continuation=orjson.loads((replay_dir / "continuation.json").read_bytes()),
    )


def run(job: ForkJob) -> RunRecord:
    from replayer.engine import load, pins_for
    from sandboxes.docker import connect

    started = time.monotonic()
    record: dict[str, Any] = {"variant": job.variant.name, "repeat": job.repeat, "dir": job.dir}
    box: DockerSandbox | None = None
    state_dir: StateDir | None = None
    try:
        adapter, traj = load(job.trajectory, job.task, job.cwd, job.session)
        record["pins"] = pins_for(adapter)
        assert traj.cwd
        rebuild = _rebuild_of(job.replay_dir)
        state_dir = StateDir.create(job.limits.disk_bytes, fallback_parent=job.run_dir)
        state = state_dir.path
        workspace, home, bridge_dir = state / "workspace", state / "home", state / "bridge"
        copy_untrusted(
            job.boundary_state / "workspace", workspace, links="keep", what="the boundary workspace"
        )
        copy_untrusted(job.boundary_state / "home", home, links="skip", limits=job.limits, what="the home")
        bridge_dir.mkdir(parents=True)
        binds = {traj.cwd: (workspace, False), **adapter.sandbox_binds(traj, home)}
        binds[continuation.BRIDGE_MOUNT] = (bridge_dir, False)
        patch = job.variant.spec.patch
        if patch is not None:
            (state / "patch").mkdir()
            (state / "patch" / "patch.diff").write_bytes(patch.read_bytes())
            binds[PATCH_MOUNT] = (state / "patch", True)
        run_id = f"{job.compare_id}-{uuid.uuid4().hex[:6]}"
        box = DockerSandbox.start(
            connect(),
            job.image,
            binds=binds,
            workdir=traj.cwd,
            run_id=run_id,
            labels={COMPARE_LABEL: job.compare_id},
            limits=job.limits,
        )
        record["container"] = box.container.name
        if patch is not None:
            applied = box.exec(
                ["git", "apply", "--verbose", f"{PATCH_MOUNT}/patch.diff"], workdir=traj.cwd, timeout_s=120
            )
            if applied.exit_code != 0:
                why = (applied.stderr or applied.stdout).decode(errors="replace").strip().splitlines()
                raise PatchFailed(
                    f"the patch {patch} does not apply: {why[-1] if why else 'git apply failed'}"
                )
        key = "" if job.continuation.cassette else continuation.upstream_key(job.continuation, adapter)
        record["continuation"] = continuation.run(
            box,
            adapter,
            traj,
            rebuild,
            job.continuation,
            key=key,
            socket_dir=bridge_dir,
            home=home,
            out=job.run_dir,
            workspace=workspace,
            after_step=job.after_step,
        )
        if job.check:
            record["check"] = run_check(box, job.check, traj.cwd, job.check_timeout_s)
        box.stop()
        box = None
        exported = job.run_dir / "state" / "workspace"
        copy_untrusted(workspace, exported, links="keep", limits=job.limits, what="the workspace")
        record["timeline"] = timeline(adapter, job.run_dir, rebuild.expected_prefix)
        diff, cut = workspace_diff(job.boundary_state / "workspace", exported)
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
    record["wall_s"] = time.monotonic() - started
    return RunRecord.model_validate(record)


def main(job_path: str, parent: int) -> int:
    signals.install()
    signals.die_with_parent(parent, signal.SIGTERM)  # a compare killed with -9 leaves no fork running
    job = ForkJob.model_validate_json(Path(job_path).read_bytes())
    try:
        with running_version(job.agent, job.agent_version):
            record = run(job)
    except Interrupted:
        return Interrupted.exit_code
    write_bytes_atomic(job.run_dir / "run.json", orjson.dumps(record.model_dump(mode="json")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
