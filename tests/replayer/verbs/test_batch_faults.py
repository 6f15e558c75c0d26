"""Faults a batch meets (issue 16): a batch killed with SIGKILL takes its workers with it and its resume removes
the containers it left; one crashing job is that job's failure, not the batch's end; a FIFO as the manifest or
as a trajectory is refused, never waited on; a file where the batch directory needs a folder, and a second
batch on the same directory, are refused up front."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import psutil
import pytest

from replayer.verbs.batch import run_job
from replayer.verbs.batch_dir import BATCH_LABEL, batch_id, locked
from replayer.verbs.batch_jobs import expand
from replayer.verbs.batch_manifest import read_manifest
from tests.conftest import CLAUDE, MINI, ROOT, replayer, replayer_argv

MINI_TOOLCALL = MINI.fixture("toolcall")


def _manifest(tmp_path: Path, lines: list[dict]) -> Path:
    path = tmp_path / "manifest.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def _replay_line(boundary: int = 1) -> dict:
    return {
        "trajectory": str(MINI_TOOLCALL / "trajectory.traj.json"),
        "boundaries": [boundary],
        "mode": "replay",
        "workspace": str(MINI_TOOLCALL / "workspace"),
    }


def _containers(client, out: Path) -> list:
    # sparse: no inspect of each one, which a container removed meanwhile would fail (404)
    return client.containers.list(all=True, sparse=True, filters={"label": f"{BATCH_LABEL}={batch_id(out)}"})


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    alive = []
    for proc in procs:
        try:
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                alive.append(proc)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.mark.agent
@pytest.mark.timeout(300)
def test_a_killed_batch_takes_its_workers_and_its_resume_removes_its_containers(
    tmp_path: Path, docker_client
) -> None:
    manifest = _manifest(tmp_path, [_replay_line()])
    out = tmp_path / "out"
    with (tmp_path / "batch.log").open("wb") as log:
        proc = subprocess.Popen(
            replayer_argv("batch", "--trust-manifest", str(manifest), "-o", str(out), "-j", "1"),
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 120
        while not _containers(docker_client, out):
            assert proc.poll() is None, (tmp_path / "batch.log").read_text()
            assert time.monotonic() < deadline, "no container of the batch appeared"
            time.sleep(0.1)
        # while it runs, a second batch on the same directory is refused
        second = replayer("batch", "--trust-manifest", str(manifest), "-o", str(out))
        assert second.returncode == 7, second.stderr
        assert "another batch" in second.stderr and str(out) in second.stderr, second.stderr
        descendants = psutil.Process(proc.pid).children(recursive=True)
        assert any("spawn" in " ".join(p.cmdline()) for p in descendants), "jobs run in worker processes"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _alive(descendants) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(descendants), [p.cmdline() for p in _alive(descendants)]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert _containers(docker_client, out), "the killed job's container is left for the resume to remove"
    resumed = replayer("batch", "--trust-manifest", str(manifest), "-o", str(out), "--json")
    assert resumed.returncode == 0, resumed.stderr
    summary = orjson.loads(resumed.stdout)
    assert (summary["jobs"], summary["done"], summary["failed"]) == (1, 1, 0)
    assert not _containers(docker_client, out), "no container of the batch is left"
    key = orjson.loads((out / "batch.json").read_bytes())["outcomes"][0]["key"]
    assert [p.name for p in (out / "jobs").iterdir()] == [key], "one result, no partial left"


def _limited_batch(*args: str, max_file_bytes: int) -> subprocess.CompletedProcess[str]:
    """The real CLI with a file-size limit (RLIMIT_FSIZE, inherited by its workers): a write past it fails
    with EFBIG, as on a full quota, deep inside the engine."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    return subprocess.run(
        [sys.executable, "-m", "replayer.cli", "batch", "--trust-manifest", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        preexec_fn=limit,
    )


def test_a_crashing_job_is_recorded_as_failed_and_the_batch_goes_on(tmp_path: Path) -> None:
    # the Claude Code prefix is about 250 KB, the mini-swe-agent one about 15 KB: only the first hits the limit
    big = {"trajectory": str(CLAUDE.fixture("large_file") / "session.jsonl"), "boundaries": [1]}
    small = {"trajectory": str(MINI_TOOLCALL / "trajectory.traj.json"), "boundaries": [1, 2]}
    manifest = _manifest(tmp_path, [big, small])
    out = tmp_path / "out"
    proc = _limited_batch(str(manifest), "-o", str(out), "-j", "2", "--json", max_file_bytes=64 << 10)
    assert proc.returncode == 0, proc.stderr
    summary = orjson.loads(proc.stdout)
    assert (summary["jobs"], summary["done"], summary["failed"]) == (3, 2, 1), summary
    (outcome_file,) = (out / "outcomes").iterdir()
    outcome = orjson.loads(outcome_file.read_bytes())
    assert (outcome["line"], outcome["status"]) == (1, "failed")
    assert "File too large" in outcome["error"] and "\n" not in outcome["error"], outcome
    assert len(outcome["error"]) < 300, "a bounded reason"
    assert not [p for p in (out / "jobs").iterdir() if p.name.startswith(".")], "no partial result left"
    # kept as it is on a rerun, run again (and done, the limit gone) with --retry-failed
    again = _limited_batch(str(manifest), "-o", str(out), "--json", max_file_bytes=64 << 10)
    assert (orjson.loads(again.stdout)["failed"], orjson.loads(again.stdout)["skipped"]) == (1, 2)
    retried = replayer("batch", "--trust-manifest", str(manifest), "-o", str(out), "--json", "--retry-failed")
    assert retried.returncode == 0, retried.stderr
    assert (orjson.loads(retried.stdout)["done"], orjson.loads(retried.stdout)["failed"]) == (1, 0)
    assert not list((out / "outcomes").iterdir())


