"""An in-process sandbox for the engine's tests: exec answers from a script, files live in host folders.

Nothing runs: each exec is matched against the script's rules (a regular expression searched in the
command line, first match wins) and answered with the rule's output, or a callable's; an exec no rule
matches is an error, so a test states everything the engine runs. Every exec is recorded. Files follow
the spec's binds (a container path under a bind target is that host folder's file, as in a container);
any other path lives in the fake's own temporary root (removed at stop). Deployment calls are
recorded, not carried out."""

from __future__ import annotations

import re
import shlex
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from replayer.floor.errors import SandboxError
from replayer.sandboxes.base import MAX_FILE_BYTES, MAX_OUTPUT_BYTES, ExecResult, SandboxSpec, WatchedExec


@dataclass(frozen=True)
class Exec:
    """One command the fake was asked to run."""

    argv: list[str]
    workdir: str
    env: dict[str, str]
    timeout_s: float | None

    @property
    def line(self) -> str:
        """The command line as rules see it: the arguments joined by spaces, unquoted."""
        return " ".join(self.argv)


Answer = ExecResult | Callable[[Exec], ExecResult]


def answer(stdout: bytes | str = b"", stderr: bytes | str = b"", exit_code: int | None = 0) -> ExecResult:
    """An exec's result; exit_code None is a timeout (the deadline killed it)."""
    return ExecResult(
        exit_code=exit_code,
        stdout=stdout.encode() if isinstance(stdout, str) else stdout,
        stderr=stderr.encode() if isinstance(stderr, str) else stderr,
        timed_out=exit_code is None,
        output_truncated=False,
        duration_s=0.0,
    )


@dataclass
class Rule:
    pattern: str
    """Searched (re.search, `.` matching newlines too) in the command line (`Exec.line`)."""
    answer: Answer

    def matches(self, run: Exec) -> bool:
        return re.search(self.pattern, run.line, re.DOTALL) is not None


class FakeExec(WatchedExec):
    """A finished (or, for a timeout, never-ending) exec: its answer is there at once."""

    def __init__(self, result: ExecResult):
        self._result = result
        self.stdout = bytearray(result.stdout)
        self.stderr = bytearray(result.stderr)
        self.last_output = time.monotonic()
        self.signals: list[int] = []

    def wait(self, timeout_s: float) -> bool:
        return not self._result.timed_out or bool(self.signals)

    def signal(self, signum: int) -> None:
        self.signals.append(signum)

    def result(self, timed_out: bool, cleanup: bool = True) -> ExecResult:
        return self._result.model_copy(update={"timed_out": timed_out or self._result.timed_out})


@dataclass
class FakeSandbox:
    """A Deployment and its Runtime, in-process (sandboxes/base.py)."""

    spec: SandboxSpec
    rules: list[Rule]
    root: Path
    name: str = ""
    image_id: str = "sha256:fake"
    disk_limited: bool = False
    dropped_capabilities: list[str] = field(default_factory=list)
    runs: list[Exec] = field(default_factory=list)
    forwarded: list[tuple[int, str]] = field(default_factory=list)
    snapshots: list[str] = field(default_factory=list)
    stopped: bool = False

    def _answer(self, run: Exec) -> ExecResult:
        self.runs.append(run)
        for rule in self.rules:
            if rule.matches(run):
                return rule.answer(run) if callable(rule.answer) else rule.answer
        raise SandboxError(f"the fake sandbox has no answer for {shlex.join(run.argv)[-300:]}")

    def exec(
        self,
        argv: list[str],
        *,
        workdir: str,
        env: dict[str, str] | None = None,
        timeout_s: float,
        max_output_bytes: int = MAX_OUTPUT_BYTES,
        kill_on_timeout: bool = True,
    ) -> ExecResult:
        return self._answer(Exec(list(argv), workdir, dict(env or {}), timeout_s))

    def start_exec(
        self,
        argv: list[str],
        *,
        workdir: str,
        env: dict[str, str] | None = None,
        max_output_bytes: int = MAX_OUTPUT_BYTES,
    ) -> FakeExec:
        return FakeExec(self._answer(Exec(list(argv), workdir, dict(env or {}), None)))

    def host_path(self, path: str) -> Path:
        """Where a container path lives: under the longest bind target that holds it, else the fake's root."""
        if not path.startswith("/") or ".." in path.split("/"):
            raise SandboxError(f"{path} is not an absolute, normalized path")
        for target in sorted(self.spec.binds, key=len, reverse=True):
            if path == target or path.startswith(target.rstrip("/") + "/"):
                return self.spec.binds[target][0] / path[len(target) :].lstrip("/")
        return self.root / path.lstrip("/")

    def read_file(self, path: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
        host = self.host_path(path)
        if not host.is_file() or host.is_symlink():
            raise SandboxError(f"cannot read {path} in the sandbox: not a regular file")
        if host.stat().st_size > max_bytes:
            raise SandboxError(f"cannot read {path} in the sandbox: is over the size limit")
        return host.read_bytes()

    def write_file(self, path: str, data: bytes) -> None:
        host = self.host_path(path)
        for target, (_, read_only) in self.spec.binds.items():
            if read_only and (path == target or path.startswith(target.rstrip("/") + "/")):
                raise SandboxError(f"cannot write {path} in the sandbox: read-only mount")
        host.parent.mkdir(parents=True, exist_ok=True)
        host.write_bytes(data)

    def forward_port(self, port: int, unix_socket: str) -> None:
        self.forwarded.append((port, unix_socket))

    def stop_forward(self, port: int) -> None:
        self.forwarded = [f for f in self.forwarded if f[0] != port]

    def disk_used_up(self) -> bool:
        return False

    def remove_snapshots(self, label: str) -> list[str]:
        """Nothing to remove: a snapshot here is a name only."""
        return []

    def snapshot(self, tag: str, labels: dict[str, str]) -> str:
        self.snapshots.append(tag)
        return f"sha256:fake-snapshot-{len(self.snapshots)}"

    def stop(self) -> None:
        self.stopped = True
        shutil.rmtree(self.root, ignore_errors=True)


@dataclass
class FakeBackend:
    """Starts FakeSandboxes that answer from `rules`; remembers each (the last is `sandbox`)."""

    rules: list[Rule] = field(default_factory=list)
    started: list[FakeSandbox] = field(default_factory=list)

    def start(self, spec: SandboxSpec) -> FakeSandbox:
        root = Path(tempfile.mkdtemp(prefix="replayer-fake-sandbox-"))
        box = FakeSandbox(spec, self.rules, root, name=f"fake-{spec.run_id}")
        self.started.append(box)
        return box

    @property
    def sandbox(self) -> FakeSandbox:
        return self.started[-1]
