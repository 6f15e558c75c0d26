"""The sandbox seams: a Deployment (a started container: name, snapshot, port forward, stop) and the
Runtime it hands out (exec, a watched exec, read and write a file), with their typed payloads.

`Sandbox` is both, as a started backend hands it to the engine and the adapters; `Backend` starts one
from a `SandboxSpec`; `Engine` is a Backend and everything else the replayer asks of a container engine
(images, labels, cleanup, containers ahead). sandboxes/engines.py names the engines and picks the one in
use; sandboxes/docker.py and sandboxes/podman.py are the real ones, sandboxes/fake.py an in-process
backend for the engine's tests. Nothing outside sandboxes/ imports an engine module (tests/test_seam.py)."""

from __future__ import annotations

import queue
import signal
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict

from replayer.floor.errors import last_line
from replayer.floor.limits import SandboxLimits

LABEL = "sandbox-replayer"
"""On every container the replayer starts (with `LABEL.run`, the run's id), on every engine."""
SNAPSHOT_LABEL = f"{LABEL}.snapshot"
"""On the images `snapshot` commits (the base image does not carry it): what `gc` removes."""
OWNER_LABEL = f"{LABEL}.owner"
"""The owning process of a container (sandboxes/owner.py): what the sweep of orphans reads."""
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
        """Commit the file system (not its bind mounts, not its processes) as an image; its id. A sandbox
        started from that id (`SandboxSpec.image`) starts from the snapshot."""
        ...

    def remove_snapshots(self, label: str) -> list[str]:
        """Remove the snapshot images carrying `label` (`key=value`) from its engine; their names."""
        ...

    def stop(self) -> None: ...


class Sandbox(Deployment, Runtime, Protocol):
    """A started deployment and its runtime, as the engine hands it to the adapters."""


class Backend(Protocol):
    def start(self, spec: SandboxSpec) -> Sandbox: ...


@runtime_checkable
class Layered(Protocol):
    """A sandbox whose committed layers lie on this host and whose slot folders take the host's later
    mounts (sandboxes/slots.py): what forks started before their boundary need (Docker's overlay2)."""

    prestarts: bool
    """Whether forks may be started before the boundary over slots."""
    image_id: str

    def image_attrs(self, image: str) -> dict[str, Any]:
        """The engine's inspection of `image` (RootFS layers, GraphDriver data)."""
        ...

    def mount_points(self) -> list[str]:
        """The mount points the container's processes see."""
        ...


class LayeredSandbox(Sandbox, Layered, Protocol):
    """A started sandbox that forks may be pre-started like (sandboxes/slots.py)."""


@runtime_checkable
class Ahead(Backend, Protocol):
    """A Backend that keeps the next run's container started ahead of need (sandboxes/ahead.py)."""

    served: int
    """Runs that got the spare."""
    started: int
    """Runs whose container was started when asked."""

    def close(self) -> None:
        """Remove the spare; none is started after this."""
        ...


class Engine(Backend, Protocol):
    """One container engine, everything the replayer asks of it besides a sandbox's own life: reachability,
    images, the containers and snapshots its labels name, the sweeps after a crash, how `replayer setup`
    brings it up. sandboxes/engines.py picks the one in use by name."""

    name: str
    """`docker`, `podman`: the value of `--engine`, `REPLAYER_ENGINE`, the `engine` setting."""
    label: str
    """`Docker`, `Podman`: as messages name it."""
    up_script: str
    """The script beside replayer/verbs/setup/ that installs and starts it (root)."""
    up_args: list[str]
    tools: dict[str, str]
    """The commands the script needs -> the Debian package that has each."""
    prestarts: bool
    """Whether forks may start before their boundary over slots and batch jobs keep a container ahead;
    where not, they take the plain path (a container started when asked)."""

    def check(self) -> None:
        """Returns when the engine answers; SandboxError naming what to do else."""
        ...

    def errors(self, doing: str) -> AbstractContextManager[None]:
        """The engine's own and its transport's errors inside, as one-line SandboxErrors."""
        ...

    def image_attrs(self, image: str) -> dict[str, Any] | None:
        """The engine's inspection of `image` (Id, Size, RootFS, GraphDriver), None when it has none."""
        ...

    def provide_image(self, tag: str, archive: Path | None) -> None:
        """`tag` loaded from `archive` (a `docker save` tar) or, without one, pulled."""
        ...

    def missing_image(self, image: str) -> Exception:
        """The error of a run whose image this engine lacks (what to do, in one line)."""
        ...

    def remove_containers(self, label: str) -> list[str]:
        """Remove the containers carrying `label` (`key` or `key=value`); their names."""
        ...

    def remove_images(self, label: str) -> list[str]:
        """Remove the snapshot images carrying `label` (never one without the snapshot label)."""
        ...

    def gc(self) -> tuple[list[str], list[str]]:
        """Remove every container and snapshot image the replayer left behind; their names."""
        ...

    def sweep_forwarders(self) -> list[int]:
        """Kill the port forwarders left on the host by containers the engine no longer has; their pids."""
        ...

    def stop_live(self) -> list[str]:
        """Remove every container this process started and still holds (after an interruption)."""
        ...

    def ahead(self) -> Ahead | None:
        """A Backend keeping a container ahead for this process's runs, None where the engine cannot."""
        ...


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
