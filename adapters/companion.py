"""A long-lived companion process in the sandbox that answers JSON lines over a unix socket, and the
step rerunner built on it.

The socket lives in a folder of the run's state directory that is mounted into the sandbox; the host
reaches it through a short alias (socket paths are limited to 108 bytes). mini-swe-agent, OpenHands
(V1 and V0) and Pi rerun through one each: importing the agent's package (starting its runtime) once
serves the whole replay, one request line a step.
"""

from __future__ import annotations

import signal
import socket
import time
from abc import abstractmethod
from pathlib import Path
from typing import Any, ClassVar

import orjson

from replayer.adapters.base import StepwiseRerunner
from replayer.floor.errors import SandboxError, last_line
from replayer.floor.io import MAX_INPUT_BYTES, remove_alias, short_alias
from replayer.floor.trajectory import Observation, Step, Trajectory
from replayer.sandboxes.base import RunningExec, Sandbox

_START_TIMEOUT_S = 120.0
_STOP_GRACE_S = 10.0
SOCKET = "companion.sock"
"""The companion's socket, in the run's work folder (mounted read-write into the sandbox)."""
MAX_ANSWER_BYTES = MAX_INPUT_BYTES
"""The longest answer line read from a companion (the sandbox writes it: it is bounded like an input)."""
STEP_MARGIN_S = 60.0
"""Added to a step's command timeouts: the companion's own work around the commands."""


class SocketCompanion:
    def __init__(
        self,
        sandbox: Sandbox,
        argv: list[str],
        *,
        workdir: str,
        env: dict[str, str],
        work: Path,
        socket_name: str,
        name: str,
        start_timeout_s: float = _START_TIMEOUT_S,
    ):
        self.name = name
        self.start_timeout_s = start_timeout_s
        self.socket_name = socket_name
        self.handle: RunningExec = sandbox.start_exec(argv, workdir=workdir, env=env)
        self.alias = short_alias(work)
        self.sock: socket.socket | None = None
        self.stream: Any = None

    def connect(self) -> None:
        """Wait until the companion listens (the first request does it when not called)."""
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(str(self.alias / self.socket_name))
                self.sock, self.stream = sock, sock.makefile("rwb")
                return
            except OSError:
                sock.close()
            if self.handle.wait(0.1) or time.monotonic() > deadline:
                raise SandboxError(f"the {self.name} companion did not start: {self.stderr_tail()}")

    def stderr_tail(self) -> str:
        self.handle.wait(1)
        return last_line(self.handle.result(timed_out=False, cleanup=False).stderr) or "no output"

    def request(self, payload: dict[str, Any], timeout_s: float, what: str) -> dict[str, Any]:
        """Send one JSON line and read the answer line; `what` names the request in errors."""
        if self.stream is None:
            self.connect()
        assert self.sock is not None
        self.sock.settimeout(timeout_s)
        try:
            self.stream.write(orjson.dumps(payload) + b"\n")
            self.stream.flush()
            line = self.stream.readline(MAX_ANSWER_BYTES + 1)
        except OSError as exc:
            raise SandboxError(f"the {self.name} companion failed in {what}: {exc}") from None
        if not line:
            raise SandboxError(f"the {self.name} companion died in {what}: {self.stderr_tail()}")
        if len(line) > MAX_ANSWER_BYTES:
            raise SandboxError(
                f"the {self.name} companion's answer to {what} is over {MAX_ANSWER_BYTES} bytes"
            )
        try:
            answer = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise SandboxError(f"the {self.name} companion's answer to {what} is not JSON: {exc}") from None
        if not isinstance(answer, dict):
            raise SandboxError(f"the {self.name} companion's answer to {what} is not a JSON object")
        return answer

    def close(self) -> None:
        """EOF ends the companion's loop; one that does not stop is killed. (The socket's file is closed
        first: while it is open, closing the socket does not close its descriptor, and no EOF is sent.)"""
        if self.stream is not None:
            self.stream.close()
        if self.sock is not None:
            self.sock.close()
        if not self.handle.wait(_STOP_GRACE_S):
            self.handle.signal(signal.SIGKILL)
            self.handle.wait(5)
        self.handle.result(timed_out=False)
        (self.alias / self.socket_name).unlink(missing_ok=True)
        remove_alias(self.alias)


class StepRerunner(StepwiseRerunner):
    """Reruns a trajectory's calls one step at a time through one companion: the first call asked for
    of a step sends the step's request line, and the answer gives the fresh observation of every call
    of the step. A subclass says how a step is asked for and how an answer becomes observations."""

    start_timeout_s: ClassVar[float] = _START_TIMEOUT_S
    """How long the companion may take to listen on its socket."""

    def __init__(
        self, trajectory: Trajectory, sandbox: Sandbox, work: Path, argv: list[str], env: dict[str, str]
    ):
        """Starts the companion (`argv` with `env`, in the trajectory's cwd); a spec file it reads must
        be in `work` before."""
        assert trajectory.cwd
        super().__init__(trajectory)
        self._start = (sandbox, argv, trajectory.cwd, env, work)
        self._companion: SocketCompanion | None = None

    @property
    def companion(self) -> SocketCompanion:
        """The companion, started when first asked for: a replay that reruns no call (every call of its
        prefix kept historical, or none) starts none, and does not wait for one it never spoke to to stop."""
        if self._companion is None:
            sandbox, argv, cwd, env, work = self._start
            self._companion = SocketCompanion(
                sandbox,
                argv,
                workdir=cwd,
                env=env,
                work=work,
                socket_name=SOCKET,
                name=self.name,
                start_timeout_s=self.start_timeout_s,
            )
        return self._companion

    @abstractmethod
    def request(self, step: Step) -> tuple[dict[str, Any], float]:
        """The request line that reruns `step`, and how long its answer may take."""

    @abstractmethod
    def observations(self, step: Step, answer: dict[str, Any]) -> dict[str, Observation]:
        """The fresh observations of the answer, by call id (a rerun call missing is an error when it is
        asked for; a call the plan keeps historical may be missing)."""

    def run_step(self, index: int) -> None:
        step = self.steps[index]
        payload, timeout_s = self.request(step)
        answer = self.companion.request(payload, timeout_s, f"step {step.index}")
        if "error" in answer:
            raise SandboxError(f"{self.name} failed to execute step {step.index}: {answer['error']}")
        try:
            self.fresh.update(self.observations(step, answer))
        except (KeyError, TypeError, AttributeError, ValueError) as exc:  # the sandbox wrote the answer
            raise SandboxError(
                f"the {self.name} companion's answer to step {step.index} is malformed: {type(exc).__name__}: {exc}"
            ) from None

    def close(self) -> None:
        if self._companion is not None:
            self._companion.close()
