"""A scripted model service: Anthropic Messages, OpenAI chat completions and Responses, real SSE.

The test suite's only stand-in (there is no model service here), the built-in mock model of
`--upstream mock` (replayer/pipeline/mock.py), and the replay model of the driven reruns: there the turns are
fed one at a time (`fed=True`), each main request held until the rerunner hands over the next
historical turn. Main-thread requests consume the turns in order; side calls get a short text. Which
requests are the main thread is the agent's to say (`main_thread`, from its adapter's
`Launcher.main_thread`): by default every model request is. Streaming and non-streaming answers follow each
API.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Discriminator, Tag

if TYPE_CHECKING:
    from aiohttp import web


MainThread = Callable[[str, Any], bool]
"""Whether a request (its path, its parsed body) belongs to the agent's main conversation."""


def every_request(path: str, body: Any) -> bool:
    """The default: every model request is the main thread (an agent that makes no side calls)."""
    return True


SIDE_TEXT = "Side answer."
"""What a side call (a title, a summary, a warm-up) is answered."""


class TextBlock(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["text"] = "text"
    text: str


class ToolUseBlock(BaseModel):
    model_config = ConfigDict(extra="forbid")
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]
    arguments: str | None = None
    """(Responses) the arguments string verbatim, when it must be the recorded one; else `input` as JSON."""


class CustomToolBlock(BaseModel):
    """A freeform tool call (Responses `custom_tool_call`, e.g. Codex's apply_patch)."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["custom_tool"] = "custom_tool"
    id: str
    name: str
    input: str


class ItemBlock(BaseModel):
    """(Responses only) an output item sent verbatim: a reasoning item, a hosted tool's call (web_search_call).
    The other protocols have no such item and leave it out."""

    model_config = ConfigDict(extra="forbid")
    type: Literal["item"] = "item"
    item: dict[str, Any]


def _block_type(value: Any) -> str:
    """A block's `type`, which says which block it is (a block written without one is text)."""
    found = value.get("type", "text") if isinstance(value, dict) else getattr(value, "type", "text")
    return str(found)


Block = Annotated[
    Annotated[TextBlock, Tag("text")]
    | Annotated[ToolUseBlock, Tag("tool_use")]
    | Annotated[CustomToolBlock, Tag("custom_tool")]
    | Annotated[ItemBlock, Tag("item")],
    Discriminator(_block_type),
]
"""One block of a turn, chosen by its `type`: a bad block is reported as that block (a tool_use without
`id`), not as a mismatch with every other kind."""


class Turn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    blocks: list[Block]
    fail_after_events: int | None = None
    """Drop the connection after this many SSE events (an upstream failing mid-stream)."""
    stall_s: float = 0.0
    """Wait this long before answering (a stalled upstream)."""
    repeat: bool = False
    """Serve this turn again for every later request (e.g. an upstream that always fails)."""
    usage: dict[str, int] | None = None
    """The usage the answer reports, in the protocol's own fields (Anthropic's cache fields, Responses'
    `input_tokens`...): for Anthropic, all but `output_tokens` in `message_start`, `output_tokens` in
    `message_delta`. None: 100 input and 20 output tokens."""


