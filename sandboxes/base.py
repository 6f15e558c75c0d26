"""The Sandbox protocol: what the engine and the adapters need from a container backend."""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, ConfigDict


class ExecResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    exit_code: int | None
    """None when the deadline killed the process group."""
    stdout: bytes
    stderr: bytes
    timed_out: bool
    output_truncated: bool
    duration_s: float


class Sandbox(Protocol):
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

    def stop(self) -> None: ...


class RunningExec(Protocol):
    """A process started in the sandbox that the caller watches."""

    last_output: float

    def wait(self, timeout_s: float) -> bool: ...

    def signal(self, signum: int) -> None: ...

    def result(self, timed_out: bool, cleanup: bool = True) -> ExecResult: ...
