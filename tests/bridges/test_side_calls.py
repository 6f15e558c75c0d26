"""The key serves the agent (issue 32, item 6), on the bridge alone with the scripted upstream: side calls
only in the shapes the adapter declares and within their output limit, a budget on every request and token
of a continuation; what is refused never reaches the upstream and is recorded."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replayer.adapters.claude_code import ClaudeCodeAdapter
from replayer.bridges.budget import worst_case
from replayer.bridges.sidecalls import SideCall, refusal
from tests.bridges.conftest import CHAT, Held, scripted_bridge, send
from tests.conftest import MINI

SHAPES = ClaudeCodeAdapter.side_calls


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


def test_a_side_call_of_no_declared_shape_is_refused_recorded_and_not_forwarded(tmp_path: Path) -> None:
    with scripted_bridge(tmp_path) as on:
        rogue = {
            "model": "claude-opus-4-8",
            "max_tokens": 64000,
            "messages": [{"role": "user", "content": "hi"}],
        }
        status, raw = send(on.unix, "POST", "/v1/messages", rogue)
        assert status == 403 and b"no shape the adapter declares" in raw
        assert send(on.unix, "GET", "/v1/models", None)[0] == 200  # a declared probe
        assert send(on.unix, "POST", CHAT, on.main)[0] == 200
    assert [(r.method, r.path) for r in on.upstream.log] == [("GET", "/v1/models"), ("POST", CHAT)]
    assert [(r.reason, r.path) for r in on.bridge.refusals] == [("undeclared_side_call", "/v1/messages")]
    assert on.bridge.mismatch is None, "a refused side call does not end the continuation"
    assert (on.bridge.counters.side_requests, on.bridge.counters.refused_requests) == (1, 1)


def test_the_request_budget_counts_side_calls_and_holds_the_main_thread(tmp_path: Path) -> None:
    with scripted_bridge(tmp_path, max_requests=2) as on:
        assert send(on.unix, "POST", CHAT, on.main)[0] == 200
        assert send(on.unix, "GET", "/v1/models", None)[0] == 200
        status, raw = send(on.unix, "GET", "/v1/models", None)
        assert status == 429 and b"2 requests were forwarded (--max-requests)" in raw
        third = Held(on)
        assert on.bridge.budget == "max_requests"
    assert third.answer()[0] == 503
    assert len(on.upstream.log) == 2
    assert [r.reason for r in on.bridge.refusals] == ["max_requests", "max_requests"]
    assert on.bridge.counters.held_requests == 1


def test_the_token_budget_counts_every_answer(tmp_path: Path) -> None:
    body = MINI.requests("toolcall")[3]["body"]
    worst = worst_case(orjson.dumps(body), body)
    with scripted_bridge(tmp_path, max_tokens=worst + 100) as on:
        assert send(on.unix, "POST", CHAT, on.main)[0] == 200  # 120 tokens reported
        second = Held(on)
        assert on.bridge.budget == "max_tokens"
    assert second.answer()[0] == 503
    assert len(on.upstream.log) == 1 and on.bridge.tokens_used() == 120
    assert [r.reason for r in on.bridge.refusals] == ["max_tokens"]
    assert f"a worst case of {worst} tokens does not fit" in on.bridge.refusals[0].detail
