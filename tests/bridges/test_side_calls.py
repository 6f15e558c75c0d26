"""The key serves the agent (issue 32, item 6), on the bridge alone with the scripted upstream: side calls
only in the shapes the adapter declares and within their output limit, a budget on every request and token
of a continuation; what is refused never reaches the upstream and is recorded."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import aiohttp
import orjson
import pytest

from replayer.adapters.claude_code import ClaudeCodeAdapter
from replayer.bridges.budget import worst_case
from replayer.bridges.chat import ChatDialect, ChatPrefixGate
from replayer.bridges.core import Bridge, BridgeConfig
from replayer.bridges.scripted import Script, ScriptedUpstream, TextBlock, Turn
from replayer.bridges.sidecalls import PROBE, SideCall, refusal
from replayer.floor.io import remove_alias, short_alias
from tests.conftest import MINI

KEY = "sk-side-call-test-key"
SHAPES = ClaudeCodeAdapter.side_calls
CHAT = "/v1/chat/completions"


@pytest.mark.parametrize(
    ("method", "path", "body", "why"),
    [
        ("HEAD", "/", None, None),
        ("POST", "/v1/messages/count_tokens", {"messages": []}, None),
        ("POST", "/v1/messages?beta=true", {"max_tokens": 512, "messages": []}, None),
        ("POST", "/v1/messages?beta=true", {"max_tokens": 32000, "messages": []}, None),
        ("POST", "/v1/messages", {"max_tokens": 64000, "messages": []}, "side_call_max_tokens"),
        ("POST", "/v1/messages", {"max_tokens": 64000, "tools": [{"name": "Bash"}]}, None),
        ("POST", "/v1/messages", {"max_tokens": 200000, "tools": [{"name": "Bash"}]}, "side_call_max_tokens"),
        ("POST", "/v1/complete", {"max_tokens": 10}, "undeclared_side_call"),
        ("POST", "/v1/messages/batches", {"requests": []}, "undeclared_side_call"),
        ("GET", "/v1/models", {"x": 1}, "undeclared_side_call"),
    ],
    ids=[
        "probe",
        "count-tokens",
        "title",
        "small-model-2.1",
        "small-model-over",
        "sub-agent",
        "sub-agent-over",
        "other-path",
        "batches",
        "get-with-body",
    ],
)
def test_claude_codes_declared_side_calls(method: str, path: str, body: object, why: str | None) -> None:
    raw = orjson.dumps(body) if body is not None else b""
    found = refusal(SHAPES, method, path, body, raw)
    assert (found[0] if found else None) == why, found


def test_gemini_asks_in_its_generation_config() -> None:
    shapes = (SideCall(name="generate", path=r"/v1beta/models/[^/]+:generateContent", max_tokens=100),)
    body = {"contents": [], "generationConfig": {"maxOutputTokens": 101}}
    path = "/v1beta/models/m:generateContent"
    assert refusal(shapes, "POST", path, body, b"{}") == (
        "side_call_max_tokens",
        "asks for 101 output tokens, a generate call at most 100",
    )


async def _send(unix: str, method: str, path: str, body: dict | None) -> tuple[int, bytes]:
    async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=unix)) as session:
        data = orjson.dumps(body) if body is not None else None
        headers = {"authorization": "Bearer sk-placeholder", "content-type": "application/json"}
        async with session.request(method, "http://bridge" + path, data=data, headers=headers) as r:
            return r.status, await r.read()


def _bridge(tmp_path: Path, **budget: int) -> tuple[ScriptedUpstream, Bridge, str, dict]:
    body = MINI.requests("toolcall")[3]["body"]
    (tmp_path / "sock").mkdir()
    upstream = ScriptedUpstream(
        Script(turns=[Turn(blocks=[TextBlock(text="Done.")], repeat=True)], model="fake-model"),
        expected_key=KEY,
    ).__enter__()
    config = BridgeConfig(upstream=upstream.url, api_key=KEY, side_calls=(PROBE,), **budget)
    bridge = Bridge(
        ChatPrefixGate(body["messages"]), ChatDialect(), config, tmp_path / "sock" / "bridge.sock"
    )
    bridge.__enter__()
    return upstream, bridge, str(short_alias(tmp_path / "sock") / "bridge.sock"), body


def test_a_side_call_of_no_declared_shape_is_refused_recorded_and_not_forwarded(tmp_path: Path) -> None:
    upstream, bridge, unix, main = _bridge(tmp_path)
    try:
        rogue = {
            "model": "claude-opus-4-8",
            "max_tokens": 64000,
            "messages": [{"role": "user", "content": "hi"}],
        }
        status, raw = asyncio.run(_send(unix, "POST", "/v1/messages", rogue))
        assert status == 403 and b"no shape the adapter declares" in raw
        assert asyncio.run(_send(unix, "GET", "/v1/models", None))[0] == 200  # a declared probe
        assert asyncio.run(_send(unix, "POST", CHAT, main))[0] == 200
    finally:
        bridge.close()
        upstream.__exit__(None)
        remove_alias(Path(unix).parent)
    assert [(r.method, r.path) for r in upstream.log] == [("GET", "/v1/models"), ("POST", CHAT)]
    assert [(r.reason, r.path) for r in bridge.refusals] == [("undeclared_side_call", "/v1/messages")]
    assert bridge.mismatch is None, "a refused side call does not end the continuation"
    assert (bridge.counters.side_requests, bridge.counters.refused_requests) == (1, 1)


def test_the_request_budget_counts_side_calls_and_holds_the_main_thread(tmp_path: Path) -> None:
    upstream, bridge, unix, main = _bridge(tmp_path, max_requests=2)
    held: list[tuple[int, bytes]] = []
    try:
        assert asyncio.run(_send(unix, "POST", CHAT, main))[0] == 200
        assert asyncio.run(_send(unix, "GET", "/v1/models", None))[0] == 200
        status, raw = asyncio.run(_send(unix, "GET", "/v1/models", None))
        assert status == 429 and b"2 requests were forwarded (--max-requests)" in raw
        third = threading.Thread(target=lambda: held.append(asyncio.run(_send(unix, "POST", CHAT, main))))
        third.start()
        while bridge.budget is None and third.is_alive():
            third.join(0.05)
        assert bridge.budget == "max_requests"
    finally:
        bridge.close()  # releases the held request
        upstream.__exit__(None)
        remove_alias(Path(unix).parent)
    third.join()
    assert held and held[0][0] == 503
    assert len(upstream.log) == 2
    assert [r.reason for r in bridge.refusals] == ["max_requests", "max_requests"]
    assert bridge.counters.held_requests == 1


def test_the_token_budget_counts_every_answer(tmp_path: Path) -> None:
    body = MINI.requests("toolcall")[3]["body"]
    worst = worst_case(orjson.dumps(body), body)
    upstream, bridge, unix, main = _bridge(tmp_path, max_tokens=worst + 100)
    held: list[tuple[int, bytes]] = []
    try:
        assert asyncio.run(_send(unix, "POST", CHAT, main))[0] == 200  # 120 tokens reported
        second = threading.Thread(target=lambda: held.append(asyncio.run(_send(unix, "POST", CHAT, main))))
        second.start()
        while bridge.budget is None and second.is_alive():
            second.join(0.05)
        assert bridge.budget == "max_tokens"
    finally:
        bridge.close()
        upstream.__exit__(None)
        remove_alias(Path(unix).parent)
    second.join()
    assert held and held[0][0] == 503
    assert len(upstream.log) == 1 and bridge.tokens_used() == 120
    assert [r.reason for r in bridge.refusals] == ["max_tokens"]
    assert f"a worst case of {worst} tokens does not fit" in bridge.refusals[0].detail
