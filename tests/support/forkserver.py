"""The suite's `replayer` commands started from an interpreter that has already imported the libraries and the
pipeline, as a fork of it: each is its own process (its argv, environment, working directory, standard
streams, exit code), running the console entry point from `python -m replayer.cli` on, without paying
the ~0.45 CPU-s of imports a fresh interpreter pays (about a fifth of the suite's CPU, ~1,100 commands).

Imported beforehand: every module of the project but `replayer.cli` (whose consoles read the terminal's
environment when they are made), and the libraries it imports lazily; every function cache stays empty
(`_unfilled`), so nothing a command reads from its environment or files was read before it. The tests that
signal a command or look at its process tree start it with `replayer_argv` (a fresh interpreter), and
test_wheel runs the installed console script.

    python -m tests.support.forkserver SOCKET PARENT_PID   (in the working directory of the commands)

One request a connection (SOCK_SEQPACKET): a JSON message {argv, env} carrying the command's stdin, stdout
and stderr; the answer is its exit code (negative: the signal)."""

from __future__ import annotations

import contextlib
import functools
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

LIBRARIES = ("aiohttp.web", "typer", "rich.progress")
"""Imported lazily by the project (the bridge's server and client), eagerly by the CLI."""
NOT_PRELOADED = ("replayer.cli", "replayer.__main__")


def _preload(name: str) -> None:
    """Every module of the package `name` and below, but NOT_PRELOADED."""
    import importlib
    import pkgutil

    package = importlib.import_module(name)
    for found in pkgutil.iter_modules(package.__path__, f"{name}."):
        if found.name in NOT_PRELOADED:
            continue
        if found.ispkg:
            _preload(found.name)
        else:
            importlib.import_module(found.name)


_MESSAGE_BYTES = 1 << 20
FILLED_AT_IMPORT = {"replayer.floor.options.declared"}
"""Caches the project fills as it imports, from its own code only (the options a type declares)."""


def _unfilled() -> None:
    """No other function cache of the project's holds a value: nothing a command reads from its environment
    or files was read before it."""
    filled = [
        name
        for obj in gc.get_objects()
        if isinstance(obj, functools._lru_cache_wrapper)
        and (name := f"{getattr(obj, '__module__', '')}.{obj.__qualname__}").startswith("replayer")
        and name not in FILLED_AT_IMPORT
        and obj.cache_info().currsize
    ]
    if filled:
        raise SystemExit(f"forkserver: caches filled at import: {filled}")


def _serve(listener: socket.socket) -> tuple[dict, list[int]]:
    """Answer requests until this process is the fork that runs one: returns its request and fds there."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the waiters are reaped by the kernel
    while True:
        conn, _ = listener.accept()
        try:
            data, fds, _, _ = socket.recv_fds(conn, _MESSAGE_BYTES, 3)
        except OSError:
            conn.close()
            continue
        if os.fork() == 0:  # the waiter: starts the command, then says its exit code
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            listener.close()
            pid = os.fork()
            if pid == 0:
                conn.close()
                return json.loads(data), fds
            for fd in fds:
                os.close(fd)
            with contextlib.suppress(OSError):
                _, status = os.waitpid(pid, 0)
                conn.send(str(os.waitstatus_to_exitcode(status)).encode())
            os._exit(0)
        conn.close()
        for fd in fds:
            os.close(fd)


def _become(request: dict, fds: list[int]) -> None:
    """This process as `python -m replayer.cli ARGV` started with `env` and the given streams."""
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    import random

    random.seed()
    sys.argv = ["replayer", *request["argv"]]


def main(argv: list[str]) -> None:
    path, parent = argv
    from replayer.floor.signals import die_with_parent

    die_with_parent(int(parent), signal.SIGKILL)
    from scripts.namespace_tree import MAPPED

    for name in LIBRARIES:
        __import__(name)
    for name in ("replayer", *(f"replayer.{each}" for each in MAPPED)):  # the mapped ones are not found below
        _preload(name)
    _unfilled()
    assert threading.active_count() == 1, "a fork copies only the thread that forks"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    # bound and listening under another name, then renamed: the client waits for `path` to exist, and a
    # connection between bind and listen is refused (the first command of a worker once failed so)
    unlisted = f"{path}.{os.getpid()}"
    listener.bind(unlisted)
    listener.listen(64)
    os.rename(unlisted, path)
    request, fds = _serve(listener)
    _become(request, fds)
    import runpy

    runpy.run_module("replayer.cli", run_name="__main__", alter_sys=True)


class Client:
    """Runs commands through a server of this process's own (started on first use, gone with it)."""

    def __init__(self, root: Path, scratch: Path) -> None:
        self.root, self.path = root, scratch / "forkserver.sock"
        self.server: subprocess.Popen[bytes] | None = None
        self.lock = threading.Lock()

    def _started(self) -> None:
        with self.lock:
            if self.server is None or self.server.poll() is not None:
                self._start()

    def _start(self) -> None:
        self.path.unlink(missing_ok=True)
        argv = [sys.executable, "-m", "tests.support.forkserver", str(self.path), str(os.getpid())]
        self.server = subprocess.Popen(argv, cwd=self.root, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while not self.path.exists():
            if self.server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the fork server did not start (exit {self.server.poll()})")
            time.sleep(0.02)

    def run(self, args: tuple[str, ...], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        """`args` run as `subprocess.run(replayer_argv(*args), capture_output=True, text=True, env=env,
        cwd=ROOT)` runs them."""
        self._started()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        stdin = os.open(os.devnull, os.O_RDONLY)
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as conn:
            conn.connect(str(self.path))
            request = json.dumps({"argv": list(args), "env": env}).encode()
            socket.send_fds(conn, [request], [stdin, out_w, err_w])
            for fd in (stdin, out_w, err_w):
                os.close(fd)
            with os.fdopen(out_r, "rb") as out, os.fdopen(err_r, "rb") as err:
                stderr: list[bytes] = []
                reader = threading.Thread(target=lambda: stderr.append(err.read()))
                reader.start()
                stdout = out.read()
                reader.join()
            code = int(conn.recv(64) or b"-9")
        return subprocess.CompletedProcess(["replayer", *args], code, _text(stdout), _text(b"".join(stderr)))


def _text(data: bytes) -> str:
    """As `text=True` decodes a stream: the locale's encoding, universal newlines."""
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