class Script(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turns: list[Turn]
    final_text: str = "Done."
    model: str = "claude-sonnet-5"
    message_id_prefix: str = "msg_fake"
    by_history: bool = False
    """Pick the turn from the request, not from a counter: the first turn whose tool calls the request does
    not answer yet. Parallel conversations (compare's forks) then each get the whole script."""


class LoggedRequest(BaseModel):
    method: str
    path: str
    headers: dict[str, str]
    body: Any = None
    main_thread: bool = False
    turn: int | None = None
    key_ok: bool | None = None
    """Whether the request carried the expected key (None when no key was expected)."""


class ScriptedUpstream:
    """Serve `script` on a unix socket or on 127.0.0.1; `log` holds every request received."""

    def __init__(
        self,
        script: Script,
        *,
        unix_path: Path | None = None,
        chunk_delay_s: float = 0.0,
        expected_key: str | None = None,
        by_model: dict[str, Script] | None = None,
        fed: bool = False,
        closing: Callable[[Any], Turn] | None = None,
        main_thread: MainThread = every_request,
        side_usage: dict[str, int] | None = None,
    ):
        """`by_model`: the script for requests naming that model (others get `script`). `fed`: main
        requests wait for `feed()` instead of taking the script's turns; `main_bodies` receives them.
        `closing`: the answer past the script's turns, from the request (default: the final text).
        `main_thread`: which requests take the script's turns (the agent's `Launcher.main_thread`); the others
        are side calls and get a short text (reporting `side_usage`, as `Turn.usage`)."""
        self.main_thread = main_thread
        self.side_turn = Turn(blocks=[TextBlock(text=SIDE_TEXT)], usage=side_usage)
        self.closing = closing
        self.expected_key = expected_key
        self.script = script
        self.by_model = by_model or {}
        self.unix_path = unix_path
        self.chunk_delay_s = chunk_delay_s
        self.log: list[LoggedRequest] = []
        self.next_turn = 0
        self.port: int | None = None
        self.fed = fed
        self.main_bodies: queue.Queue[Any] = queue.Queue()
        """(fed) Each main request's body as it arrives: the previous turn's tools have run."""
        self._turns: asyncio.Queue[Turn | None] | None = None
        self._loop = asyncio.new_event_loop()
        self._runner: web.AppRunner | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    # lifecycle -------------------------------------------------------------------------------
    def __enter__(self) -> ScriptedUpstream:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def feed(self, turn: Turn) -> None:
        """(fed) The answer to the oldest held main request, or to the next one."""
        assert self._turns is not None
        self._loop.call_soon_threadsafe(self._turns.put_nowait, turn)

    async def _next_turn(self, body: Any) -> Turn:
        from aiohttp import web

        if not self.fed:
            return self._take_turn(body)
        assert self._turns is not None
        self.main_bodies.put(body)
        turn = await self._turns.get()
        if turn is None:  # closing: a request still held is refused, not left hanging
            raise web.HTTPServiceUnavailable(text="the replay is over")
        return turn

    async def _start(self) -> None:
        from aiohttp import web

        self._turns = asyncio.Queue()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        if self.unix_path is not None:
            site: web.BaseSite = web.UnixSite(self._runner, str(self.unix_path))
            await site.start()
            self.unix_path.chmod(0o777)
        else:
            site = web.TCPSite(self._runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def _stop(self) -> None:
        if self._turns is not None:
            for _ in range(64):
                self._turns.put_nowait(None)
            await asyncio.sleep(0.05)  # the held handlers answer before the server goes
        if self._runner is not None:
            await self._runner.cleanup()

    # handling --------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        raw = await request.read()
        body: Any = orjson.loads(raw) if raw else None
        headers = {
            k.lower(): v
            for k, v in request.headers.items()
            if k.lower() not in ("x-api-key", "authorization")
        }
        entry = LoggedRequest(method=request.method, path=request.path_qs, headers=headers, body=body)
        if self.expected_key is not None:
            entry.key_ok = self.expected_key in (
                request.headers.get("x-api-key"),
                request.headers.get("authorization", "").removeprefix("Bearer "),
            )
        self.log.append(entry)
        if request.method != "POST":
            return web.Response(text="ok")
        if request.path.endswith("/responses"):
            entry.main_thread = True
            entry.turn = self.next_turn
            return await self._responses(request, await self._next_turn(body), f"resp_{len(self.log):03d}")
        if request.path.endswith("/chat/completions") and not self.main_thread(request.path, body):
            return await self._chat(request, body, self.side_turn, "chatcmpl-side")
        if request.path.endswith("/chat/completions"):
            entry.main_thread = True
            entry.turn = self.next_turn
            turn = await self._next_turn(body)
            return await self._chat(request, body, turn, f"chatcmpl-{len(self.log):03d}")
        if request.path.endswith("/count_tokens"):
            return web.json_response({"input_tokens": 1000})
        if not request.path.startswith("/v1/messages"):
            return web.json_response({"type": "error", "error": {"type": "not_found_error"}}, status=404)
        if self.main_thread(request.path, body):
            entry.main_thread = True
            entry.turn = self.next_turn
            turn = await self._next_turn(body)
        else:
            turn = self.side_turn
        message_id = f"{self._script_for(body).message_id_prefix}_{len(self.log):03d}"
        if body.get("stream"):
            return await self._stream(request, turn, message_id)
        if turn.fail_after_events is not None:
            request.transport.close()  # type: ignore[union-attr]
            return web.Response(status=500)
        return web.json_response(self._message(turn, message_id))

    def _script_for(self, body: Any) -> Script:
        model = body.get("model") if isinstance(body, dict) else None
        return self.by_model.get(model, self.script) if isinstance(model, str) else self.script

    def _take_turn(self, body: Any) -> Turn:
        script = self._script_for(body)
        if script.by_history:
            answered = self.answered_call_ids(body)
            for turn in script.turns:
                ids = [b.id for b in turn.blocks if isinstance(b, ToolUseBlock | CustomToolBlock)]
                if not ids or not all(i in answered for i in ids):
                    return turn
            return self._closing(script, body)
        if self.next_turn >= len(script.turns) and script.turns and script.turns[-1].repeat:
            return script.turns[-1]
        if self.next_turn < len(script.turns):
            turn = script.turns[self.next_turn]
        else:
            turn = self._closing(script, body)
        self.next_turn += 1
        return turn

    def _closing(self, script: Script, body: Any) -> Turn:
        if self.closing is not None:
            return self.closing(body)
        return Turn(blocks=[TextBlock(text=script.final_text)])

    def answered_call_ids(self, body: Any) -> set[str]:
        """The tool call ids a request's conversation answers (a `by_history` script's position)."""
        return _call_ids(body)

    def _message(self, turn: Turn, message_id: str) -> dict[str, Any]:
        usage = turn.usage if turn.usage is not None else {"input_tokens": 100, "output_tokens": 20}
        return {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": self.script.model,
            "content": [b.model_dump() for b in _portable(turn)],
            "stop_reason": _stop_reason(turn),
            "stop_sequence": None,
            "usage": usage,
        }

    async def _stream(self, request: web.Request, turn: Turn, message_id: str) -> web.StreamResponse:
        from aiohttp import web

        if turn.stall_s:
            await asyncio.sleep(turn.stall_s)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for sent, (name, data) in enumerate(self._events(turn, message_id)):
            if turn.fail_after_events is not None and sent >= turn.fail_after_events:
                request.transport.close()  # type: ignore[union-attr]
                return response
            await response.write(b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n")
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
        await response.write_eof()
        return response

    def _events(self, turn: Turn, message_id: str) -> list[tuple[str, dict[str, Any]]]:
        start = self._message(Turn(blocks=[]), message_id)
        start["stop_reason"] = None
        usage = turn.usage if turn.usage is not None else {"input_tokens": 100, "output_tokens": 20}
        start["usage"] = {**usage, "output_tokens": 1}
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start})
        ]
        events.append(("ping", {"type": "ping"}))
        for index, block in enumerate(_portable(turn)):
            if isinstance(block, TextBlock):
                events.append(("content_block_start", _block_start(index, {"type": "text", "text": ""})))
                for piece in _pieces(block.text):
                    delta = {"type": "text_delta", "text": piece}
                    events.append(
                        (
                            "content_block_delta",
                            {"type": "content_block_delta", "index": index, "delta": delta},
                        )
                    )
            else:
                events.append(
                    (
                        "content_block_start",
                        _block_start(
                            index, {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
                        ),
                    )
                )
                for piece in _pieces(orjson.dumps(block.input).decode()):
                    delta = {"type": "input_json_delta", "partial_json": piece}
                    events.append(
                        (
                            "content_block_delta",
                            {"type": "content_block_delta", "index": index, "delta": delta},
                        )
                    )
            events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
        events.append(
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": _stop_reason(turn), "stop_sequence": None},
                    "usage": {"output_tokens": usage.get("output_tokens", 20)},
                },
            )
        )
        events.append(("message_stop", {"type": "message_stop"}))
        return events

    # Responses (streamed: one output_item.done per item, then response.completed) ---------------
    async def _responses(self, request: web.Request, turn: Turn, rid: str) -> web.StreamResponse:
        from aiohttp import web

        if turn.stall_s:
            await asyncio.sleep(turn.stall_s)
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"type": "response.created", "response": {"id": rid}})
        ]
        for index, block in enumerate(turn.blocks):
            item = _response_item(block, f"{rid}_{index}")
            events.append(
                (
                    "response.output_item.done",
                    {"type": "response.output_item.done", "output_index": index, "item": item},
                )
            )
        usage = turn.usage or {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120}
        events.append(
            ("response.completed", {"type": "response.completed", "response": {"id": rid, "usage": usage}})
        )
        for sent, (name, data) in enumerate(events):
            if turn.fail_after_events is not None and sent >= turn.fail_after_events:
                request.transport.close()  # type: ignore[union-attr]
                return response
            await response.write(b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n")
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
        await response.write_eof()
        return response

    # chat completions ------------------------------------------------------------------------
    async def _chat(self, request: web.Request, body: Any, turn: Turn, cid: str) -> web.StreamResponse:
        from aiohttp import web

        if turn.stall_s:
            await asyncio.sleep(turn.stall_s)
        if not body.get("stream"):
            if turn.fail_after_events is not None:
                request.transport.close()  # type: ignore[union-attr]
                return web.Response(status=500)
            return web.json_response(self._chat_completion(turn, cid))
        response = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        )
        await response.prepare(request)
        for sent, chunk in enumerate(self._chat_chunks(turn, cid)):
            if turn.fail_after_events is not None and sent >= turn.fail_after_events:
                request.transport.close()  # type: ignore[union-attr]
                return response
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    def _chat_completion(self, turn: Turn, cid: str) -> dict[str, Any]:
        text = "".join(b.text for b in turn.blocks if isinstance(b, TextBlock))
        calls = [
            {
                "id": b.id,
                "type": "function",
                "function": {"name": b.name, "arguments": orjson.dumps(b.input).decode()},
            }
            for b in turn.blocks
            if isinstance(b, ToolUseBlock)
        ]
        message: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            message["tool_calls"] = calls
        return {
            "id": cid,
            "object": "chat.completion",
            "created": 1700000000,
            "model": self.script.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
            "usage": turn.usage or {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
        }

    def _chat_chunks(self, turn: Turn, cid: str) -> list[dict[str, Any]]:
        def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> dict[str, Any]:
            return {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": self.script.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                **extra,
            }

        chunks = [chunk({"role": "assistant", "content": ""})]
        calls = 0
        for block in _portable(turn):
            if isinstance(block, TextBlock):
                chunks += [chunk({"content": piece}) for piece in _pieces(block.text)]
                continue
            pieces = _pieces(orjson.dumps(block.input).decode())
            head = {
                "index": calls,
                "id": block.id,
                "type": "function",
                "function": {"name": block.name, "arguments": ""},
            }
            chunks.append(chunk({"tool_calls": [head]}))
            chunks += [
                chunk({"tool_calls": [{"index": calls, "function": {"arguments": p}}]}) for p in pieces
            ]
            calls += 1
        chunks.append(chunk({}, "tool_calls" if calls else "stop"))
        chunks.append(
            {
                **chunk({}),
                "choices": [],
                "usage": turn.usage or {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
            }
        )
        return chunks


def _call_ids(value: Any) -> set[str]:
    """Every tool call id a request's conversation answers (Anthropic, chat and Responses spellings)."""
    found: set[str] = set()
    if isinstance(value, dict):
        for key, item in value.items():
            if key in ("tool_use_id", "tool_call_id", "call_id") and isinstance(item, str):
                found.add(item)
            else:
                found |= _call_ids(item)
    elif isinstance(value, list):
        for item in value:
            found |= _call_ids(item)
    return found


def _response_item(
    block: TextBlock | ToolUseBlock | CustomToolBlock | ItemBlock, item_id: str
) -> dict[str, Any]:
    if isinstance(block, ItemBlock):
        return block.item
    if isinstance(block, TextBlock):
        text = {"type": "output_text", "text": block.text, "annotations": []}
        return {
            "type": "message",
            "id": f"msg_{item_id}",
            "role": "assistant",
            "status": "completed",
            "content": [text],
        }
    if isinstance(block, ToolUseBlock):
        arguments = block.arguments if block.arguments is not None else orjson.dumps(block.input).decode()
        return {
            "type": "function_call",
            "id": f"fc_{item_id}",
            "call_id": block.id,
            "name": block.name,
            "arguments": arguments,
        }
    return {
        "type": "custom_tool_call",
        "id": f"ctc_{item_id}",
        "status": "completed",
        "call_id": block.id,
        "name": block.name,
        "input": block.input,
    }


def _portable(turn: Turn) -> list[TextBlock | ToolUseBlock | CustomToolBlock]:
    """The blocks every protocol has (a Responses-only item left out)."""
    return [b for b in turn.blocks if not isinstance(b, ItemBlock)]


def _stop_reason(turn: Turn) -> str:
    return "tool_use" if any(isinstance(b, ToolUseBlock) for b in turn.blocks) else "end_turn"


def _block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def _pieces(text: str, size: int = 24) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