def test_a_job_that_landed_before_its_worker_died_is_what_landed(tmp_path: Path) -> None:
    """A worker killed after a job's result landed but before it said so: the job is what the next run would
    read on disk (done; a stored outcome as stored), not failed; one that left nothing failed (`worker`)."""
    from replayer.verbs.batch_tally import outcome_of
    from replayer.verbs.executors import _died

    lines = [_replay_line(1), _replay_line(2), _replay_line(3)]
    done, cut, lost = expand(read_manifest(_manifest(tmp_path, lines), trusted=True), {})
    out = tmp_path / "out"
    (out / "jobs" / done.key).mkdir(parents=True)
    (out / "jobs" / done.key / "result.json").write_bytes(b"{}")
    (out / "outcomes").mkdir()
    stored = outcome_of(cut, "cut", "max_tokens", "the budget")
    (out / "outcomes" / f"{cut.key}.json").write_bytes(stored.model_dump_json().encode())
    assert _died(done, out, "gone").status == "done"
    assert _died(cut, out, "gone") == stored
    failed = _died(lost, out, "gone")
    assert (failed.status, failed.error_kind, failed.error) == ("failed", "worker", "gone")


@pytest.mark.timeout(60)
def test_a_fifo_manifest_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "manifest.jsonl"
    os.mkfifo(fifo)
    proc = replayer("batch", "--trust-manifest", str(fifo), "-o", str(tmp_path / "out"))
    assert proc.returncode == 3, proc.stderr
    assert "FIFO" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(60)
def test_a_fifo_trajectory_is_refused_without_waiting(tmp_path: Path) -> None:
    fifo = tmp_path / "session.jsonl"
    os.mkfifo(fifo)
    good = {"trajectory": str(MINI_TOOLCALL / "trajectory.traj.json")}
    manifest = _manifest(tmp_path, [good, {"trajectory": str(fifo)}])
    proc = replayer("batch", "--trust-manifest", str(manifest), "-o", str(tmp_path / "out"))
    assert proc.returncode == 3, proc.stderr
    assert f"manifest line 2: trajectory {fifo} is a FIFO" in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.timeout(60)
def test_a_trajectory_that_became_a_fifo_is_that_jobs_refusal(tmp_path: Path) -> None:
    traj = tmp_path / "trajectory.traj.json"
    traj.write_bytes((MINI_TOOLCALL / "trajectory.traj.json").read_bytes())
    (job,) = expand(
        read_manifest(_manifest(tmp_path, [{"trajectory": str(traj), "boundaries": [1]}]), trusted=True), {}
    )
    traj.unlink()
    os.mkfifo(traj)  # between the expansion and the job's run
    outcome = run_job(job, tmp_path / "out", {})
    assert (outcome.status, outcome.error_kind) == ("refused", "bad_input"), outcome
    assert "FIFO" in (outcome.error or "")


@pytest.mark.parametrize("where", ["jobs", "outcomes", "batch.json", "."])
def test_a_file_in_the_way_of_the_batch_directory_is_refused(where: str, tmp_path: Path) -> None:
    manifest = _manifest(
        tmp_path, [{"trajectory": str(MINI_TOOLCALL / "trajectory.traj.json"), "boundaries": [1]}]
    )
    out = tmp_path / "out"
    if where == ".":
        out.write_text("a file\n")
        blocked = out
    elif where == "batch.json":
        (out / where).mkdir(parents=True)
        blocked = out / where
    else:
        out.mkdir()
        (out / where).write_text("a file\n")
        blocked = out / where
    proc = replayer("batch", "--trust-manifest", str(manifest), "-o", str(out))
    assert proc.returncode == 7, proc.stderr
    assert f"{blocked} exists and is not a" in proc.stderr.replace("\n", ""), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_a_second_batch_on_a_held_directory_is_refused(tmp_path: Path) -> None:
    manifest = _manifest(
        tmp_path, [{"trajectory": str(MINI_TOOLCALL / "trajectory.traj.json"), "boundaries": [1]}]
    )
    out = tmp_path / "out"
    out.mkdir()
    with locked(out):
        held = replayer("batch", "--trust-manifest", str(manifest), "-o", str(out))
    assert held.returncode == 7, held.stderr
    assert f"another batch (pid {os.getpid()}) is running on {out}" in held.stderr, held.stderr
    assert not (out / "jobs").exists() or not list((out / "jobs").iterdir()), "nothing ran"
    free = replayer("batch", "--trust-manifest", str(manifest), "-o", str(out), "--json")
    assert free.returncode == 0 and orjson.loads(free.stdout)["done"] == 1, free.stderr
