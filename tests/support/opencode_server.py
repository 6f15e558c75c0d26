"""Drive the real pinned `opencode serve` in the sandbox through its HTTP API (recorder only).

The server listens on 127.0.0.1 inside the container (no network); a socat in the container exposes it on a
unix socket of the mounted socket folder, which the host speaks HTTP/1.1 to. While the prompts run, the
host keeps `GET /event` and `GET /global/event` open and stores their bytes as they arrive (the SSE dumps).
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.opencode import bundle
from replayer.adapters.sandbox_paths import AGENT_HOME
from replayer.bridges.scripted import Script
from replayer.floor.pins import load_pins
from replayer.sandboxes.docker import DockerSandbox, connect
from tests.support.continuing import scripted
from tests.support.opencode_cli import CWD, MODEL, PORT, PROVIDER, SOCK_DIR

SERVER_PORT = 4096
STREAMS = {"event.sse": "/event", "global-event.sse": "/global/event"}
"""Dump file -> the SSE route it records."""
_TIMEOUT_S = 180.0
_IDLE = b'"session.idle"'
"""The event the server sends once a prompt's loop has ended."""
_SUBSCRIBE_S = 1.0
"""The server sends `server.connected` before it subscribes the stream to its bus: events published just
after it can be missed (seen on /global/event)."""


class _UnixHTTP(http.client.HTTPConnection):
    def __init__(self, path: Path, timeout: float = _TIMEOUT_S):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = str(path)

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def _request(sock: Path, method: str, route: str, body: Any = None, timeout: float = _TIMEOUT_S) -> bytes:
    conn = _UnixHTTP(sock, timeout)
    try:
        data = None if body is None else orjson.dumps(body)
        headers = {"Content-Type": "application/json"} if data is not None else {}
        conn.request(method, route, body=data, headers=headers)
        response = conn.getresponse()
        payload = response.read()
    finally:
        conn.close()
    if response.status != 200:
        raise RuntimeError(f"{method} {route}: HTTP {response.status}: {payload[:500]!r}")
    return payload


class _Stream:
    """One SSE route held open; every byte it sends is kept, and the events are counted as they come."""

    def __init__(self, sock: Path, route: str):
        self.data = bytearray()
        self.lock = threading.Lock()
        self._conn = _UnixHTTP(sock, timeout=_TIMEOUT_S)
        self._conn.request("GET", route, headers={"Accept": "text/event-stream"})
        self._response = self._conn.getresponse()
        if self._response.status != 200:
            raise RuntimeError(f"GET {route}: HTTP {self._response.status}")
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while line := self._response.readline():
                with self.lock:
                    self.data.extend(line)
        except (OSError, http.client.HTTPException):
            pass  # closed by close()

    def count(self, needle: bytes) -> int:
        with self.lock:
            return bytes(self.data).count(needle)

    def close(self) -> bytes:
        with self.lock:
            data = bytes(self.data)
        if self._conn.sock is not None:
            self._conn.sock.shutdown(socket.SHUT_RDWR)  # the reader sees the end of the stream
        self._thread.join(10)
        self._conn.close()
        return data


def _wait(ready: Any, what: str, timeout_s: float = _TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _answers(sock: Path) -> bool:
    """The first request may hang while the server boots its instance: asked again after a while."""
    try:
        _request(sock, "GET", "/session", timeout=15)
    except (OSError, RuntimeError, http.client.HTTPException):
        return False
    return True


def run_opencode_server(
    *, sessions: list[list[str]], workspace: Path, home: Path, sockets: Path, script: Script
) -> tuple[list[tuple[str, bytes]], dict[str, bytes], list[dict]]:
    """For each list of prompts, one after the other: create a session through the API and send it each
    prompt (`POST /session/{id}/message`, which returns once the model has finished); then
    `GET /session/{id}/message`. The event streams stay open across all of them.

    Returns each session's id and that body, the SSE dumps (`STREAMS`) and the upstream log."""
    bundle.write_config(home, PROVIDER, MODEL, f"http://127.0.0.1:{PORT}/v1")
    api = sockets / "server.sock"
    with scripted("opencode", script, unix_path=sockets / "upstream.sock") as upstream:
        binds = {CWD: (workspace, False), AGENT_HOME: (home, False), SOCK_DIR: (sockets, False)}
        binds.update(bundle.binds())
        run_id = f"opencode-serve-{uuid.uuid4().hex[:8]}"
        with DockerSandbox.start(
            connect(), load_pins().base_image.tag, binds=binds, workdir=CWD, run_id=run_id
        ) as box:
            box.forward_port(PORT, f"{SOCK_DIR}/upstream.sock")
            serve = [bundle.binary(), "serve", "--hostname", "127.0.0.1", "--port", str(SERVER_PORT)]
            server = box.start_exec(serve, workdir=CWD, env=bundle.base_env())
            box.spawn(["socat", f"UNIX-LISTEN:{SOCK_DIR}/server.sock,fork", f"TCP:127.0.0.1:{SERVER_PORT}"])
            _wait(lambda: _answers(api), "opencode serve")
            streams = {name: _Stream(api, route) for name, route in STREAMS.items()}
            _wait(lambda: all(s.count(b"server.connected") for s in streams.values()), "the event streams")
            time.sleep(_SUBSCRIBE_S)
            done, recorded = 0, []
            for prompts in sessions:
                session = str(orjson.loads(_request(api, "POST", "/session", {}))["id"])
                for prompt in prompts:
                    body = {"parts": [{"type": "text", "text": prompt}]}
                    _request(api, "POST", f"/session/{session}/message", body)
                    done += 1
                    _wait(lambda n=done: all(s.count(_IDLE) >= n for s in streams.values()), "session.idle")
                recorded.append((session, _request(api, "GET", f"/session/{session}/message")))
            dumps = {name: stream.close() for name, stream in streams.items()}
            if not all(dump.count(b'"session.created"') >= len(sessions) for dump in dumps.values()):
                raise RuntimeError("an event stream missed the session's creation: record again")
            if server.wait(0):
                raise RuntimeError(f"opencode serve ended early: {bytes(server.stderr)[-2000:]!r}")
            server.stop()
        log = [r.model_dump() for r in upstream.log]
    return recorded, dumps, log
