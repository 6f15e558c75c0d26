"""The built-in mock model (`--upstream mock`), without Docker: its answer on each protocol the bridge
speaks (streamed and not), the closing turn each agent ends with, the script file, and that no key and
no service are needed."""

from __future__ import annotations

import urllib.request
from pathlib import Path
from typing import Any

import orjson
import pytest

from replayer.adapters import by_name
from replayer.floor.errors import BadInput, NoUpstream
from replayer.floor.pins import load_pins
from replayer.floor.requests import ContinueRequest
from replayer.pipeline import mock, steps
from tests.conftest import CLAUDE, replayer

BASH = [{"name": "Bash", "input_schema": {"type": "object"}}]


def _post(url: str, path: str, body: dict[str, Any]) -> bytes:
    request = urllib.request.Request(
        url + path, data=orjson.dumps(body), headers={"content-type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return answer.read()


def _sse(raw: bytes) -> list[Any]:
    """The data of each server-sent event ([DONE] left out)."""
    lines = raw.decode().replace("\r\n", "\n").splitlines()
    return [orjson.loads(line[6:]) for line in lines if line.startswith("data: ") and line != "data: [DONE]"]


def _answer(agent: str, upstream: str, path: str, body: dict[str, Any]) -> bytes:
    adapter = by_name(agent)
    with mock.serve(upstream, adapter, load_pins().agents[agent].version) as url:
        assert url.startswith("http://127.0.0.1:")
        return _post(url, path, body)


# each protocol, streamed and not: the default answer is the final text, no tool call ---------------
def test_anthropic_messages_streamed_and_not() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": BASH}
    whole = orjson.loads(_answer("claude_code", "mock", "/v1/messages", body))
    assert whole["content"] == [{"type": "text", "text": mock.FINAL_TEXT}]
    assert whole["stop_reason"] == "end_turn"
    events = _sse(_answer("claude_code", "mock", "/v1/messages", {**body, "stream": True}))
    text = "".join(e["delta"]["text"] for e in events if e["type"] == "content_block_delta")
    assert text == mock.FINAL_TEXT
    assert [e["type"] for e in events][-1] == "message_stop"
    assert not any(e.get("content_block", {}).get("type") == "tool_use" for e in events)


def test_openai_responses_streamed() -> None:
    body = {"model": "m", "input": [], "tools": [{"type": "function", "name": "shell"}], "stream": True}
    events = _sse(_answer("codex", "mock", "/v1/responses", body))
    items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert [i["type"] for i in items] == ["message"]
    assert items[0]["content"][0]["text"] == mock.FINAL_TEXT
    assert events[-1]["type"] == "response.completed"


def test_chat_completions_streamed_and_not() -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "go"}], "tools": []}
    whole = orjson.loads(_answer("opencode", "mock", "/v1/chat/completions", body))
    assert whole["choices"][0]["message"] == {"role": "assistant", "content": mock.FINAL_TEXT}
    assert whole["choices"][0]["finish_reason"] == "stop"
    chunks = _sse(_answer("pi", "mock", "/v1/chat/completions", {**body, "stream": True}))
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == mock.FINAL_TEXT
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "stop"


def test_gemini_streamed() -> None:
    body = {"contents": [{"role": "user", "parts": [{"text": "go"}]}], "tools": []}
    path = "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
    chunks = _sse(_answer("gemini_cli", "mock", path, body))
    parts = [p for c in chunks for cand in c.get("candidates", []) for p in cand["content"]["parts"]]
    assert "".join(p.get("text", "") for p in parts) == mock.FINAL_TEXT
    assert not any("functionCall" in p for p in parts)


# the closing turn: each agent's own way to end -------------------------------------------------------
def test_closing_turn_calls_the_finish_tool_when_offered() -> None:
    adapter = by_name("openhands")
    offered = {"tools": [{"type": "function", "function": {"name": "finish"}}]}
    turn = mock.closing_turn(adapter, "1.0.0", offered, "bye")
    assert [(b.type, getattr(b, "name", None)) for b in turn.blocks] == [("tool_use", "finish")]
    assert mock.closing_turn(adapter, "1.0.0", {"tools": []}, "bye").blocks[0].type == "text"


def test_closing_turn_submits_for_mini_swe_agent() -> None:
    adapter = by_name("mini_swe_agent")
    offered = {"tools": [{"type": "function", "function": {"name": "bash"}}]}
    call = mock.closing_turn(adapter, "2.2.7", offered, "bye").blocks[0]
    assert call.type == "tool_use" and adapter.probe_submit in str(call.input)
    # a version offering no tool reads its actions from the text, in its own fence
    old = mock.closing_turn(adapter, "1.17.0", {}, "bye").blocks[0]
    assert old.type == "text" and f"```bash\n{adapter.probe_submit}\n```" in old.text


