"""Pre-started forks (replayer/pipeline/fork.py `Prestarted`, sandboxes/slots.py, replayer/pipeline/rootfs.py): a run's
container started before the boundary over an empty slot shows, once its cloned state is mounted into the
slot, that state at the recorded workspace path and agent home, with the boundary container's own
file-system changes applied; its writes land in its own clone under its quota, never in the boundary or
another run; a mount made inside it never reaches the host; teardown, and the sweep of a dead run's slot
(what `replayer gc` and every new state run), leave no mount behind, and gc unmounts the slots' root
once no slot is left."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import docker
import pytest

from replayer.adapters.sandbox_paths import AGENT_HOME
from replayer.floor.limits import SandboxLimits
from replayer.floor.pins import load_pins
from replayer.floor.requests import ContinueRequest, Variant
from replayer.pipeline import rootfs
from replayer.pipeline.boundary import fork_state, seal
from replayer.pipeline.engine import load
from replayer.pipeline.fork import BoundaryReady, ForkJob, Prestarted
from replayer.pipeline.rootfs import RootfsDiff
from replayer.sandboxes import slots
from replayer.sandboxes.docker import DockerSandbox
from replayer.sandboxes.quota import FS_ROOT, StateDir, sweep_states
from replayer.sandboxes.slots import SLOT_ROOT, Slot, mount_points, mounted_under, unmount_root
from tests.conftest import CLAUDE, ROOT

pytestmark = pytest.mark.docker
SESSION = CLAUDE.fixture("write_edit") / "session.jsonl"
LIMITS = SandboxLimits(disk_bytes=32 << 20)
BOUNDARY_WRITES = (
    "mkdir -p /tmp/claude-0/tasks && echo out > /tmp/claude-0/tasks/t.output && rm /etc/motd"
    # a directory of the image replaced by a file, and a file by a directory
    " && rm -r /etc/default && echo file > /etc/default"
    " && rm /etc/debian_version && mkdir /etc/debian_version && echo dir > /etc/debian_version/x"
    " && echo latin-1 > /tmp/caf$'\\xe9'"  # a name that is not UTF-8 (issue 32)
)


@dataclass
class Fork:
    pre: Prestarted
    state: StateDir


@dataclass
class Boundary:
    src: Path
    sealed: StateDir
    ready: BoundaryReady
    rootfs_dir: Path
    forks: list[Fork]


def _job(tmp: Path, rootfs_dir: Path) -> ForkJob:
    adapter, _ = load(SESSION)
    return ForkJob(
        compare_id=f"test-pre-{uuid.uuid4().hex[:6]}", trajectory=SESSION, task=None, cwd=None, session=None,
        replay_dir=tmp, boundary_state=tmp, run_dir=tmp, dir="run", variant=Variant(name="a"), repeat=1,
        continuation=ContinueRequest(upstream="http://127.0.0.1:9"), check=None, check_timeout_s=1.0,
        agent=adapter.name, agent_version=load_pins().agents[adapter.name].version, after_step=0,
        limits=LIMITS, prestart_image=load_pins().base_image.tag, rootfs_dir=rootfs_dir,
    )  # fmt: skip


@pytest.fixture(scope="module")
def boundary(
    tmp_path_factory: pytest.TempPathFactory, docker_client: docker.DockerClient
) -> Iterator[Boundary]:
    """A boundary container that wrote in /tmp, removed /etc/motd and changed the kind of two paths,
    committed; its state sealed; two forks pre-started from the base image and given their clones."""
    tmp = tmp_path_factory.mktemp("prestart")
    src = tmp / "boundary"
    (src / "workspace").mkdir(parents=True)
    (src / "home").mkdir()
    (src / "workspace" / "a.txt").write_text("boundary\n")
    (src / "home" / "session.jsonl").write_text("{}\n")
    base = load_pins().base_image.tag
    box = DockerSandbox.start(
        docker_client, base, binds={"/testbed": (src / "workspace", False)}, workdir="/testbed",
        run_id=f"test-pre-{uuid.uuid4().hex[:6]}",
    )  # fmt: skip
    try:
        assert box.exec(["bash", "-c", BOUNDARY_WRITES], workdir="/", timeout_s=60).exit_code == 0
        image = box.snapshot(f"sandbox-replayer/snapshot:test-pre-{uuid.uuid4().hex[:6]}", labels={})
        (tmp / "rootfs").mkdir()
        diff = rootfs.build(box, image, tmp / "rootfs")
    finally:
        box.stop()
    sealed = seal(src, LIMITS)
    probe = Slot.create()
    if probe is not None:
        probe.release()
    if sealed is None or probe is None:
        docker_client.images.remove(image, force=True)
        pytest.skip("no limited states or no slots here (root and a btrfs FS_ROOT are needed)")
    assert isinstance(diff, RootfsDiff), diff
    ready = BoundaryReady(image=image, sealed=sealed.path, at=time.time(), rootfs=diff)
    ready = BoundaryReady.model_validate_json(ready.model_dump_json())  # as a fork's process reads it
    adapter, traj = load(SESSION)
    forks: list[Fork] = []
    try:
        for _ in range(2):
            slot = Slot.create()
            assert slot is not None
            pre = Prestarted.start(_job(tmp, tmp / "rootfs"), adapter, traj, slot)
            state = fork_state(sealed.path, src, LIMITS, fallback_parent=tmp)
            forks.append(Fork(pre, state))
            assert pre.attach(ready, state) is None
        yield Boundary(src, sealed, ready, tmp / "rootfs", forks)
    finally:
        for fork in forks:
            fork.pre.discard()
            fork.state.remove()
        sealed.remove()
        docker_client.images.remove(image, force=True)


def _sh(fork: Fork, script: str, workdir: str = "/testbed") -> str:
    done = fork.pre.box.exec(["bash", "-c", script], workdir=workdir, timeout_s=60)
    assert done.exit_code == 0, done.stderr
    return done.stdout.decode()


def test_the_state_shows_at_the_recorded_paths_with_the_boundary_changes(boundary: Boundary) -> None:
    a, b = boundary.forks
    assert _sh(a, "pwd -P; cat a.txt").splitlines() == ["/testbed", "boundary"]
    assert _sh(a, f"cat {AGENT_HOME}/session.jsonl") == "{}\n"
    # the boundary container's own changes, applied over the base image by the container's waiter
    assert _sh(a, "cat /tmp/claude-0/tasks/t.output; test ! -e /etc/motd && echo gone").split() == [
        "out",
        "gone",
    ]
    assert _sh(a, "cat /tmp/caf$'\\xe9'") == "latin-1\n"
    # where the kind of a path changed, the old tree is gone and the new path made
    assert _sh(a, "cat /etc/default; ls /etc/debian_version; cat /etc/debian_version/x").split() == [
        "file",
        "x",
        "dir",
    ]
    # the same directory as the run's clone on the host, not the slot's empty one
    device, inode = _sh(a, "stat -c '%d %i' /testbed").split()
    host = os.stat(a.state.path / "workspace")
    assert (int(device), int(inode)) == (host.st_dev, host.st_ino)
    assert not any(p.name == "a.txt" for p in a.pre.slot.path.rglob("*") if p.parent.name != "workspace")


def test_writes_land_in_the_run_s_own_clone_under_its_quota(boundary: Boundary) -> None:
    a, b = boundary.forks
    _sh(a, f"echo a > a.txt && echo a > new && echo a > {AGENT_HOME}/session.jsonl")
    assert (a.state.path / "workspace" / "a.txt").read_text() == "a\n"
    assert (a.state.path / "workspace" / "new").read_text() == "a\n"
    assert (a.state.path / "home" / "session.jsonl").read_text() == "a\n"
    assert _sh(b, "cat a.txt; ls") == "boundary\na.txt\n"  # the other run saw none of it
    assert (boundary.sealed.path / "workspace" / "a.txt").read_text() == "boundary\n"
    assert (boundary.src / "workspace" / "a.txt").read_text() == "boundary\n"
    over = a.pre.box.exec(
        ["dd", "if=/dev/zero", "of=/testbed/big", "bs=1M", "count=48", "conv=fsync"],
        workdir="/",
        timeout_s=60,
    )
    assert over.exit_code != 0 and b"quota exceeded" in over.stderr, over.stderr
    _sh(a, "rm -f big")


def test_a_mount_made_inside_never_reaches_the_host(boundary: Boundary) -> None:
    a, b = boundary.forks
    _sh(a, "mkdir -p sub")
    refused = a.pre.box.exec(["mount", "-t", "tmpfs", "tmpfs", "/testbed/sub"], workdir="/", timeout_s=30)
    assert refused.exit_code != 0  # no CAP_SYS_ADMIN
    # as root in its mount namespace (what a sandbox with the capability could do): the mount stays there
    pid = a.pre.box.container.attrs["State"]["Pid"]
    subprocess.run(
        ["nsenter", "-t", str(pid), "-m", "mount", "-t", "tmpfs", "tmpfs", "/testbed/sub"], check=True
    )
    try:
        _sh(a, "touch sub/inside && mountpoint -q sub")
        for fork in (a, b):
            assert set(mounted_under(fork.pre.slot.path)) == {
                fork.pre.slot.path / f for f in fork.pre.folders
            }
            assert mounted_under(fork.state.path) == []
        assert [p for p, _ in mount_points() if p.endswith("/sub")] == []
        assert list((a.state.path / "workspace" / "sub").iterdir()) == []
        assert _sh(b, "ls") == "a.txt\n"
    finally:
        subprocess.run(["nsenter", "-t", str(pid), "-m", "umount", "/testbed/sub"], check=True)


def test_teardown_unmounts_and_removes_the_slot(boundary: Boundary, tmp_path: Path) -> None:
    adapter, traj = load(SESSION)
    slot = Slot.create()
    assert slot is not None
    pre = Prestarted.start(_job(tmp_path, boundary.rootfs_dir), adapter, traj, slot)
    state = fork_state(boundary.sealed.path, boundary.src, LIMITS, fallback_parent=tmp_path)
    assert pre.attach(boundary.ready, state) is None
    assert len(mounted_under(slot.path)) == len(pre.folders) >= 3  # workspace, home, bridge
    pre.discard()
    assert mounted_under(slot.path) == [] and not slot.path.exists()
    assert (state.path / "workspace" / "a.txt").read_text() == "boundary\n"  # the state itself untouched
    state.remove()
    assert not state.path.exists()


def test_a_diff_that_does_not_fit_falls_back_with_nothing_mounted(boundary: Boundary, tmp_path: Path) -> None:
    adapter, traj = load(SESSION)
    slot = Slot.create()
    assert slot is not None
    pre = Prestarted.start(_job(tmp_path, tmp_path), adapter, traj, slot)
    try:
        diff = boundary.ready.rootfs
        assert isinstance(diff, RootfsDiff)
        other = boundary.ready.model_copy(
            update={"rootfs": diff.model_copy(update={"base_image": "sha256:x"})}
        )
        assert pre.attach(other, boundary.forks[0].state) == (
            "the boundary container ran another image than the pre-started one"
        )
        at_mount = boundary.ready.model_copy(
            update={"rootfs": diff.model_copy(update={"entries": ["/testbed/x"]})}
        )
        why = pre.attach(at_mount, boundary.forks[0].state)
        assert why == "the boundary wrote /testbed/x, a mount of the fork's container"
        assert mounted_under(slot.path) == []
    finally:
        pre.discard()


_HOLDER = """
import sys, time
from pathlib import Path
from sandboxes.slots import Slot
slot = Slot.create()
for folder in ("workspace", "home"):
    (slot.path / folder).mkdir()
