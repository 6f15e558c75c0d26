"""The streaming proxy core: gate every request, strip the envelope, inject the key, relay the answer as it comes.

The gate (does this request carry the prefix? what is the envelope?) is a pure object supplied by
the adapter; this module only knows HTTP. The bridge listens on a unix socket that is mounted
into the sandbox, whose network stays "none"; it never falls back to a direct connection.
"""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path
from typing import Any, Literal, Protocol

import aiohttp
import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from replayer.bridges import loop, sidecalls
from replayer.bridges.difference import Mismatch
from replayer.bridges.playback import Answer, Exchange, Player, Recorder, Refusal, kept_headers
from replayer.bridges.sidecalls import PROBE, SideCall
from replayer.bridges.usage import AnswerEnds, UsageKeys
from replayer.floor.io import remove_alias, short_alias
from replayer.floor.models import BridgeCounters, BridgeRefusal

_HOP_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "x-api-key", "authorization"}
)
MAX_REFUSALS_KEPT = 100


class Decision(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["main", "side", "refuse"]
    body: Any = None
    """The body to forward (rewritten); None forwards the original bytes."""
    mismatch: Mismatch | None = None


class Gate(Protocol):
    notes: list[str]
    """What the gate accepted beyond the prefix (context items a CLI inserts), reported in the result."""

    def route(self, method: str, path: str, body: Any) -> Decision:
        """Pure: classify one request and rewrite it; called in arrival order."""
        ...


class Dialect(Protocol):
    usage_keys: UsageKeys
    """Where the protocol's answers report token usage."""

    def auth_headers(self, key: str) -> dict[str, str]: ...

    def error_body(self, message: str) -> dict[str, Any]: ...

    def to_chat(self, prefix: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A prefix of this protocol in OpenAI chat form (for exported training records)."""
        ...


Counters = BridgeCounters


class LoggedExchange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    at_s: float
    method: str
    path: str
    kind: str
    status: int | None = None
    request_bytes: int = 0
    response_bytes: int = 0
    first_byte_s: float | None = None


class BridgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    upstream: str
    """Base URL of the real model service."""
    api_key: str = Field(repr=False)
    max_main_requests: int | None = None
    max_requests: int | None = None
    """Every request forwarded, main-thread and side calls."""
    max_tokens: int | None = None
    """Tokens (input and output) of every answer; nothing more is forwarded once they reach it."""
    side_calls: tuple[SideCall, ...] = (PROBE,)
    """The side calls the adapter declares; any other is refused (bridges/sidecalls.py)."""
    kept_answer_headers: tuple[str, ...] = ()
    """Answer headers a cassette keeps besides the common ones (bridges/playback.py), as the adapter declares."""
    max_request_bytes: int = 64 * 1024 * 1024
    loop_limit: int = loop.DEFAULT_LIMIT
    """Main-thread rounds in a row the same as the one before after which nothing more is forwarded
    (bridges/loop.py)."""
    max_response_bytes: int = 512 * 1024 * 1024


class Bridge:
    """The proxy, on its own event loop in a thread, so that the synchronous engine can drive the agent."""

    def __init__(
        self,
        gate: Gate,
        dialect: Dialect,
        config: BridgeConfig,
        socket_path: Path,
        *,
        recorder: Recorder | None = None,
        player: Player | None = None,
    ):
        """`recorder`: every exchange forwarded is also recorded (a cassette). `player`: no upstream, every
        request is answered from a cassette (config.upstream is then unused)."""
        self.gate = gate
        self.recorder = recorder
        self.player = player
        self.dialect = dialect
        self.config = config
        self.socket_path = socket_path
        self.counters = Counters()
        self.log: list[LoggedExchange] = []
        self.mismatch: Mismatch | None = None
        self.refused_by: Literal["gate", "cassette"] | None = None
        self.budget: Literal["max_steps", "max_requests", "max_tokens", "loop"] | None = None
        """Which budget held a main-thread request (the engine then stops the agent)."""
        self.rounds = loop.Rounds()
        self.refusals: list[BridgeRefusal] = []
        self.last_activity = time.monotonic()
        self._started = time.monotonic()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._release: asyncio.Event | None = None
        self._alias: Path | None = None

    def __enter__(self) -> Bridge:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(30)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self._thread.is_alive():
            return
        asyncio.run_coroutine_threadsafe(self._stop(), self._loop).result(30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    async def _start(self) -> None:
        self._release = asyncio.Event()
        self._session = aiohttp.ClientSession(
            auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None, sock_connect=30)
        )
        app = web.Application(client_max_size=self.config.max_request_bytes)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
        await self._runner.setup()
        # AF_UNIX paths are limited to 108 bytes: bind through a short symlink to the state directory.
        self._alias = short_alias(self.socket_path.parent)
        await web.UnixSite(self._runner, str(self._alias / self.socket_path.name)).start()
        self.socket_path.chmod(0o777)

    async def _stop(self) -> None:
        if self._release is not None:
            self._release.set()
        if self._session is not None:
            await self._session.close()  # aborts exchanges still waiting on the upstream
        if self._runner is not None:
            await self._runner.cleanup()
        if self._alias is not None:
            remove_alias(self._alias)

    def _count_usage(self, ends: AnswerEnds, main: bool) -> None:
        usage = ends.usage()
        c = self.counters
        into = ("input_tokens", "output_tokens") if main else ("side_input_tokens", "side_output_tokens")
        for name, count in zip(into, (usage.input_tokens, usage.output_tokens), strict=True):
            if count is not None:
                setattr(c, name, (getattr(c, name) or 0) + count)

    def tokens_used(self) -> int:
        c = self.counters
        counts = (c.input_tokens, c.output_tokens, c.side_input_tokens, c.side_output_tokens)
        return sum(n or 0 for n in counts)

    def _over_budget(self) -> tuple[Literal["max_requests", "max_tokens"], str] | None:
        c, limit = self.counters, self.config.max_requests
        if limit is not None and c.main_requests + c.side_requests >= limit:
            return "max_requests", f"the continuation's {limit} requests were forwarded (--max-requests)"
        limit = self.config.max_tokens
        if limit is not None and self.tokens_used() >= limit:
            return (
                "max_tokens",
                f"{self.tokens_used()} of the continuation's {limit} tokens used (--max-tokens)",
            )
        return None

    def _refusal(
        self,
        entry: LoggedExchange,
        reason: Literal["undeclared_side_call", "side_call_max_tokens", "max_requests", "max_tokens", "loop"],
        detail: str,
    ) -> None:
        """Record a request not forwarded although the gate let it pass (at most 100 kept, all counted)."""
        self.counters.refused_requests += 1
        entry.kind = f"refused:{reason}"
        if len(self.refusals) < MAX_REFUSALS_KEPT:
            self.refusals.append(
                BridgeRefusal(
                    at_s=entry.at_s, method=entry.method, path=entry.path, reason=reason, detail=detail
                )
            )

    def _touch(self) -> None:
        self.last_activity = time.monotonic()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self._touch()
        raw = await request.read()
        self.counters.bytes_from_agent += len(raw)
        entry = LoggedExchange(
            at_s=time.monotonic() - self._started, method=request.method, path=request.path_qs, kind="side"
        )
        self.log.append(entry)
        try:
            body: Any = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            body = None
        entry.request_bytes = len(raw)
        if request.headers.get("Upgrade", "").lower() == "websocket":
            # a client that tries the Responses API's WebSocket first falls back to HTTP on 426, where
            # the gate sees every request
            entry.status = 426
            return web.Response(status=426, text="the sandbox-replayer bridge speaks HTTP only")
        decision = self.gate.route(request.method, request.path, body)
        entry.kind = decision.kind
        if decision.kind == "refuse":
            self.counters.refused_requests += 1
            if self.mismatch is None:
                self.mismatch = decision.mismatch
                self.refused_by = "gate"
            reason = decision.mismatch.reason if decision.mismatch else "refused"
            entry.status = 400
            return web.json_response(
                self.dialect.error_body(f"sandbox-replayer bridge refused: {reason}"), status=400
            )
        sent = body if decision.body is None else decision.body
        if decision.kind == "side":
            why = sidecalls.refusal(self.config.side_calls, request.method, request.path_qs, sent, raw)
            if why is not None:
                self._refusal(entry, *why)
                entry.status = 403
                message = f"sandbox-replayer bridge refused a side call: {why[1]}"
                return web.json_response(self.dialect.error_body(message), status=403)
        over: tuple[Literal["max_requests", "max_tokens", "loop"], str] | None = self._over_budget()
        if decision.kind == "main":
            limit = self.config.max_main_requests
            self.rounds = self.rounds.sent(raw)
            if over is None and self.rounds.looping(self.config.loop_limit):
                over = (
                    "loop",
                    f"the same request after the same answer {self.rounds.repeats} times (--loop-limit)",
                )
            if over is not None or (limit is not None and self.counters.main_requests >= limit):
                # Over a budget: never forwarded; held until the engine stops the agent.
                self.counters.held_requests += 1
                if over is not None:
                    self._refusal(entry, *over)
                self.budget = "max_steps" if over is None else over[0]
                entry.kind = "held"
                assert self._release is not None
                await self._release.wait()
                return web.Response(status=503)
            self.counters.main_requests += 1
        elif over is not None:
            self._refusal(entry, *over)
            entry.status = 429
            message = f"sandbox-replayer bridge refused: {over[1]}"
            return web.json_response(self.dialect.error_body(message), status=429)
        else:
            self.counters.side_requests += 1
        if self.player is not None:
            return await self._play(request, decision.kind, sent, entry)
        data = raw if decision.body is None else orjson.dumps(decision.body)
        return await self._forward(request, data, entry, sent)

    async def _play(
        self, request: web.Request, kind: str, body: Any, entry: LoggedExchange
    ) -> web.StreamResponse:
        assert self.player is not None and kind in ("main", "side")
        answer = self.player.answer(
            "main" if kind == "main" else "side", request.method, request.path_qs, body
        )
        if isinstance(answer, Refusal):
            self.counters.refused_requests += 1
            if self.mismatch is None:
                self.mismatch = answer.mismatch
                self.refused_by = "cassette"
            entry.status = 400
            return web.json_response(
                self.dialect.error_body(f"sandbox-replayer bridge refused: {answer.mismatch.reason}"),
                status=400,
            )
        entry.status = answer.status
        if kind == "main":
            self.rounds = self.rounds.answered(answer.body if answer.status < 300 else None)
        entry.first_byte_s = 0.0
        entry.response_bytes = len(answer.body)
        self.counters.bytes_from_upstream += len(answer.body)
        if answer.status < 300:
            ends = AnswerEnds(self.dialect.usage_keys)
            ends.add(answer.body)
            self._count_usage(ends, kind == "main")
        self._touch()
        return web.Response(status=answer.status, body=answer.body, headers=answer.headers)

    async def _forward(
        self, request: web.Request, data: bytes, entry: LoggedExchange, sent: Any
    ) -> web.StreamResponse:
        """`sent`: the body forwarded, as JSON (what a recording keeps)."""
        assert self._session is not None
        seq = self.recorder.next_seq() if self.recorder is not None else 0
        recorded = bytearray()
        answer = bytearray()  # a main-thread answer, for the loop guard (bounded: longer is not compared)
        complete = False
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        headers.update(self.dialect.auth_headers(self.config.api_key))
        url = self.config.upstream.rstrip("/") + request.path_qs
        sent_at = time.monotonic()
        try:
            upstream = await self._session.request(request.method, url, data=data, headers=headers)
        except aiohttp.ClientError as exc:
            self.counters.upstream_errors += 1
            entry.status = 502
            return web.json_response(
                self.dialect.error_body(f"upstream unreachable: {type(exc).__name__}"), status=502
            )
        async with upstream:
            entry.status = upstream.status
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS}
            response = web.StreamResponse(status=upstream.status, headers=out_headers)
            await response.prepare(request)
            ends = AnswerEnds(self.dialect.usage_keys)
            try:
                async for chunk in upstream.content.iter_any():
                    ends.add(chunk)
                    if entry.first_byte_s is None:
                        entry.first_byte_s = time.monotonic() - sent_at
                    self._touch()
                    entry.response_bytes += len(chunk)
                    self.counters.bytes_from_upstream += len(chunk)
                    if entry.response_bytes > self.config.max_response_bytes:
                        self.counters.upstream_errors += 1
                        break
                    if self.recorder is not None:
                        recorded += chunk
                    if entry.kind == "main" and len(answer) <= loop.MAX_ANSWER_BYTES:
                        answer += chunk
                    await response.write(chunk)
                else:
                    complete = True
            except (TimeoutError, aiohttp.ClientError):
                # The upstream failed mid-stream: end the agent's stream the same way, without a clean EOF.
                self.counters.upstream_errors += 1
                if request.transport is not None:
                    request.transport.close()
                return response
            finally:
                if self.recorder is not None:
                    self._record(
                        seq, entry, request, sent, upstream.status, dict(upstream.headers), recorded, complete
                    )
            if upstream.status >= 500:
                self.counters.upstream_errors += 1
            if upstream.status < 300:
                self._count_usage(ends, entry.kind == "main")
            if entry.kind == "main":
                self.rounds = self.rounds.answered(
                    bytes(answer) if complete and upstream.status < 300 else None
                )
            await response.write_eof()
            return response

    def _record(
        self,
        seq: int,
        entry: LoggedExchange,
        request: web.Request,
        sent: Any,
        status: int,
        headers: dict[str, str],
        data: bytearray,
        complete: bool,
    ) -> None:
        assert self.recorder is not None
        answer = Answer(
            status=status, headers=kept_headers(headers, self.config.kept_answer_headers), body=bytes(data)
        )
        kind: Literal["main", "side"] = "main" if entry.kind == "main" else "side"
        self.recorder.add(
            Exchange(
                seq=seq,
                kind=kind,
                method=request.method,
                path=request.path_qs,
                body=sent,
                answer=answer,
                complete=complete,
            )
        )
