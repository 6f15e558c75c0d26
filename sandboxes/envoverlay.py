"""A started sandbox whose every command gets the same extra environment over its own: the recording's
environment (--agent-env) for the reruns, as the continuation gets it over the agent's command."""

from __future__ import annotations

from typing import Any

from replayer.sandboxes.base import ExecResult, RunningExec, Sandbox


class EnvOverlay:
    def __init__(self, inner: Sandbox, env: dict[str, str]):
        self.inner, self.env = inner, dict(env)
        self.name, self.image_id = inner.name, inner.image_id
        self.disk_limited, self.dropped_capabilities = inner.disk_limited, inner.dropped_capabilities

    def exec(
        self, argv: list[str], *, workdir: str, env: dict[str, str] | None = None, **kw: Any
    ) -> ExecResult:
        return self.inner.exec(argv, workdir=workdir, env={**(env or {}), **self.env}, **kw)

    def start_exec(
        self, argv: list[str], *, workdir: str, env: dict[str, str] | None = None, **kw: Any
    ) -> RunningExec:
        return self.inner.start_exec(argv, workdir=workdir, env={**(env or {}), **self.env}, **kw)

    def read_file(self, path: str, *args: Any, **kw: Any) -> bytes:
        return self.inner.read_file(path, *args, **kw)

    def write_file(self, path: str, data: bytes) -> None:
        self.inner.write_file(path, data)

    def forward_port(self, port: int, unix_socket: str) -> None:
        self.inner.forward_port(port, unix_socket)

    def stop_forward(self, port: int) -> None:
        self.inner.stop_forward(port)

    def disk_used_up(self) -> bool:
        return self.inner.disk_used_up()

    def snapshot(self, tag: str, labels: dict[str, str]) -> str:
        return self.inner.snapshot(tag, labels)

    def remove_snapshots(self, label: str) -> list[str]:
        return self.inner.remove_snapshots(label)

    def stop(self) -> None:
        self.inner.stop()


def with_env(sandbox: Sandbox, env: dict[str, str]) -> Sandbox:
    """`sandbox` itself when `env` is empty."""
    return EnvOverlay(sandbox, env) if env else sandbox
