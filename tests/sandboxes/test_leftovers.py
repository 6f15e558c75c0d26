"""Port forwarders a removed container leaves on the host (sandboxes/leftovers.py), on the real engine and
kernel: a forwarder in the container's cgroup, mount and network namespaces but not in its PID namespace
(what the orphaned `socat`s of driven reruns were) outlives the container's removal; the container's own
`stop` kills it, and so does the sweep `replayer gc` runs, for a container someone else removed."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import pytest

from replayer.floor.pins import load_pins
from replayer.sandboxes.docker import DockerSandbox, sweep_forwarders
from replayer.sandboxes.leftovers import container_processes, is_forwarder

pytestmark = pytest.mark.docker

CGROUP_ROOT = Path("/sys/fs/cgroup")


def _box(docker_client) -> DockerSandbox:
    return DockerSandbox.start(
        docker_client, load_pins().base_image.tag, binds={}, workdir="/", run_id=f"left{uuid.uuid4().hex[:8]}"
    )


def _join_cgroups(pid: int, of: int) -> None:
    """Move `pid` into every cgroup process `of` is in (cgroup v1 hierarchies, or the v2 one)."""
    for line in Path(f"/proc/{of}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        name = controllers.removeprefix("name=").split(",")[0] or "unified"
        for base in (CGROUP_ROOT / name, CGROUP_ROOT):
            procs = base / path.lstrip("/") / "cgroup.procs"
            if procs.is_file():
                procs.write_text(f"{pid}\n")
                break


def _escaped_forwarder(box: DockerSandbox) -> subprocess.Popen[bytes]:
    """A forwarder started in the container's mount and network namespaces and its cgroup, from the host's
    PID namespace (the container's `socat`, its own arguments)."""
    box.container.reload()
    init = box.container.attrs["State"]["Pid"]
    proc = subprocess.Popen(
        ["nsenter", "-t", str(init), "-m", "-n", "socat", "TCP-LISTEN:8799,bind=127.0.0.1,fork,reuseaddr",
         "UNIX-CONNECT:/nonexistent.sock"],
        start_new_session=True,
    )  # fmt: skip
    for _ in range(200):  # until nsenter has exec'd socat
        if is_forwarder(proc.pid) or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert is_forwarder(proc.pid), "the forwarder runs"
    _join_cgroups(proc.pid, init)
    assert (proc.pid, box.container.id) in set(container_processes()), "its cgroup names the container"
    return proc


def test_a_forwarder_outside_the_pid_namespace_survives_the_removal_and_is_swept(docker_client) -> None:
    box = _box(docker_client)
    proc = _escaped_forwarder(box)
    try:
        docker_client.api.remove_container(box.container.id, force=True)  # as another process removes it
        assert proc.poll() is None, "the orphan: alive after its container is gone"
        assert proc.pid in sweep_forwarders(docker_client)
        assert proc.wait(10) == -9
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_containers_stop_kills_what_it_spawned_that_outlived_it(docker_client) -> None:
    box = _box(docker_client)
    try:
        box.forward_port(8798, "/nonexistent.sock")  # a forwarder as driven reruns start it
        proc = _escaped_forwarder(box)
    except BaseException:
        box.stop()
        raise
    try:
        box.stop()
        assert proc.wait(10) == -9, "killed with its container"
        assert box.container.id not in {owner for _, owner in container_processes()}, "nothing of it left"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
