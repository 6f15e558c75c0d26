"""Interrupted means clean and honest (issue 43, item 7): Ctrl-C of a batch whose continue jobs are in flight
removes their snapshot images, containers and partial folders and counts them `interrupted` in batch.json;
a batch killed outright leaves them, labelled, for the next start on its directory to remove; an interrupted
`run -n a,b --continue` leaves no empty OUT/. The real CLI process, the real engine, the real Claude Code
CLI; the model is the built-in mock with a script whose tool call keeps the continuation busy."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import orjson
import psutil
import pytest

from replayer.sandboxes.base import OWNER_LABEL, SNAPSHOT_LABEL
from replayer.verbs.batch_dir import BATCH_LABEL, batch_id
from tests.conftest import CLAUDE, ROOT, replayer

pytestmark = [pytest.mark.docker, pytest.mark.agent]

FIXTURE = CLAUDE.fixture("single")
NO_KEY = {"ANTHROPIC_API_KEY": "", "REPLAYER_UPSTREAM": ""}


def _busy_script(tmp_path: Path) -> Path:
    """A first answer whose tool call runs for minutes: the continuation is in flight until interrupted."""
    script = tmp_path / "turns.json"
    call = {"type": "tool_use", "id": "toolu_busy_1", "name": "Bash", "input": {"command": "sleep 110"}}
    script.write_bytes(orjson.dumps({"turns": [{"blocks": [call]}]}))
    return script


def _manifest(tmp_path: Path, upstream: str) -> Path:
    """The manifest a user writes beside their files: relative names, the fixture copied in."""
    line = {
        "trajectory": "session.jsonl",
        "boundaries": [1, 2],
        "mode": "continue",
        "workspace": "workspace",
        "continuation": {"upstream": upstream},
    }
    path = tmp_path / "manifest.jsonl"
    path.write_bytes(orjson.dumps(line) + b"\n")
    return path


def _setup(tmp_path: Path) -> None:
    subprocess.run(["cp", "-r", str(FIXTURE / "workspace"), str(tmp_path / "workspace")], check=True)
    (tmp_path / "session.jsonl").write_bytes((FIXTURE / "session.jsonl").read_bytes())


def _left(client, label: str) -> tuple[list, list]:
    """The containers and snapshot images carrying `label`."""
    containers = client.containers.list(all=True, sparse=True, filters={"label": label})
    return containers, client.images.list(filters={"label": label})


def _from_snapshot(client, containers: list) -> bool:
    """One of `containers` runs from a snapshot image (a boundary's continuation)."""
    snapshots = {image.id for image in client.images.list(filters={"label": SNAPSHOT_LABEL})}
    return any(c.attrs.get("Image") in snapshots for c in containers)


def owner_of(pid: int) -> str:
    """The owner label value of the containers process `pid` starts (sandboxes/owner.py)."""
    return f"{socket.gethostname()}:{pid}:{int(psutil.Process(pid).create_time())}"


def _start(args: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as fh:
        return subprocess.Popen(
            [sys.executable, "-m", "replayer.cli", *args],
            cwd=ROOT,
            stdout=fh,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own group: the SIGINT below reaches it and its workers, as Ctrl-C does
            env=os.environ | NO_KEY,
        )


def _signalled(args: list[str], log: Path, running: Callable[[int], bool], signum: int, group: bool) -> int:
    """The CLI run with `args`, sent `signum` once `running(its pid)` (to its process group, as Ctrl-C
    does, or to it alone); its exit code."""
    proc = _start(args, log)
    try:
        deadline = time.monotonic() + 240
        while not running(proc.pid):
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no continuation started: {log.read_text()}"
            time.sleep(0.2)
        (os.killpg if group else os.kill)(proc.pid, signum)
        return proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.timeout(600)
def test_ctrl_c_of_a_batch_in_flight_leaves_nothing_and_says_so(tmp_path: Path, docker_client) -> None:
    _setup(tmp_path)
    manifest = _manifest(tmp_path, f"mock:{_busy_script(tmp_path)}")
    out = tmp_path / "out"
    label = f"{BATCH_LABEL}={batch_id(out)}"
    log = tmp_path / "batch.log"
    args = ["batch", str(manifest), "-o", str(out), "-j", "1", "--trust-manifest"]

    def continuing(_: int) -> bool:  # both boundaries snapshotted, a continuation runs from one
        containers, images = _left(docker_client, label)
        return len(images) == 2 and _from_snapshot(docker_client, containers)

    code = _signalled(args, log, continuing, signal.SIGINT, group=True)
    assert code == 130, log.read_text()
    containers, images = _left(docker_client, label)
    assert (containers, images) == ([], []), "no container or snapshot image of the batch is left"
    assert not [p.name for p in (out / "jobs").iterdir() if p.name.startswith(".")], "no partial folder left"
    summary = orjson.loads((out / "batch.json").read_bytes())
    assert (summary["jobs"], summary["done"], summary["interrupted"]) == (2, 0, 2), summary
    assert {o["status"] for o in summary["outcomes"]} == {"interrupted"}

    # killed outright (SIGKILL: no cleanup runs), it leaves them labelled; the next start removes them
    _signalled(args, log, continuing, signal.SIGKILL, group=False)
    deadline = time.monotonic() + 30  # its workers die with it (die_with_parent)
    while len(_left(docker_client, label)[1]) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(_left(docker_client, label)[1]) == 2, "the killed batch's snapshot images are left"
    quick = _manifest(tmp_path, "mock")  # the next start on the directory: jobs that end at once
    resumed = replayer("batch", str(quick), "-o", str(out), "--json", env=NO_KEY)
    assert resumed.returncode == 0, resumed.stderr
    assert "snapshot image(s) a killed batch left" in resumed.stderr, resumed.stderr
    assert orjson.loads(resumed.stdout)["done"] == 2
    assert _left(docker_client, label) == ([], []), "the next start removed what the killed batch left"


@pytest.mark.timeout(600)
def test_an_interrupted_run_of_several_boundaries_leaves_no_empty_out(tmp_path: Path, docker_client) -> None:
    _setup(tmp_path)
    out = tmp_path / "out"
    log = tmp_path / "run.log"
    args = ["run", str(tmp_path / "session.jsonl"), "-n", "1,2", "-w", str(tmp_path / "workspace")]
    args += ["-o", str(out), "--continue", "--upstream", f"mock:{_busy_script(tmp_path)}"]

    def continuing(pid: int) -> bool:  # a container of this run started from a snapshot image
        mine = {"label": f"{OWNER_LABEL}={owner_of(pid)}"}
        return _from_snapshot(docker_client, docker_client.containers.list(sparse=True, filters=mine))

    code = _signalled(args, log, continuing, signal.SIGINT, group=True)
    assert code == 130, log.read_text()
    assert not out.exists(), sorted(p.name for p in out.iterdir())
