"""Faults at any moment leave no container, no state and no partial output behind, and inputs intact:
Ctrl-C or SIGTERM at random points, the container killed under a rerun, the Docker engine killed under a
run (and the orphan swept by the next run), the output's disk full (real Docker, real processes)."""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from replayer.sandboxes.docker import LABEL, OWNER_LABEL
from replayer.sandboxes.quota import STATE_ROOT
from tests.conftest import CLAUDE, ROOT, replayer
from tests.support.sessions import patched_session

# Each test looks at what the processes it started left (their containers and state folders, by the owner
# they carry); the orphan's test alone runs with nothing beside it (any run sweeps every orphan).
pytestmark = [pytest.mark.docker]


def _slow_session(dest: Path, seconds: float) -> Path:
    """The recorded `single` session whose first Bash call sleeps first."""
    return patched_session(dest, "toolu_single_01", {"command": f"sleep {seconds}; cat a.txt"})


def _workspace(dest: Path) -> Path:
    shutil.copytree(CLAUDE.fixture("single") / "workspace", dest)
    return dest


def _states() -> set[str]:
    return set(os.listdir(STATE_ROOT)) if STATE_ROOT.is_dir() else set()


def _states_of(pid: int) -> list[str]:
    """The state folders of the replayer process `pid` still there (their names carry their owner)."""
    return [s for s in _states() if s.startswith(f"{socket.gethostname()}_{pid}_")]


def _left_by(client: docker.DockerClient, pid: int) -> list[str]:
    """The containers (by their owner label) and state folders of the replayer process `pid` still there."""
    containers = [
        c.name
        for c in client.containers.list(all=True, filters={"label": LABEL})
        if c.labels.get(OWNER_LABEL, "").split(":")[1:2] == [str(pid)]
    ]
    return containers + _states_of(pid)


