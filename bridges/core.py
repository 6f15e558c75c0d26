"""The streaming proxy core: gate every request, strip the envelope, inject the key, relay the answer as it comes.

The gate (does this request carry the prefix? what is the envelope?) is a pure object supplied by
the adapter; this module only knows HTTP. The bridge listens on a unix socket that is mounted
into the sandbox, whose network stays "none"; it never falls back to a direct connection.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol

import orjson
from pydantic import BaseModel, ConfigDict, Field

from replayer.bridges import budget, loop, sidecalls
from replayer.bridges.budget import Ledger
from replayer.bridges.difference import Mismatch
from replayer.bridges.playback import Answer, Exchange, Player, Recorder, Refusal, kept_headers
from replayer.bridges.sidecalls import PROBE, SideCall
from replayer.bridges.usage import AnswerEnds, Usage, UsageKeys
from replayer.floor.io import remove_alias, short_alias
from replayer.floor.results import BridgeCounters, BridgeRefusal, RefusalReason

if TYPE_CHECKING:
    import aiohttp
    from aiohttp import web

_HOP_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "keep-alive", "x-api-key", "authorization"}
)
MAX_REFUSALS_KEPT = 100
Spent = Literal["max_requests", "max_tokens"]
Ended = Literal["max_requests", "max_tokens", "loop"]


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
    complete: bool = False
    """The whole answer passed (or the upstream was never reached): its usage is known."""


class BridgeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    upstream: str
    """Base URL of the real model service."""
    api_key: str = Field(repr=False)
    max_main_requests: int | None = None
    max_requests: int | None = None
    """Every request forwarded, main-thread and side calls."""
    max_tokens: int | None = None
    """Tokens every answer is billed (every usage field the protocol reports), bound before forwarding: a
    request is forwarded only when its worst case fits (bridges/budget.py)."""
    ledger: Path | None = None
    """A file that holds the token budget for several continuations (a compare's variants, a batch's jobs);
    None: the continuation's own."""
    batch_ledger: Path | None = None
    """The ledger file of a batch's own budget (`replayer batch --max-tokens`), its limit in it: every request
    fits it as well as `max_tokens` (bridges/budget.py, `Ledger.outer`)."""
    models: tuple[str, ...] | None = None
    """The models the agent runs with: a side call naming any other (or one the main thread has not named)
    is refused. None: any model."""
    side_models: tuple[str, ...] = ()
    """Models a side call may name besides the main thread's: the CLI's own small model (the adapter's
    `side_call_models`), served within the side calls' share, their cap at once and the ledger, through the
    same upstream and key."""
    side_share: float = budget.SIDE_SHARE
    """The share of `max_tokens` side calls may take together."""
    max_side_calls_at_once: int = budget.MAX_SIDE_CALLS_AT_ONCE
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
        outer = Ledger.opened(config.batch_ledger) if config.batch_ledger is not None else None
        self.ledger = (
            Ledger(config.max_tokens, config.ledger, outer) if config.max_tokens is not None else outer
        )
        self._models = set(config.models or ())
        self._side_open = 0
        self._side_charged = 0
        self._side_reserved = 0
        self._exchanges: set[asyncio.Task[Any]] = set()
        """The exchanges under way: closing the bridge ends them, and so settles their reservations."""
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
        import aiohttp
        from aiohttp import web

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
        for task in self._exchanges:
            task.cancel()
        await asyncio.gather(*self._exchanges, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
        if self._alias is not None:
            remove_alias(self._alias)

    def _settle(self, reserved: int, usage: Usage, complete: bool, main: bool) -> None:
        """An exchange ended: count the usage seen; one that ended early (abandoned, cut) also keeps the rest
        of its reservation, since what it was billed cannot be known."""
        c = self.counters
        into = ("input_tokens", "output_tokens") if main else ("side_input_tokens", "side_output_tokens")
        for name, count in zip(into, (usage.input_tokens, usage.output_tokens), strict=True):
            if count is not None:
                setattr(c, name, (getattr(c, name) or 0) + count)
        kept = 0 if complete else max(0, reserved - usage.total())
        c.kept_tokens += kept
        if not main:
            self._side_reserved -= reserved
            self._side_charged += usage.total() + kept
        if self.ledger is not None:
            self.ledger.settle(reserved, usage.total() + kept)

    def tokens_used(self) -> int:
        c = self.counters
        counts = (c.input_tokens, c.output_tokens, c.side_input_tokens, c.side_output_tokens)
        return sum(n or 0 for n in counts) + c.kept_tokens

    def _over_requests(self) -> tuple[Spent, str] | None:
        c, limit = self.counters, self.config.max_requests
        if limit is not None and c.main_requests + c.side_requests >= limit:
            return "max_requests", f"the continuation's {limit} requests were forwarded (--max-requests)"
        return None

    def _side_refusal(self, path: str, body: Any, reservation: int) -> tuple[RefusalReason, str] | None:
        """Why a declared side call may not go now: a model the agent does not use, too many at once, or
        its worst case past the side calls' share of the budget."""
        model = sidecalls.model_of(path, body)
        known = self.config.models is None or model is None
        if (
            not known
            and not self._agents_model(str(model))
            and not self._same(str(model), self.config.side_models)
        ):
            used = ", ".join(sorted(self._models)) or "none yet"
            return "side_call_model", f"names model {model}, not one the agent uses ({used})"
        if self._side_open >= self.config.max_side_calls_at_once:
            return "side_calls_at_once", f"{self._side_open} side calls are already forwarded"
        limit = self.config.max_tokens
        if limit is not None:
            share = int(limit * self.config.side_share)
            if self._side_charged + self._side_reserved + reservation > share:
                return (
                    "side_call_share",
                    f"its worst case of {reservation} tokens does not fit the side calls' share "
                    f"({self._side_charged} billed, {self._side_reserved} reserved of {share})",
                )
        return None

    def _agents_model(self, model: str) -> bool:
        """`model` is the continuation's, or one a main-thread request has named."""
        return self._same(model, self._models)

    @staticmethod
    def _same(model: str, models: Iterable[str]) -> bool:
        return any(sidecalls.same_model(model, m) for m in models)

    def _reserve(self, reservation: int) -> tuple[Spent, str] | None:
        if self.ledger is None:
            return None
        refuser, charged, reserved = self.ledger.reserve(reservation)
        if refuser is None:
            return None
        if refuser.path is not None and refuser.path == self.config.batch_ledger:
            whose, flag = "batch's", "replayer batch --max-tokens"
        else:
            whose, flag = ("shared" if self.config.ledger is not None else "continuation's"), "--max-tokens"
        return (
            "max_tokens",
            f"a worst case of {reservation} tokens does not fit the {whose} {refuser.limit} "
            f"({flag}; {charged} billed, {reserved} reserved)",
        )

    def _refusal(self, entry: LoggedExchange, reason: RefusalReason, detail: str) -> None:
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
        from aiohttp import web

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
        main = decision.kind == "main"
        data = raw if decision.body is None else orjson.dumps(decision.body)
        cap = (
            budget.DEFAULT_OUTPUT_CAP
            if main
            else sidecalls.output_cap(self.config.side_calls, request.method, request.path_qs, sent)
        )
        reservation = budget.worst_case(data, sent, cap)
        over: tuple[Ended, str] | None = self._over_requests()
        if main:
            limit = self.config.max_main_requests
            self.rounds = self.rounds.sent(raw)
            if over is None and self.rounds.looping(self.config.loop_limit):
                over = (
                    "loop",
                    f"the same request after the same answer {self.rounds.repeats} times (--loop-limit)",
                )
            if over is None:
                over = self._reserve(reservation)
            if over is not None or (limit is not None and self.counters.main_requests >= limit):
                # Over a budget: never forwarded; held until the engine stops the agent.
                if over is None and self.ledger is not None:
                    self.ledger.settle(reservation, 0)
                self.counters.held_requests += 1
                if over is not None:
                    self._refusal(entry, *over)
                self.budget = "max_steps" if over is None else over[0]
                entry.kind = "held"
                assert self._release is not None
                await self._release.wait()
                return web.Response(status=503)
            self.counters.main_requests += 1
            model = sidecalls.model_of(request.path, sent)
            if model is not None:
                self._models.add(model)
        else:
            refused = (
                over or self._side_refusal(request.path, sent, reservation) or self._reserve(reservation)
            )
            if refused is not None:
                self._refusal(entry, *refused)
                # a side call that may go later is 429 (retried); one that never may, 403
                entry.status = (
                    429 if refused[0] in ("side_calls_at_once", "max_requests", "max_tokens") else 403
                )
                message = f"sandbox-replayer bridge refused: {refused[1]}"
                return web.json_response(self.dialect.error_body(message), status=entry.status)
            self.counters.side_requests += 1
            self._side_open += 1
            self._side_reserved += reservation
        task = asyncio.current_task()
        assert task is not None
        self._exchanges.add(task)
        try:
            if self.player is not None:
                return await self._play(request, decision.kind, sent, entry, reservation)
            return await self._forward(request, data, entry, sent, reservation)
        finally:
            self._exchanges.discard(task)
            if not main:
                self._side_open -= 1

    async def _play(
        self, request: web.Request, kind: str, body: Any, entry: LoggedExchange, reservation: int
    ) -> web.StreamResponse:
        from aiohttp import web

        assert self.player is not None and kind in ("main", "side")
        answer = self.player.answer(
            "main" if kind == "main" else "side", request.method, request.path_qs, body
        )
        if isinstance(answer, Refusal):
            self._settle(reservation, Usage(), True, kind == "main")
            model = sidecalls.model_of(request.path, body)
            small = model is not None and self._same(str(model), self.config.side_models)
            if kind == "side" and small and not self._agents_model(str(model)):
                # the CLI's small model, which a cassette recorded before it was served does not hold: refused
                # as it was then (the agent goes on without it), not a difference from the recording
                self._refusal(
                    entry, "side_call_model", f"names model {model}, which the cassette does not hold"
                )
                entry.status = 403
                message = f"sandbox-replayer bridge refused a side call: names model {model}"
                return web.json_response(self.dialect.error_body(message), status=403)
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
        ends = AnswerEnds(self.dialect.usage_keys)
        ends.add(answer.body)
        self._settle(reservation, ends.usage(), True, kind == "main")
        self._touch()
        return web.Response(status=answer.status, body=answer.body, headers=answer.headers)

    async def _forward(
        self, request: web.Request, data: bytes, entry: LoggedExchange, sent: Any, reservation: int
    ) -> web.StreamResponse:
        """`sent`: the body forwarded, as JSON (what a recording keeps). Whatever way the exchange ends (the
        agent gone, the upstream cut, the bridge closing), its reservation is settled."""
        assert self._session is not None
        ends = AnswerEnds(self.dialect.usage_keys)
        try:
            return await self._relay(request, data, entry, sent, ends)
        finally:
            self._settle(reservation, ends.usage(), entry.complete, entry.kind == "main")

    async def _relay(
        self, request: web.Request, data: bytes, entry: LoggedExchange, sent: Any, ends: AnswerEnds
    ) -> web.StreamResponse:
        import aiohttp
        from aiohttp import web

        assert self._session is not None
        seq = self.recorder.next_seq() if self.recorder is not None else 0
        recorded = bytearray()
        answer = bytearray()  # a main-thread answer, for the loop guard (bounded: longer is not compared)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_HEADERS}
        headers.update(self.dialect.auth_headers(self.config.api_key))
        url = self.config.upstream.rstrip("/") + request.path_qs
        sent_at = time.monotonic()
        try:
            upstream = await self._session.request(request.method, url, data=data, headers=headers)
        except aiohttp.ClientConnectorError as exc:
            entry.complete = True  # never reached the upstream: nothing billed
            return self._unreachable(entry, exc)
        except aiohttp.ClientError as exc:
            return self._unreachable(entry, exc)
        async with upstream:
            entry.status = upstream.status
            out_headers = {k: v for k, v in upstream.headers.items() if k.lower() not in _HOP_HEADERS}
            response = web.StreamResponse(status=upstream.status, headers=out_headers)
            await response.prepare(request)
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
                    entry.complete = True
            except ConnectionResetError:  # the agent went before the answer ended
                return response
            except (TimeoutError, aiohttp.ClientError):
                # The upstream failed mid-stream: end the agent's stream the same way, without a clean EOF.
                self.counters.upstream_errors += 1
                if request.transport is not None:
                    request.transport.close()
                return response
            finally:
                if self.recorder is not None:
                    self._record(
                        seq,
                        entry,
                        request,
                        sent,
                        upstream.status,
                        dict(upstream.headers),
                        recorded,
                        entry.complete,
                    )
            if upstream.status >= 500:
                self.counters.upstream_errors += 1
            if entry.kind == "main":
                self.rounds = self.rounds.answered(
                    bytes(answer) if entry.complete and upstream.status < 300 else None
                )
            await response.write_eof()
            return response

    def _unreachable(self, entry: LoggedExchange, exc: Exception) -> web.StreamResponse:
        from aiohttp import web

        self.counters.upstream_errors += 1
        entry.status = 502
        return web.json_response(
            self.dialect.error_body(f"upstream unreachable: {type(exc).__name__}"), status=502
        )

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
