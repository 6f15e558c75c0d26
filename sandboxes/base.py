"""The sandbox seams: a Deployment (a started container: name, snapshot, port forward, stop) and the
Runtime it hands out (exec, a watched exec, read and write a file), with their typed payloads.

`Sandbox` is both, as a started backend hands it to the engine and the adapters; `Backend` starts one
from a `SandboxSpec`. sandboxes/docker.py is the real backend, sandboxes/fake.py an in-process one
for the engine's tests."""

from __future__ import annotations

import queue
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from replayer.floor.errors import last_line
from replayer.floor.models import SandboxLimits

MAX_OUTPUT_BYTES = 64 * 1024 * 1024
MAX_FILE_BYTES = 64 * 1024 * 1024


class ExecResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    exit_code: int | None
    """None when the deadline killed the process group."""
    stdout: bytes
    stderr: bytes
    timed_out: bool
    output_truncated: bool
    duration_s: float


class SandboxSpec(BaseModel):
    """What a backend starts: an image over the run's bind mounts, no network, limits and labels."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    image: str
    binds: dict[str, tuple[Path, bool]]
    """Container path -> (host path, read_only)."""
    workdir: str
    run_id: str
    limits: SandboxLimits = SandboxLimits()
    labels: dict[str, str] = {}
    """Besides the replayer's own."""
    command: list[str] | None = None
    """The container's main process (default: one that sleeps)."""
    propagated: frozenset[str] = frozenset()
    """Bind targets whose host folder is a slot's (sandboxes/slots.py): a mount later made on it on the
    host reaches the running container (rslave); nothing mounted inside reaches the host."""


class RunningExec(Protocol):
    """A process started in the sandbox that the caller watches."""

    last_output: float
    stdout: bytearray
    stderr: bytearray

    def wait(self, timeout_s: float) -> bool: ...

    def signal(self, signum: int) -> None: ...

    def result(self, timed_out: bool, cleanup: bool = True) -> ExecResult: ...

    def stop(self, grace_s: float = 10.0) -> ExecResult: ...

    def new_lines(self) -> bytes: ...

    def await_lines(self, done: Callable[[bytes], bool], timeout_s: float, poll_s: float = 0.05) -> bool: ...

    def await_item(self, items: queue.Queue[Any], timeout_s: float, poll_s: float = 0.05) -> Any | None: ...

    def last_stderr_line(self) -> str: ...


class Runtime(Protocol):
    """What runs inside a started sandbox: commands and files, by container path."""

    def exec(
        self,
        argv: list[str],
        *,
        workdir: str,
        env: dict[str, str] | None = None,
        timeout_s: float,
        max_output_bytes: int = ...,
        kill_on_timeout: bool = ...,
    ) -> ExecResult: ...

    def start_exec(
        self,
        argv: list[str],
        *,
        workdir: str,
        env: dict[str, str] | None = None,
        max_output_bytes: int = ...,
    ) -> RunningExec: ...

    def read_file(self, path: str, max_bytes: int = ...) -> bytes:
        """A regular file's bytes; SandboxError when it is missing, not regular or over `max_bytes`."""
        ...

    def write_file(self, path: str, data: bytes) -> None:
        """Create or replace a file (its parent folders made as needed)."""
        ...


class Deployment(Protocol):
    """One started sandbox: what the engine records about it and does to it as a whole."""

    name: str
    """The container's name (recorded in results)."""
    image_id: str
    disk_limited: bool
    """Whether its own file system has a disk quota (see sandboxes/quota.py)."""
    dropped_capabilities: list[str]

    def forward_port(self, port: int, unix_socket: str) -> None:
        """Inside the sandbox, 127.0.0.1:port -> a mounted unix socket (the sandbox has no network)."""
        ...

    def stop_forward(self, port: int) -> None:
        """End the forwarder `forward_port` started on `port` (its connections too): what runs in the
        sandbox next (a continuation) cannot reach that socket, or one put at its path, through it."""
        ...

    def disk_used_up(self) -> bool:
        """Whether its own file system used its disk quota up (False where it has none)."""
        ...

    def snapshot(self, tag: str, labels: dict[str, str]) -> str:
        """Commit the file system (not its bind mounts, not its processes) as an image; its id."""
        ...

    def stop(self) -> None: ...


class Sandbox(Deployment, Runtime, Protocol):
    """A started deployment and its runtime, as the engine hands it to the adapters."""


class Backend(Protocol):
    def start(self, spec: SandboxSpec) -> Sandbox: ...


class WatchedExec:
    """What a RunningExec offers on top of wait/signal/result and its collected output (shared by the
    backends' handles)."""

    stdout: bytearray
    stderr: bytearray
    _lines_upto: int = 0

    def wait(self, timeout_s: float) -> bool:
        raise NotImplementedError

    def signal(self, signum: int) -> None:
        raise NotImplementedError

    def result(self, timed_out: bool, cleanup: bool = True) -> ExecResult:
        raise NotImplementedError

    def stop(self, grace_s: float = 10.0) -> ExecResult:
        """SIGINT, then SIGKILL after `grace_s` if it is still running; its result."""
        if not self.wait(0):
            self.signal(signal.SIGINT)
            if not self.wait(grace_s):
                self.signal(signal.SIGKILL)
                self.wait(5)
        return self.result(timed_out=False)

    def new_lines(self) -> bytes:
        """The complete stdout lines printed since the last call (each line returned once)."""
        end = self.stdout.rfind(b"\n") + 1
        if end <= self._lines_upto:
            return b""
        chunk = bytes(self.stdout[self._lines_upto : end])
        self._lines_upto = end
        return chunk

    def await_lines(self, done: Callable[[bytes], bool], timeout_s: float, poll_s: float = 0.05) -> bool:
        """Feed `done` the new stdout lines until it says the wait is over (True) or the process ends or
        the time is up (then False, after one last feed)."""
        deadline = time.monotonic() + timeout_s
        while True:
            if done(self.new_lines()):
                return True
            if self.wait(poll_s) or time.monotonic() > deadline:
                return done(self.new_lines())

    def await_item(self, items: queue.Queue[Any], timeout_s: float, poll_s: float = 0.05) -> Any | None:
        """The next item of `items` (put by another thread while this process runs), or None when the
        process ended or the time is up first."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return items.get(timeout=poll_s)
            except queue.Empty:
                pass
            if self.wait(0) or time.monotonic() > deadline:
                return None

    def last_stderr_line(self) -> str:
        """The last error line of stderr (a usage error ends with a hint, not the cause), else the last."""
        lines = [line for line in bytes(self.stderr).decode(errors="replace").splitlines() if line.strip()]
        errors = [line for line in lines if line.lstrip().lower().startswith("error")]
        return last_line("\n".join(errors)) or last_line(bytes(self.stderr)) or "no output"
