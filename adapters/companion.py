"""A long-lived companion process in the sandbox that answers JSON lines over a unix socket.

The socket lives in a folder of the run's state directory that is mounted into the sandbox; the host
reaches it through a short alias (socket paths are limited to 108 bytes). mini-swe-agent's and Pi's
reruns use one each: importing the agent's package once serves the whole replay.
"""

from __future__ import annotations

import signal
import socket
import time
from pathlib import Path
from typing import Any

import orjson

from replayer.errors import SandboxError
from replayer.io import remove_alias, short_alias
from sandboxes.base import RunningExec, Sandbox

_START_TIMEOUT_S = 120.0
_STOP_GRACE_S = 10.0


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

    def _connect(self) -> None:
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
        err = self.handle.result(timed_out=False, cleanup=False).stderr.decode(errors="replace").strip()
        return err.splitlines()[-1] if err else "no output"

    def request(self, payload: dict[str, Any], timeout_s: float, what: str) -> dict[str, Any]:
        """Send one JSON line and read the answer line; `what` names the request in errors."""
        if self.stream is None:
            self._connect()
        assert self.sock is not None
        self.sock.settimeout(timeout_s)
        try:
            self.stream.write(orjson.dumps(payload) + b"\n")
            self.stream.flush()
            line = self.stream.readline()
        except OSError as exc:
            raise SandboxError(f"the {self.name} companion failed in {what}: {exc}") from None
        if not line:
            raise SandboxError(f"the {self.name} companion died in {what}: {self.stderr_tail()}")
        answer: dict[str, Any] = orjson.loads(line)
        return answer

    def close(self) -> None:
        """EOF ends the companion's loop; one that does not stop is killed."""
        if self.sock is not None:
            self.sock.close()
        if not self.handle.wait(_STOP_GRACE_S):
            self.handle.signal(signal.SIGKILL)
            self.handle.wait(5)
        self.handle.result(timed_out=False)
        (self.alias / self.socket_name).unlink(missing_ok=True)
        remove_alias(self.alias)