slot.attach(Path(sys.argv[1]), ["workspace", "home"])
print(slot.path, flush=True)
time.sleep(600)
"""


def test_a_dead_run_s_slot_is_swept_with_its_mounts(boundary: Boundary, tmp_path: Path) -> None:
    state = fork_state(boundary.sealed.path, boundary.src, LIMITS, fallback_parent=tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(state.path)], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None
    slot = Path(holder.stdout.readline().strip())
    assert slot.parent == SLOT_ROOT and len(mounted_under(slot)) == 2
    holder.send_signal(signal.SIGKILL)  # no cleanup can run
    holder.wait()
    try:
        sweep_states()  # what `replayer gc` and every new state run
        assert mounted_under(slot) == [] and not slot.exists()
        assert (state.path / "workspace" / "a.txt").is_file()  # a live run's state, not the dead slot's
    finally:
        state.remove()


def test_gc_unmounts_the_slot_root_once_no_slot_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    # a slot root of its own beside the real one, whose slots other runs on this host may hold
    root = FS_ROOT / f"slots-test-{uuid.uuid4().hex[:8]}"
    monkeypatch.setattr(slots, "SLOT_ROOT", root)
    try:
        slot = Slot.create()
        if slot is None:
            pytest.skip("no slots here (root and a btrfs FS_ROOT are needed)")
        assert (str(root), True) in mount_points()
        assert not unmount_root() and (str(root), True) in mount_points()  # a live slot keeps it
        slot.release()
        assert unmount_root() and str(root) not in {p for p, _ in mount_points()}
        assert not unmount_root()  # nothing left to unmount
        again = Slot.create()  # the next slot mounts it again, shared
        assert again is not None and (str(root), True) in mount_points()
        again.release()
        assert unmount_root()
    finally:
        for point in mounted_under(root):
            subprocess.run(["umount", "-l", str(point)], check=False)
        if root.is_dir():
            root.rmdir()
