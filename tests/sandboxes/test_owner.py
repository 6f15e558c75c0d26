"""Whose a container or a state folder is: a live process's is never swept, also when the kernel's boot
time moved by a second between two reads of its start time (a stepped clock); a gone or reused pid's is.
No Docker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from replayer.floor.owner import owner, owner_alive


def _value(pid: int, started: int) -> str:
    return f"{socket.gethostname()}:{pid}:{started}"


def test_this_process_is_alive_also_a_second_either_side() -> None:
    host, pid, started = owner().split(":")
    for moved in (-1, 0, 1):
        assert owner_alive(_value(int(pid), int(started) + moved))


def test_a_reused_pid_and_a_gone_process_are_not() -> None:
    _, pid, started = owner().split(":")
    assert not owner_alive(_value(int(pid), int(started) - 3600))  # the pid, another process's start
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    assert not owner_alive(_value(int(gone.stdout), int(started)))
    assert owner_alive(f"another-host:{os.getpid()}:0")  # another host's is not ours to judge
