"""Which process owns a container or a state directory, so that what a dead process left is swept."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import psutil

_START_SLACK_S = 2
"""How far two reads of one process's start time may differ (a pid is not reused that fast)."""


def owner() -> str:
    """This process: host, pid and start time (a pid can be reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{int(psutil.Process().create_time())}"


def owner_alive(value: str) -> bool:
    """False only for a process of this host that is gone; another host's is not ours to judge."""
    host, _, rest = value.partition(":")
    pid, _, started = rest.partition(":")
    if host != socket.gethostname():
        return True
    try:
        started_now = int(psutil.Process(int(pid)).create_time())
    except (psutil.NoSuchProcess, ValueError):
        return False
    # a start time is the boot time plus the process's ticks, and the boot time the kernel reports moves
    # by a second when the clock is stepped (seen on VMs): two seconds apart is the same process still
    return abs(started_now - int(started or 0)) <= _START_SLACK_S


def orphans(root: Path) -> Iterator[Path]:
    """The folders under `root` named `HOST_PID_STARTED_...` whose owning process is gone."""
    if not root.is_dir():
        return
    for path in root.iterdir():
        host, pid, started, _ = (path.name.rsplit("_", 3) + ["", "", "", ""])[:4]
        if not owner_alive(f"{host}:{pid}:{started}"):
            yield path