def _start(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "replayer.cli", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _our_containers(client: docker.DockerClient) -> list[str]:
    return [c.name for c in client.containers.list(all=True, filters={"label": LABEL})]


def _wait_for_container(client: docker.DockerClient, pid: int, timeout_s: float = 60) -> str:
    """The running container that process `pid` started (its owner label), whatever else runs."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for entry in client.api.containers(filters={"label": OWNER_LABEL, "status": "running"}):
            if entry["Labels"][OWNER_LABEL].split(":")[1] == str(pid):
                return str(entry["Names"][0].lstrip("/"))
        time.sleep(0.1)
    raise AssertionError("no container started")


def _assert_clean(parent: Path, out: Path, client: docker.DockerClient, pid: int) -> None:
    assert _left_by(client, pid) == []
    assert [p.name for p in parent.iterdir() if ".partial-" in p.name or ".old-" in p.name] == []
    assert not out.exists() or (out / "result.json").is_file()


def test_interrupted_at_random_moments_leaves_nothing(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    session = _slow_session(tmp_path / "session.jsonl", 2)
    workspace = _workspace(tmp_path / "ws")
    rng = random.Random(16)
    outcomes = []
    for attempt in range(10):
        signum = rng.choice([signal.SIGINT, signal.SIGTERM])
        delay = rng.uniform(0.3, 4.5)
        out = tmp_path / f"out{attempt}"
        proc = _start("run", str(session), "-n", "3", "-w", str(workspace), "-o", str(out))
        time.sleep(delay)
        proc.send_signal(signum)
        _, stderr = proc.communicate(timeout=120)
        outcomes.append(proc.returncode)
        # -2/-15: the signal came before the process had started anything (its handler not yet installed)
        assert proc.returncode in (0, 130, -signal.SIGINT, -signal.SIGTERM), stderr
        if proc.returncode == 130:
            assert stderr.strip().splitlines()[-1] == "replayer: interrupted"
            assert "Traceback" not in stderr
        _assert_clean(tmp_path, out, docker_client, proc.pid)
    assert 130 in outcomes  # the loop did interrupt runs (not only finished ones)
    assert (workspace / "a.txt").read_text() == (CLAUDE.fixture("single") / "workspace" / "a.txt").read_text()


def _wait_for_process(client: docker.DockerClient, name: str, needle: str, timeout_s: float = 60) -> None:
    """Until a process whose command line holds `needle` runs in the container (the rerun is under way)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(docker.errors.APIError):
            if any(needle in " ".join(row) for row in client.containers.get(name).top()["Processes"]):
                return
        time.sleep(0.1)
    raise AssertionError(f"no {needle!r} in {name}")


def test_a_container_killed_under_a_rerun_fails_cleanly(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    session = _slow_session(tmp_path / "session.jsonl", 60)
    out = tmp_path / "out"
    proc = _start("run", str(session), "-n", "3", "-w", str(_workspace(tmp_path / "ws")), "-o", str(out))
    name = _wait_for_container(docker_client, proc.pid)
    _wait_for_process(docker_client, name, "sleep 60")
    docker_client.containers.get(name).kill()
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 6, stderr
    assert stderr.startswith("replayer: sandbox: ") and stderr.count("\n") == 1
    _assert_clean(tmp_path, out, docker_client, proc.pid)


class _PrivateEngine:
    """A second Docker engine of our own (its own socket, data and exec roots) holding the base image."""

    def __init__(self, root: Path):
        self.root = root
        self.pid_file = root / "d.pid"
        self.env = {"DOCKER_HOST": f"unix://{root / 'd.sock'}"}
        self.groups: list[int] = []

    def start(self) -> None:
        self.pid_file.unlink(missing_ok=True)  # stale after a kill -9
        argv = ["dockerd", "-H", self.env["DOCKER_HOST"], "--data-root", str(self.root / "data")]
        argv += ["--exec-root", str(self.root / "exec"), "--pidfile", str(self.pid_file)]
        engine = subprocess.Popen(
            [*argv, "--bridge=none", "--iptables=false"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.groups.append(engine.pid)
        for _ in range(120):
            info = subprocess.run(["docker", "info"], env={**os.environ, **self.env}, capture_output=True)
            if info.returncode == 0:
                return
            time.sleep(0.5)
        raise AssertionError("the private engine did not answer")

    def load_base_image(self) -> None:
        from replayer.floor.pins import load_pins

        saved = subprocess.Popen(["docker", "save", load_pins().base_image.tag], stdout=subprocess.PIPE)
        subprocess.run(
            ["docker", "load", "-q"],
            stdin=saved.stdout,
            env={**os.environ, **self.env},
            check=True,
            capture_output=True,
        )
        saved.wait()

    def kill(self) -> None:
        os.kill(int(self.pid_file.read_text()), signal.SIGKILL)

    def stop(self) -> None:
        """End the engine, its containerd and the shims of its containers (they run in sessions of
        their own), then remove everything it had."""
        for group in self.groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
        subprocess.run(["pkill", "-KILL", "-f", str(self.root)], capture_output=True)
        time.sleep(1)
        mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
        for target in sorted((m for m in mounts if m.startswith(str(self.root))), reverse=True):
            subprocess.run(["umount", "-l", target], capture_output=True)
        shutil.rmtree(self.root, ignore_errors=True)


def test_the_engine_killed_under_a_run(tmp_path: Path) -> None:
    """SIGKILL of the Docker engine mid-rerun: a one-line sandbox error, no partial output, no state left
    (the container the run could not remove goes with the private engine; on the engine, a later run
    sweeps it: the orphan's test)."""
    engine = _PrivateEngine(Path("/tmp") / f"replayer-engine-{os.getpid()}")
    engine.root.mkdir()
    session = _slow_session(tmp_path / "session.jsonl", 60)
    workspace = _workspace(tmp_path / "ws")
    out = tmp_path / "out"
    try:
        engine.start()
        engine.load_base_image()
        client = docker.DockerClient(base_url=engine.env["DOCKER_HOST"])
        proc = _start("run", str(session), "-n", "3", "-w", str(workspace), "-o", str(out), env=engine.env)
        _wait_for_container(client, proc.pid)
        engine.kill()
        _, stderr = proc.communicate(timeout=120)
        assert proc.returncode == 6, stderr
        assert stderr.startswith("replayer: sandbox: ") and stderr.count("\n") == 1
        assert not out.exists() and _states_of(proc.pid) == []
        assert [p.name for p in tmp_path.iterdir() if ".partial-" in p.name] == []
    finally:
        engine.stop()


@pytest.mark.serial  # the next run sweeps every orphan: another test's run could sweep this one first
def test_an_orphan_of_a_dead_process_is_swept_by_the_next_run(
    tmp_path: Path, docker_client: docker.DockerClient
) -> None:
    session = _slow_session(tmp_path / "session.jsonl", 60)
    workspace = _workspace(tmp_path / "ws")
    states = _states()
    proc = _start("run", str(session), "-n", "3", "-w", str(workspace), "-o", str(tmp_path / "out"))
    orphan = _wait_for_container(docker_client, proc.pid)
    os.killpg(proc.pid, signal.SIGKILL)  # no cleanup can run
    proc.wait(30)
    assert orphan in _our_containers(docker_client)
    assert len(_states() - states) == 1  # its disk-limited state, left behind
    assert docker_client.containers.get(orphan).labels[OWNER_LABEL].split(":")[1] == str(proc.pid)
    fast = replayer(
        "run",
        str(CLAUDE.fixture("single") / "session.jsonl"),
        "-n",
        "1",
        "-w",
        str(workspace),
        "-o",
        str(tmp_path / "next"),
    )
    assert fast.returncode == 0, fast.stderr
    assert orphan not in _our_containers(docker_client)
    assert _states() <= states


def test_a_full_output_disk_is_an_output_error(tmp_path: Path, docker_client: docker.DockerClient) -> None:
    small = tmp_path / "small"
    small.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], check=True)
    try:
        workspace = _workspace(tmp_path / "ws")
        (workspace / "big.bin").write_bytes(os.urandom(3 << 20))
        single = str(CLAUDE.fixture("single") / "session.jsonl")
        proc = _start("run", single, "-n", "1", "-w", str(workspace), "-o", str(small / "out"))
        _, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 7, stderr
        assert "No space left on device" in stderr and stderr.count("\n") == 1
        assert list(small.iterdir()) == []
        assert _left_by(docker_client, proc.pid) == []
        assert (workspace / "big.bin").stat().st_size == 3 << 20
    finally:
        subprocess.run(["umount", str(small)], check=True)
