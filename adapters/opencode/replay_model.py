"""The replay model: a chat-completions server that answers the pinned CLI with the historical assistant turns.

OpenCode's tools run inside the compiled CLI, so the reruns let the CLI itself execute them: each
main request it sends is held until the rerunner hands over the next historical step (its tool
calls, with their original ids), streamed back as SSE. Nothing is generated. The session-title
side call gets the recorded title. It listens on a unix socket mounted into the sandbox.
"""

from __future__ import annotations

import logging
import queue
import socketserver
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict

from replayer.adapters.opencode.wire import is_title_request

log = logging.getLogger(__name__)


class Answer(BaseModel):
    """One assistant turn to stream back: text, then tool calls (id, name, arguments JSON)."""

    model_config = ConfigDict(extra="forbid")
    text: str = ""
    calls: list[tuple[str, str, str]] = []


def sse_chunks(cid: str, model: str, answer: Answer) -> list[dict[str, Any]]:
    """The chat-completion chunks of one answer, as an OpenAI-compatible server streams them."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return {
            "id": cid,
            "object": "chat.completion.chunk",
            "created": 0,
            "model": model,
            "choices": [choice],
        }

    chunks = [chunk({"role": "assistant", "content": answer.text})]
    for index, (call_id, name, arguments) in enumerate(answer.calls):
        call = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
        chunks.append(chunk({"tool_calls": [call]}))
    chunks.append(chunk({}, "tool_calls" if answer.calls else "stop"))
    usage = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    chunks.append({**chunk({}), "choices": [], "usage": usage})
    return chunks


class ReplayModel:
    """Serve on `socket_path`; `answer()` releases the oldest held main request with the next turn."""

    def __init__(self, socket_path: Path, title: str):
        self.title = title
        self.requests: queue.Queue[dict[str, Any]] = queue.Queue()
        """Bodies of main requests as they arrive (each one means: the previous step's tools finished)."""
        self._answers: queue.Queue[Answer | None] = queue.Queue()
        model = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                self._send(200, b'{"object":"list","data":[]}', "application/json")

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    self._send(400, b'{"error":{"message":"not JSON"}}', "application/json")
                    return
                if is_title_request(body):
                    self._stream(body, Answer(text=model.title))
                    return
                model.requests.put(body)
                answer = model._answers.get()
                if answer is None:  # the rerun is over: fail the request, the CLI is being stopped
                    self._send(503, b'{"error":{"message":"replay finished"}}', "application/json")
                    return
                self._stream(body, answer)

            def _send(self, status: int, data: bytes, kind: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)
                self.close_connection = True

            def _stream(self, body: Any, answer: Answer) -> None:
                chunks = sse_chunks("chatcmpl-replay", str(body.get("model", "")), answer)
                data = b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
                self._send(200, data, "text/event-stream")

        class Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
            daemon_threads = True

            def handle_error(self, request: Any, client_address: Any) -> None:
                """To the debug log, not a traceback on the user's terminal: the usual one is a request held
                when the rerun ended, answered after its CLI was stopped (a broken pipe)."""
                log.debug("replay model: a request ended in an error", exc_info=True)

        self._server = Server(str(socket_path), Handler)
        socket_path.chmod(0o777)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def answer(self, answer: Answer) -> None:
        self._answers.put(answer)

    def close(self) -> None:
        for _ in range(8):
            self._answers.put(None)  # releases held requests
        self._server.shutdown()
        self._server.server_close()
