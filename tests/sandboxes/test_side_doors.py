"""The two channels the engine writes for a container, outside the run's disk quota (its hosts files and its
log), and io_uring, each tried from inside a real container as root (issue 42, item 5)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replayer.floor.limits import SandboxLimits
from replayer.sandboxes.docker import DockerSandbox

pytestmark = pytest.mark.docker

LOG_WRITE = 200 << 20


@pytest.fixture
def box_limits() -> SandboxLimits:
    """The shared `box` (tests/sandboxes/conftest.py) with a small disk quota."""
    return SandboxLimits(disk_bytes=64 << 20)


def _sh(box: DockerSandbox, script: str) -> str:
    res = box.exec(["bash", "-c", "exec 2>&1; " + script], workdir="/testbed", timeout_s=300)
    assert not res.timed_out, res
    return res.stdout.decode(errors="replace")


def _engine_dir(docker_client, box: DockerSandbox) -> Path:
    """The container's folder in the engine's data root: where the engine keeps its hosts files and log."""
    root = Path(docker_client.info()["DockerRootDir"])
    folder = root / "containers" / box.container.id
    assert folder.is_dir(), f"{folder}: the engine's data root is not on this host"
    return folder


def _bytes_under(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file() and not p.is_symlink())


def test_root_cannot_write_the_hosts_files(docker_client, box: DockerSandbox) -> None:
    before = _bytes_under(_engine_dir(docker_client, box))
    out = _sh(
        box,
        "id -u; for f in /etc/hosts /etc/hostname /etc/resolv.conf; do "
        "head -c 10485760 /dev/zero >> $f || echo refused $f; done; "
        "getent hosts localhost; hostname; cat /etc/hostname",
    )
    lines = out.splitlines()
    assert lines[0] == "0", out
    for name in ("hosts", "hostname", "resolv.conf"):
        assert f"refused /etc/{name}" in out, out
    assert "Read-only file system" in out
    # what the agents rely on still holds: localhost is 127.0.0.1 (the bridge's forwarder), the hostname
    assert lines[-3].split()[0] in ("127.0.0.1", "::1"), out
    assert lines[-2:] == ["replay", "replay"], out
    assert _bytes_under(_engine_dir(docker_client, box)) - before < 1 << 20


def test_a_name_lookup_fails_as_before_with_no_wait_for_an_absent_server(box: DockerSandbox) -> None:
    """No name server, and the resolvers' options that give up at once: musl (Codex is a musl binary) sends
    its look-ups unconnected and waited out 2 x 5 s for an answer on every start (`python -m bench
    name-lookups`); glibc's fail as before (localhost from the hosts file, anything else not found)."""
    out = _sh(
        box,
        "grep -v '^#' /etc/resolv.conf; getent hosts api.github.com; echo lookup $?; "
        "getent hosts localhost | cut -d' ' -f1",
    )
    lines = out.splitlines()
    assert lines[0].split() == ["options", "timeout:0", "attempts:1"], out
    assert not any(line.startswith("nameserver") for line in lines), out
    assert "lookup 2" in lines, "no name resolves but the hosts file's"
    assert lines[-1] in ("127.0.0.1", "::1"), out


def test_root_writing_to_the_container_output_grows_no_log(docker_client, box: DockerSandbox) -> None:
    folder = _engine_dir(docker_client, box)
    before = _bytes_under(folder)
    # printable bytes with a newline now and then: what a log driver keeps nearly byte for byte
    out = _sh(
        box,
        f"id -u; yes 'side door into the engine log' | head -c {LOG_WRITE} > /proc/1/fd/1; echo wrote $?",
    )
    assert out.splitlines()[0] == "0", out
    assert "wrote" in out, out
    assert _bytes_under(folder) - before < 1 << 20


def test_io_uring_is_refused(box: DockerSandbox) -> None:
    # io_uring_setup(8, params) with a zeroed struct io_uring_params (120 bytes), then enter/register on a
    # descriptor that is not a ring: allowed, they would answer EBADF; refused, EPERM (or ENOSYS)
    script = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "params = ctypes.create_string_buffer(120)\n"
        "for name, nr, args in (('setup', 425, (8, params)), ('enter', 426, (0, 1, 0, 0, None, 0)),"
        " ('register', 427, (0, 0, None, 0))):\n"
        "    ret = libc.syscall(nr, *args)\n"
        "    print(name, ret, os.strerror(ctypes.get_errno()) if ret < 0 else 'ok')\n"
    )
    box.write_file("/testbed/uring.py", script.encode())
    out = _sh(box, "id -u; python3 /testbed/uring.py")
    lines = out.splitlines()
    assert lines[0] == "0", out
    assert len(lines) == 4, out
    for line in lines[1:]:
        name, ret, why = line.split(" ", 2)
        assert ret == "-1" and why in ("Operation not permitted", "Function not implemented"), out
