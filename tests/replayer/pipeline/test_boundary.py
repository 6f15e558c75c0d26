"""A fork's workspace and agent home (replayer/pipeline/boundary.py): the boundary state sanitized and sealed once,
then each fork its own copy (a btrfs clone where states are limited): a write in one fork reaches neither
another fork nor the boundary, and a fork's state has a disk quota exactly where a copied state has one."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from replayer.floor.limits import SandboxLimits
from replayer.floor.pins import load_pins
from replayer.pipeline.boundary import fork_state, seal
from replayer.sandboxes.docker import DockerSandbox
from replayer.sandboxes.quota import StateDir

LIMITS = SandboxLimits(disk_bytes=32 << 20)


@pytest.fixture(scope="module")
def boundary(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, StateDir | None]]:
    """A boundary tree as a sandbox could leave it (a link out, a FIFO, a set-user-ID file), sealed."""
    src = tmp_path_factory.mktemp("boundary")
    workspace, home = src / "workspace", src / "home"
    workspace.mkdir()
    home.mkdir()
    (workspace / "a.txt").write_text("boundary\n")
    (workspace / "out").symlink_to("/etc/passwd")
    os.mkfifo(workspace / "fifo")
    (workspace / "tool").write_bytes(b"#!/bin/sh\n")
    (workspace / "tool").chmod(0o4755)
    (home / "session.jsonl").write_text("{}\n")
    (home / "etc").symlink_to("/etc")
    sealed = seal(src, LIMITS)
    yield src, sealed
    if sealed is not None:
        sealed.remove()


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_sealed_boundary_is_a_sanitized_read_only_copy(boundary: tuple[Path, StateDir | None]) -> None:
    src, sealed = boundary
    probe = StateDir.create(LIMITS.disk_bytes, fallback_parent=src.parent)
    probe.remove()
    assert (sealed is not None) is probe.limited
    if sealed is None:
        pytest.skip("no limited states here (no btrfs): forks copy the boundary tree")
    workspace, home = sealed.path / "workspace", sealed.path / "home"
    assert os.readlink(workspace / "out") == "/etc/passwd"  # kept as a link, never followed
    assert not (workspace / "fifo").exists() and not (home / "etc").exists()
    assert (workspace / "tool").stat().st_mode & stat.S_ISUID == 0
    assert (home / "session.jsonl").read_text() == "{}\n"
    with pytest.raises(OSError):
        (workspace / "a.txt").write_text("changed\n")


def _container(docker_client, state: StateDir) -> DockerSandbox:
    return DockerSandbox.start(
        docker_client,
        load_pins().base_image.tag,
        binds={"/w": (state.path / "workspace", False), "/h": (state.path / "home", False)},
        workdir="/w",
        run_id=f"test-boundary-{uuid.uuid4().hex[:8]}",
        limits=LIMITS,
    )


@pytest.mark.docker
def test_forks_are_isolated_copies_under_their_own_quota(
    boundary: tuple[Path, StateDir | None], docker_client, tmp_path: Path
) -> None:
    src, sealed = boundary
    before = _tree(src)
    states = [
        fork_state(sealed.path if sealed else None, src, LIMITS, fallback_parent=tmp_path) for _ in range(2)
    ]
    try:
        # quotas apply to a fork's state exactly where they applied to a copied one
        assert [s.limited for s in states] == [sealed is not None] * 2
        for name, state in zip("ab", states, strict=True):
            assert _tree(state.path / "workspace") == _tree(src / "workspace")
            with _container(docker_client, state) as box:
                writes = f"echo {name} > a.txt && echo {name} > /h/session.jsonl && echo {name} > new"
                wrote = box.exec(["bash", "-c", writes], workdir="/w", timeout_s=30)
                assert wrote.exit_code == 0, wrote.stderr
                if state.limited:
                    over = box.exec(
                        ["dd", "if=/dev/zero", "of=/w/big", "bs=1M", "count=48", "conv=fsync"],
                        workdir="/w",
                        timeout_s=60,
                    )
                    assert over.exit_code != 0 and b"quota exceeded" in over.stderr, over.stderr
        # each fork saw its own writes only; the boundary (sealed and source) none
        for name, state in zip("ab", states, strict=True):
            assert (state.path / "workspace" / "a.txt").read_text() == f"{name}\n"
            assert (state.path / "workspace" / "new").read_text() == f"{name}\n"
            assert (state.path / "home" / "session.jsonl").read_text() == f"{name}\n"
        assert _tree(src) == before
        if sealed is not None:
            assert (sealed.path / "workspace" / "a.txt").read_text() == "boundary\n"
            assert not (sealed.path / "workspace" / "new").exists()
            assert (sealed.path / "home" / "session.jsonl").read_text() == "{}\n"
    finally:
        for state in states:
            state.remove()
    assert not any(s.path.exists() for s in states)