def test_claude_code_closes_with_text() -> None:
    turn = mock.closing_turn(by_name("claude_code"), "2.0.64", {"tools": BASH}, "bye")
    assert [b.model_dump() for b in turn.blocks] == [{"type": "text", "text": "bye"}]
    assert turn.stall_s == 0, "an answer at once: only OpenCode's wait (it loses its last events otherwise)"
    assert mock.closing_turn(by_name("opencode"), "1.15.13", {}, "bye").stall_s == 0.5


# the script file ---------------------------------------------------------------------------------
def test_script_turns_in_order_then_the_closing_turn(tmp_path: Path) -> None:
    script = {
        "turns": [
            {"blocks": [{"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]}
        ],
        "final_text": "All done.",
    }
    path = tmp_path / "turns.json"
    path.write_bytes(orjson.dumps(script))
    body = {"model": "m", "messages": [], "tools": BASH}
    adapter = by_name("claude_code")
    with mock.serve(f"mock:{path}", adapter, "2.0.64") as url:
        first = orjson.loads(_post(url, "/v1/messages", body))
        second = orjson.loads(_post(url, "/v1/messages", body))
    assert first["content"][0]["name"] == "Bash" and first["stop_reason"] == "tool_use"
    assert second["content"] == [{"type": "text", "text": "All done."}]


@pytest.mark.parametrize(
    ("content", "said"),
    [(b"", "the script file is empty"), (b"  \n", "the script file is empty"), (b'{"turns": 3}', "turns")],
)
def test_a_bad_script_is_refused(tmp_path: Path, content: bytes, said: str) -> None:
    path = tmp_path / "turns.json"
    path.write_bytes(content)
    with pytest.raises(BadInput, match=said):
        mock.load_script(f"mock:{path}")
    with pytest.raises(BadInput, match="cannot read"):
        mock.load_script(f"mock:{tmp_path / 'absent.json'}")


@pytest.mark.parametrize(
    ("block", "said"),
    [
        ({"type": "tool_use", "name": "Bash", "input": {}}, "tool_use block 2 of turn 1 has no id"),
        (
            {"type": "tool_use", "id": "c", "name": 3, "input": {}},
            "tool_use block 2 of turn 1: name: Input should",
        ),
        ({"type": "image"}, "block 2 of turn 1 has an unknown type 'image' (text, tool_use"),
    ],
)
def test_a_bad_block_is_said_as_that_block(tmp_path: Path, block: dict, said: str) -> None:
    """Not as a mismatch with another kind of block (`TextBlock.type: Input should be 'text'`)."""
    path = tmp_path / "turns.json"
    path.write_bytes(orjson.dumps({"turns": [{"blocks": [{"type": "text", "text": "Look."}, block]}]}))
    with pytest.raises(BadInput) as refused:
        mock.load_script(f"mock:{path}")
    assert said in str(refused.value) and "TextBlock" not in str(refused.value)
    single = CLAUDE.fixture("single")
    proc = replayer(
        *("run", str(single / "session.jsonl"), "-n", "1", "-w", str(single / "workspace")),
        *("-o", str(tmp_path / "out")),
        *("--continue", "--upstream", f"mock:{path}"),
    )
    assert proc.returncode == 3 and said in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_mock_is_not_a_url() -> None:
    assert mock.is_mock("mock") and mock.is_mock("mock:turns.json")
    assert not mock.is_mock("https://mock.example") and not mock.is_mock("") and not mock.is_mock(None)


def test_no_key_is_read_for_the_mock(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    adapter = by_name("claude_code")
    assert steps.upstream_key(ContinueRequest(upstream="mock"), adapter) == mock.MOCK_KEY


# no upstream at all: a usage error that names the mock ---------------------------------------------
def test_compare_without_upstream_names_the_mock(tmp_path: Path) -> None:
    fixture = CLAUDE.fixture("write_edit")
    proc = replayer(
        "compare",
        str(fixture / "session.jsonl"),
        "-n",
        "5",
        "-w",
        str(fixture / "workspace"),
        "-o",
        str(tmp_path / "cmp"),
        "--variant",
        "base=",
        env={"REPLAYER_UPSTREAM": ""},
    )
    assert proc.returncode == NoUpstream.exit_code == 2, proc.stderr
    assert "variant base: no upstream" in proc.stderr and "--upstream mock" in proc.stderr
    assert "Traceback" not in proc.stderr
