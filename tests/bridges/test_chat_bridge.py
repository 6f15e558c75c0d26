"""The chat-completions bridge on its own: SSE and JSON answers relayed byte for byte, the key
injected as a bearer token, a wrong prefix refused with an OpenAI-shaped error and never forwarded."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import orjson

from replayer.bridges.chat import ChatDialect, ChatPrefixGate
from replayer.bridges.core import Bridge, BridgeConfig
from replayer.bridges.scripted import Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn
from replayer.floor.io import remove_alias, short_alias
from tests.conftest import MINI

KEY = "sk-bridge-test-key"


async def _post(url: str, body: dict, unix: str | None = None) -> tuple[int, bytes, str]:
    connector = aiohttp.UnixConnector(path=unix) if unix else None
    async with aiohttp.ClientSession(connector=connector) as session:
        headers = {"authorization": "Bearer sk-placeholder", "content-type": "application/json"}
        async with session.post(url + "/v1/chat/completions", data=orjson.dumps(body), headers=headers) as r:
            return r.status, await r.read(), r.headers.get("content-type", "")


def _turns() -> list[Turn]:
    call = ToolUseBlock(id="call_b1", name="bash", input={"command": "ls -la"})
    return [Turn(blocks=[TextBlock(text="Listing the files now, " * 5), call], repeat=True)]


def _through_bridge(
    tmp_path: Path, bodies: list[dict]
) -> tuple[list[tuple[int, bytes, str]], ScriptedUpstream]:
    prefix = MINI.requests("toolcall")[3]["body"]["messages"]
    (tmp_path / "sock").mkdir()
    with ScriptedUpstream(Script(turns=_turns(), model="fake-model"), expected_key=KEY) as upstream:
        config = BridgeConfig(upstream=upstream.url, api_key=KEY)
        with Bridge(ChatPrefixGate(prefix), ChatDialect(), config, tmp_path / "sock" / "bridge.sock"):
            alias = short_alias(tmp_path / "sock")
            try:
                answers = [asyncio.run(_post("http://bridge", b, str(alias / "bridge.sock"))) for b in bodies]
            finally:
                remove_alias(alias)
        direct = [asyncio.run(_post(upstream.url, b)) for b in bodies]
    return [*answers, *direct], upstream


def test_streamed_and_plain_answers_are_relayed_unchanged(tmp_path: Path) -> None:
    body = MINI.requests("toolcall")[3]["body"]
    streamed = {**body, "stream": True}
    answers, upstream = _through_bridge(tmp_path, [streamed, body])
    (s_status, s_bytes, s_type), (j_status, j_bytes, _), direct_stream, direct_json = answers
    assert (s_status, j_status) == (200, 200) and s_type.startswith("text/event-stream")
    assert s_bytes.endswith(b"data: [DONE]\n\n") and s_bytes.count(b"data: ") > 5
    # byte for byte what the upstream sends directly (ids differ only by the request counter)
    assert s_bytes.replace(b"chatcmpl-001", b"X") == direct_stream[1].replace(b"chatcmpl-003", b"X")
    assert orjson.loads(j_bytes)["choices"][0]["message"]["tool_calls"][0]["id"] == "call_b1"
    bridged = upstream.log[:2]
    assert all(r.key_ok for r in bridged), "the bridge replaces the placeholder with the real key"
    assert all("sk-placeholder" not in str(r.headers) for r in upstream.log)


def test_a_different_prefix_is_refused_with_an_openai_error(tmp_path: Path) -> None:
    body = MINI.requests("toolcall")[3]["body"]
    tampered = orjson.loads(orjson.dumps(body))
    tampered["messages"][3]["content"] = tampered["messages"][3]["content"].replace("calc.py", "calc2.py")
    answers, upstream = _through_bridge(tmp_path, [tampered])
    status, raw, _ = answers[0]
    assert status == 400
    error = orjson.loads(raw)["error"]
    assert (
        error["code"] == "sandbox_replayer_refused"
        and "does not carry the rebuilt prefix" in error["message"]
    )
    assert len(upstream.log) == 1, "only the direct request reached the upstream"


def test_the_gate_is_exact_then_requires_the_prefix() -> None:
    requests = MINI.requests("toolcall")
    gate = ChatPrefixGate(requests[3]["body"]["messages"])
    assert gate.route("GET", "/v1/models", None).kind == "side"
    assert gate.route("POST", "/v1/chat/completions", requests[4]["body"]).kind == "refuse", "longer first"
    assert gate.route("POST", "/v1/chat/completions", requests[3]["body"]).kind == "main"
    assert gate.route("POST", "/v1/chat/completions", requests[5]["body"]).kind == "main"
    later = gate.route("POST", "/v1/chat/completions", requests[1]["body"])
    assert later.kind == "refuse" and later.mismatch is not None
    assert later.mismatch.reason == "a later request no longer carries the rebuilt prefix"
