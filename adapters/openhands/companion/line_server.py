"""The request loop both OpenHands companions serve their reruns with (stdlib only: it runs under either
pinned interpreter, imported from the companion's folder)."""

import json
import os
import socket
import sys


def serve_lines(socket_path, handle):
    """Answer each JSON request line on the unix socket with `handle(request)` as one JSON line, until the
    host closes it; an exception is answered {"error": "Type: message"}, which the host raises as a
    one-line error."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(socket_path)
    server.listen(1)
    conn, _ = server.accept()
    stream = conn.makefile("rwb")
    for line in stream:
        request = json.loads(line)
        try:
            answer = handle(request)
        except Exception as exc:
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        stream.write(json.dumps(answer, default=str).encode() + b"\n")
        stream.flush()


def run_then_exit(mode, *args):
    """Run a companion's mode, then end the process at once: everything is answered and written by then,
    and the runtime's leftover non-daemon threads and the interpreter's own exit took seconds more. An
    exception still ends it as usual (traceback, status 1)."""
    try:
        mode(*args)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(0)
