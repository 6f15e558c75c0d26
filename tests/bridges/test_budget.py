"""Budgets that bind (issue 42, item 4), on the real bridge against the scripted upstream over the real wire
(SSE): a request's worst case is reserved before it is forwarded, every billed usage field counts, an
abandoned stream keeps its reservation, side calls get a small share, and a budget spans several
continuations through its ledger file."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from replayer.adapters.claude_code import ClaudeCodeAdapter
from replayer.bridges import budget
from replayer.bridges.anthropic import AnthropicDialect
from replayer.bridges.core import Bridge, BridgeConfig, Decision
from replayer.bridges.scripted import Script, ScriptedUpstream, TextBlock, Turn
from replayer.floor.io import remove_alias, short_alias
from replayer.floor.requests import DEFAULT_MAX_TOKENS

KEY = "sk-budget-test-key"
MODEL = "claude-sonnet-5"
MESSAGES = "/v1/messages"


class ToolsAreTheMainThread:
    """A gate that lets every request pass: with tools it is the main thread, without a side call."""

    notes: list[str] = []

    def route(self, method: str, path: str, body: Any) -> Decision:
        tools = isinstance(body, dict) and bool(body.get("tools"))
        return Decision(kind="main" if tools else "side")


def _body(prompt_bytes: int, max_tokens: int, tools: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "max_tokens": max_tokens,
        "stream": True,
        "messages": [{"role": "user", "content": "x" * prompt_bytes}],
    }
    if tools:
        body["tools"] = [{"name": "Bash", "input_schema": {"type": "object"}}]
    return body


class Rig:
    """The scripted upstream on 127.0.0.1 and the bridge before it on a unix socket."""

    def __init__(self, tmp: Path, turn: Turn, *, upstream: dict[str, Any] | None = None, **config: Any):
        self.upstream = ScriptedUpstream(
            Script(turns=[turn.model_copy(update={"repeat": True})], model=MODEL),
            expected_key=KEY,
            **(upstream or {}),
        ).__enter__()
        folder = tmp / f"sock{len(list(tmp.glob('sock*')))}"
        folder.mkdir()
        settings = {"side_calls": ClaudeCodeAdapter.side_calls, "models": (MODEL,), **config}
        self.bridge = Bridge(
            ToolsAreTheMainThread(),
            AnthropicDialect(),
            BridgeConfig(upstream=self.upstream.url, api_key=KEY, **settings),
            folder / "bridge.sock",
        ).__enter__()
        self.unix = str(short_alias(folder) / "bridge.sock")

    def close(self) -> None:
        self.bridge.close()  # releases held requests, ends the exchanges under way
        self.upstream.__exit__(None)
        remove_alias(Path(self.unix).parent)

    def billed(self) -> int:
        """What the upstream was asked to answer, as it reports it (every request forwarded bills its usage)."""
        return sum(1 for r in self.upstream.log if r.method == "POST")


async def _post(unix: str, body: dict[str, Any], abandon: bool = False) -> tuple[int, bytes]:
    """POST to the bridge; `abandon`: read the first bytes of the answer and go."""
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=unix)) as session:
        headers = {"x-api-key": "sk-placeholder", "content-type": "application/json"}
        async with session.post("http://bridge" + MESSAGES, data=orjson.dumps(body), headers=headers) as r:
            if abandon:
                return r.status, await r.content.readany()
            return r.status, await r.read()


def _post_all(unix: str, bodies: list[dict[str, Any]]) -> list[tuple[int, bytes]]:
    async def every() -> list[tuple[int, bytes]]:
        return list(await asyncio.gather(*(_post(unix, b) for b in bodies)))

    return asyncio.run(every())


def test_forty_concurrent_requests_cannot_pass_max_tokens(tmp_path: Path) -> None:
    # each request: a 60 kB prompt (20,000 tokens estimated), 8,000 output asked; each answer bills 26,000
    usage = {"input_tokens": 2_000, "cache_read_input_tokens": 16_000, "output_tokens": 8_000}
    rig = Rig(tmp_path, Turn(blocks=[TextBlock(text="ok")], usage=usage, stall_s=0.3), max_tokens=300_000)
    answers: list[tuple[int, bytes]] = []
    sender = threading.Thread(target=lambda: answers.extend(_post_all(rig.unix, [_body(60_000, 8_000)] * 40)))
    try:
        sender.start()
        counters, ledger = rig.bridge.counters, rig.bridge.ledger
        assert ledger is not None
        # until every request is forwarded or held, and every one forwarded has its answer
        while sender.is_alive() and (
            counters.main_requests + counters.held_requests < 40 or ledger.used()[1] > 0
        ):
            sender.join(0.05)
    finally:
        rig.close()
    sender.join()
    forwarded = rig.billed()
    assert forwarded > 0 and forwarded * 26_000 <= 300_000, f"{forwarded} requests billed 26,000 each"
    assert rig.bridge.tokens_used() == forwarded * 26_000
    assert rig.bridge.budget == "max_tokens" and rig.bridge.refusals[0].reason == "max_tokens"
    assert "does not fit the continuation's 300000 (--max-tokens" in rig.bridge.refusals[0].detail


def test_anthropic_cache_fields_are_counted(tmp_path: Path) -> None:
    usage = {
        "input_tokens": 3,
        "cache_creation_input_tokens": 5_000,
        "cache_read_input_tokens": 70_000,
        "output_tokens": 400,
    }
    rig = Rig(tmp_path, Turn(blocks=[TextBlock(text="ok")], usage=usage))
    try:
        assert _post_all(rig.unix, [_body(3_000, 1_000)])[0][0] == 200
    finally:
        rig.close()
    counters = rig.bridge.counters
    assert (counters.input_tokens, counters.output_tokens) == (75_003, 400)
    assert rig.bridge.tokens_used() == 75_403


def test_a_stream_abandoned_after_its_first_bytes_keeps_its_reservation(tmp_path: Path) -> None:
    usage = {"input_tokens": 900, "cache_read_input_tokens": 1_000, "output_tokens": 5_000}
    turn = Turn(blocks=[TextBlock(text="a long answer " * 200)], usage=usage)
    rig = Rig(tmp_path, turn, upstream={"chunk_delay_s": 0.05}, max_tokens=1_000_000)
    body = _body(3_000, 6_000)
    try:
        status, first = asyncio.run(_post(rig.unix, body, abandon=True))
    finally:
        rig.close()
    assert status == 200 and first.startswith(b"event: message_start")
    worst = budget.worst_case(orjson.dumps(body), body)
    counters = rig.bridge.counters
    assert counters.input_tokens == 1_900, "the usage seen (message_start) is counted"
    assert counters.kept_tokens == worst - 1_900 - (counters.output_tokens or 0)
    assert rig.bridge.tokens_used() == worst
    assert rig.bridge.ledger is not None and rig.bridge.ledger.used() == (worst, 0)


def test_a_rogue_posting_small_model_side_calls_gets_no_more_than_the_side_share(tmp_path: Path) -> None:
    """Defaults (the budget, the share, Claude Code's declared side calls): 25 small-model-shaped calls, each
    billed 40,020 tokens, at once and then one by one."""
    rig = Rig(
        tmp_path,
        Turn(blocks=[TextBlock(text="ok")]),
        upstream={
            "side_usage": {"input_tokens": 40_000, "output_tokens": 20},
            "main_thread": lambda path, body: bool(body.get("tools")),
        },
        max_tokens=DEFAULT_MAX_TOKENS,
    )
    rogue = _body(120_000, 32_000, tools=False)
    other_model = {**rogue, "model": "claude-opus-4-8"}
    try:
        at_once = _post_all(rig.unix, [rogue] * 25)
        one_by_one = [_post_all(rig.unix, [rogue])[0] for _ in range(25)]
        refused_model = _post_all(rig.unix, [other_model])[0]
    finally:
        rig.close()
    share = 100_000  # the documented share: 5% of the default 2,000,000
    assert rig.billed() > 0 and rig.billed() * 40_020 <= share, f"{rig.billed()} billed 40,020 each"
    assert share == DEFAULT_MAX_TOKENS * budget.SIDE_SHARE
    assert {s for s, _ in at_once + one_by_one} == {200, 403}
    assert refused_model[0] == 403 and b"not one the agent uses" in refused_model[1]
    assert {r.reason for r in rig.bridge.refusals} == {"side_call_share", "side_call_model"}


def test_side_calls_at_once_are_capped(tmp_path: Path) -> None:
    """Ten small title-sized side calls at once, each answer streamed slowly: two are forwarded, the others
    are answered 429 (the client may try again)."""
    rig = Rig(
        tmp_path,
        Turn(blocks=[TextBlock(text="ok")]),
        upstream={"chunk_delay_s": 0.2, "main_thread": lambda path, body: bool(body.get("tools"))},
        max_tokens=DEFAULT_MAX_TOKENS,
    )
    try:
        answers = _post_all(rig.unix, [_body(300, 512, tools=False)] * 10)
    finally:
        rig.close()
    assert sorted(s for s, _ in answers) == [200] * budget.MAX_SIDE_CALLS_AT_ONCE + [429] * 8
    assert rig.billed() == budget.MAX_SIDE_CALLS_AT_ONCE == 2
    assert {r.reason for r in rig.bridge.refusals} == {"side_calls_at_once"}


def test_a_budget_spans_every_bridge_of_its_ledger(tmp_path: Path) -> None:
    """Two continuations (a compare's variants, a batch line's jobs) on one ledger file: together they are
    billed no more than the one budget."""
    ledger = tmp_path / "out" / "token-ledger.json"
    turn = Turn(blocks=[TextBlock(text="ok")], usage={"input_tokens": 9_000, "output_tokens": 2_000})
    rigs = [Rig(tmp_path, turn, max_tokens=100_000, ledger=ledger) for _ in range(2)]

    def send(rig: Rig) -> None:  # until one is held (answered 503 when the bridge closes)
        for _ in range(6):
            if _post_all(rig.unix, [_body(30_000, 2_000)])[0][0] != 200:
                return

    senders = [threading.Thread(target=send, args=(rig,)) for rig in rigs]
    try:
        for sender in senders:
            sender.start()
        # until each continuation has ended, or has a request held over the budget
        while any(s.is_alive() and r.bridge.budget is None for s, r in zip(senders, rigs, strict=True)):
            senders[0].join(0.05)
    finally:
        for rig in rigs:
            rig.close()
    for sender in senders:
        sender.join()
    billed = sum(r.billed() for r in rigs)
    assert billed * 11_000 <= 100_000 and min(r.billed() for r in rigs) >= 1, f"{billed} billed 11,000 each"
    assert orjson.loads(ledger.read_bytes())["charged"] == billed * 11_000
    assert sum(r.bridge.tokens_used() for r in rigs) == billed * 11_000


def test_a_batch_budget_binds_over_each_continuations_own(tmp_path: Path) -> None:
    """A continuation of a batch with `--max-tokens 50000`, its own budget far larger: each request's worst
    case (12,000) must fit the batch's ledger too. Four are billed (44,000); the fifth is held, the refusal
    names the batch's budget, and the reservation the continuation's own ledger took for it is given back."""
    batch = tmp_path / "out" / "token-ledger.json"
    budget.Ledger.create(batch, 50_000)
    turn = Turn(blocks=[TextBlock(text="ok")], usage={"input_tokens": 9_000, "output_tokens": 2_000})
    rig = Rig(tmp_path, turn, max_tokens=1_000_000, batch_ledger=batch)

    def send() -> None:  # until one is held (answered 503 when the bridge closes)
        for _ in range(6):
            if _post_all(rig.unix, [_body(30_000, 2_000)])[0][0] != 200:
                return

    sender = threading.Thread(target=send)
    try:
        sender.start()
        while sender.is_alive() and rig.bridge.budget is None:
            sender.join(0.05)
    finally:
        rig.close()
    sender.join()
    assert rig.billed() == 4 and rig.bridge.budget == "max_tokens"
    [refusal] = rig.bridge.refusals
    assert (
        "does not fit the batch's 50000 (replayer batch --max-tokens; 44000 billed, 0 reserved)"
        in refusal.detail
    )
    assert rig.bridge.ledger is not None and rig.bridge.ledger.used() == (44_000, 0)
    assert orjson.loads(batch.read_bytes()) | {"reserved": 0} == {
        "charged": 44_000,
        "reserved": 0,
        "limit": 50_000,
        "smallest_refused": 12_054,
        "holders": {},
    }
    assert budget.Ledger.opened(batch).used_up()  # 6,000 left: no worst case of 12,054 can fit again


@pytest.mark.parametrize(("given", "shared"), [({"max_tokens": 50_000}, True), ({}, False)])
def test_compare_variants_share_the_budget_the_user_set(tmp_path: Path, given: dict, shared: bool) -> None:
    from replayer.floor.requests import ContinueSettings
    from replayer.verbs.compare import TOKEN_LEDGER, _shared_budget
    from replayer.verbs.variants import parse_variant

    defaults = ContinueSettings(upstream="http://127.0.0.1:9", **given).request()
    ledger = tmp_path / TOKEN_LEDGER
    runs = [_shared_budget(defaults, parse_variant(v), ledger) for v in ("a=model=m1", "b=model=m2")]
    own = _shared_budget(defaults, parse_variant("c=max_tokens=7"), ledger)
    assert [r.token_ledger for r in runs] == [tmp_path / TOKEN_LEDGER if shared else None] * 2
    assert own.token_ledger is None and own.max_tokens == 7


@pytest.mark.parametrize(("given", "shared"), [({"max_tokens": 50_000}, True), ({}, False)])
def test_a_batch_lines_budget_spans_its_jobs(tmp_path: Path, given: dict, shared: bool) -> None:
    from replayer.floor.requests import ContinueSettings
    from replayer.verbs.batch_jobs import Job
    from replayer.verbs.batch_manifest import ManifestEntry

    entry = ManifestEntry(
        trajectory=tmp_path / "t.jsonl",
        mode="continue",
        continuation=ContinueSettings(upstream="http://127.0.0.1:9", **given),
    )
    jobs = [Job(key=f"k{n}", line=3, boundary=n, entry=entry) for n in (1, 2)]
    ledgers = {j.request(tmp_path / j.key, batch=tmp_path).continuation.token_ledger for j in jobs}  # type: ignore[union-attr]
    assert ledgers == {tmp_path / "ledgers" / "line-3.json" if shared else None}


SMALL = "claude-3-5-haiku-20241022"


def test_the_clis_own_small_model_is_served_within_the_side_share(tmp_path: Path) -> None:
    """Claude Code 1.0.128's titles and summaries name its small model, which the main thread never names:
    with the adapter's `side_call_models` the bridge forwards them (through the same upstream and key), and
    the side calls' share still binds them; a side call naming another model is still refused."""
    rig = Rig(
        tmp_path,
        Turn(blocks=[TextBlock(text="ok")]),
        upstream={
            "side_usage": {"input_tokens": 10_000, "output_tokens": 20},
            "main_thread": lambda path, body: bool(body.get("tools")),
        },
        max_tokens=DEFAULT_MAX_TOKENS,
        side_models=ClaudeCodeAdapter().side_call_models("1.0.128"),
    )
    title = {**_body(3_000, 512, tools=False), "model": SMALL}
    big = {**_body(60_000, 8_000, tools=False), "model": SMALL}  # a worst case of 28,000
    try:
        served = _post_all(rig.unix, [title])[0]
        shared = [_post_all(rig.unix, [big])[0] for _ in range(12)]
        refused_model = _post_all(rig.unix, [{**title, "model": "claude-opus-4-8"}])[0]
    finally:
        rig.close()
    assert served[0] == 200 and b"message_stop" in served[1]
    assert all(r.key_ok for r in rig.upstream.log if r.method == "POST")  # the same key, the same upstream
    assert 200 in {s for s, _ in shared} and 403 in {s for s, _ in shared}  # the share binds
    assert rig.billed() * 10_020 <= DEFAULT_MAX_TOKENS * budget.SIDE_SHARE
    assert refused_model[0] == 403 and b"not one the agent uses" in refused_model[1]
    assert {r.reason for r in rig.bridge.refusals} == {"side_call_share", "side_call_model"}


def test_the_small_models_are_the_ones_each_recorded_version_sends_side_calls_to() -> None:
    """From the recordings of the real CLI (tests/fixtures/claude_code): every model a recorded side call
    without tools names is a main-thread model of the recording or the version's `side_call_models`, and
    each of those is named by a recording of that version."""
    root = Path(__file__).parents[1] / "fixtures" / "claude_code"
    adapter = ClaudeCodeAdapter()
    seen: dict[str, set[str]] = {}
    for path in sorted(root.glob("*/*/*/upstream.jsonl")):
        version = next(p for p in path.parts if p[:1].isdigit() and "." in p)
        main, side = set(), set()
        for line in path.read_bytes().splitlines():
            body = orjson.loads(line).get("body")
            if isinstance(body, dict) and body.get("model"):
                (main if body.get("tools") else side).add(body["model"])
        assert side <= main | set(adapter.side_call_models(version)), (path, side - main)
        seen.setdefault(version, set()).update(side - main)
    assert seen["1.0.128"] == {SMALL} and seen["2.0.64"] == {"claude-haiku-4-5-20251001"}
    for version, models in seen.items():
        assert set(adapter.side_call_models(version)) <= models | set(
            adapter.side_call_models("1.0.51") if version.startswith("1.") else ()
        ), version


def test_a_cassette_without_the_small_models_side_calls_still_replays(tmp_path: Path) -> None:
    """A cassette recorded before the small model was served holds none of its side calls (they were
    refused then): replayed, such a call is refused as it was (403, `side_call_model`), not a difference
    from the recording; a side call of the agent's own model the cassette lacks still is one."""
    from replayer.bridges.playback import Player

    folder = tmp_path / "sock"
    folder.mkdir()
    config = BridgeConfig(
        upstream="http://127.0.0.1:9",
        api_key=KEY,
        side_calls=ClaudeCodeAdapter.side_calls,
        models=(MODEL,),
        side_models=ClaudeCodeAdapter().side_call_models("1.0.128"),
    )
    bridge = Bridge(
        ToolsAreTheMainThread(), AnthropicDialect(), config, folder / "bridge.sock", player=Player([], None)
    ).__enter__()
    unix = str(short_alias(folder) / "bridge.sock")
    try:
        small = _post_all(unix, [{**_body(300, 512, tools=False), "model": SMALL}])[0]
        assert small[0] == 403 and bridge.mismatch is None, small
        assert [r.reason for r in bridge.refusals] == ["side_call_model"]
        own = _post_all(unix, [_body(300, 512, tools=False)])[0]
        assert own[0] == 400 and bridge.mismatch is not None and bridge.refused_by == "cassette"
    finally:
        bridge.close()
        remove_alias(Path(unix).parent)
