"""Processes a removed container left on the host, found by the cgroup that names it.

A process started in a container by an exec (the port forwarders of `DockerSandbox.forward_port`) is the
child of the engine's shim, not of the container's init. When the container goes, everything in its PID
namespace is killed with its init; a process that is not in that namespace survives the removal, with the
container's cgroup, mount and network namespaces, reparented to the host's PID 1. Such `socat`s were seen
when many runs started and removed containers at once. `kill_left` (the container's own `stop`) and
`sweep_forwarders` (`replayer gc`) kill them, whatever let them survive.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
from collections.abc import Callable, Iterable, Iterator

_PROC = "/proc"
_CGROUP = re.compile(rb"docker[-/]([0-9a-f]{64})(?:\.scope)?$")
"""The cgroup path of a Docker container's process: cgroupfs (`/docker/ID`) or systemd (`docker-ID.scope`)."""
_READ_MAX = 8192


def _read(path: str) -> bytes:
    """At most _READ_MAX bytes of a /proc file (b"" when the process is gone or it is unreadable)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return b""
    try:
        return os.read(fd, _READ_MAX)
    except OSError:
        return b""
    finally:
        os.close(fd)


def container_processes() -> Iterator[tuple[int, str]]:
    """(pid, container id) of every host process whose cgroup names a Docker container."""
    for name in os.listdir(_PROC):
        if not name.isdigit():
            continue
        for line in _read(f"{_PROC}/{name}/cgroup").splitlines():
            found = _CGROUP.search(line.rpartition(b":")[2])
            if found:
                yield int(name), found.group(1).decode()
                break


def is_forwarder(pid: int) -> bool:
    """Whether `pid` runs the port forwarder `DockerSandbox.forward_port` starts."""
    argv = _read(f"{_PROC}/{pid}/cmdline").split(b"\0")
    return (
        len(argv) >= 3
        and argv[0] == b"socat"
        and argv[1].startswith(b"TCP-LISTEN:")
        and argv[2].startswith(b"UNIX-CONNECT:")
    )


def _kill(pids: Iterable[int], forwarders_only: bool = False) -> list[int]:
    killed = []
    for pid in pids:
        if forwarders_only and not is_forwarder(pid):  # gone since it was found, its pid maybe reused
            continue
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
    return killed


def kill_left(container_id: str) -> list[int]:
    """Kill every process still in the cgroup of `container_id`, a container this process just removed."""
    return _kill(pid for pid, owner in container_processes() if owner == container_id)


def sweep_forwarders(container_ids: Callable[[], Iterable[str]]) -> list[int]:
    """Kill the port forwarders whose cgroup names a container the engine does not have; their pids.
    `container_ids`: every container id of the engine, asked after the forwarders were found, so that a
    container created meanwhile is never taken for a gone one."""
    found = [(pid, owner) for pid, owner in container_processes() if is_forwarder(pid)]
    if not found:
        return []
    ids = set(container_ids())
    return _kill((pid for pid, owner in found if owner not in ids), forwarders_only=True)
