"""Pi continuation through the chat-completions bridge with the pinned package's SDK in the sandbox: Pi's
native continue() (no nonce: the first request is exactly the prefix), a boundary prompt through prompt(),
the step budget and the idle timeout; the continued session file; refusals before any container."""

from __future__ import annotations

import copy
from pathlib import Path

import orjson
import pytest

from replayer.adapters.base import Rebuild
from replayer.adapters.pi import PiAdapter, PiContinuation, session
from replayer.adapters.pi.wire import to_wire
from replayer.bridges.scripted import LoggedRequest, Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn
from tests.conftest import PI, replayer
from tests.support.continuing import KEY, files_containing

SESSION = PI.fixture("tools") / "session.jsonl"


def _bash(n: int, command: str) -> Turn:
    return Turn(blocks=[ToolUseBlock(id=f"call_cont_{n}", name="bash", input={"command": command})])


def _continue(
    after_step: int, out: Path, turns: list[Turn], *extra: str
) -> tuple[int, dict, list[LoggedRequest], str]:
    ws = PI.fixture("tools") / "workspace"
    with ScriptedUpstream(Script(turns=turns, model="fake-model"), expected_key=KEY) as upstream:
        args = ["run", str(SESSION), "-n", str(after_step), "-w", str(ws), "-o", str(out), "--json"]
        args += ["--allow-degraded", "--continue", "--upstream", upstream.url, *extra]
        proc = replayer(*args, env={"OPENAI_API_KEY": KEY})
        log = [r for r in upstream.log if r.main_thread]
    result = orjson.loads((out / "result.json").read_bytes()) if (out / "result.json").exists() else {}
    return proc.returncode, result, log, proc.stderr


@pytest.mark.agent
def test_native_continue_sends_exactly_the_rebuilt_prefix(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, result, log, stderr = _continue(
        2, out, [_bash(1, "cat calc.py"), Turn(blocks=[TextBlock(text="Finished.")])]
    )
    assert code == 0, stderr
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 2)
    assert cont["input_condition"] == "replayed_boundary_only" and cont["model"] == "fake/fake-model"
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert log[0].body["messages"][1:] == expected, "no nonce: the first request is the prefix itself"
    assert "Current date:" in log[0].body["messages"][0]["content"] and any(
        "system message" in n for n in cont["gate_notes"]
    )
    assert (
        "/usr/local/lib/node_modules/@mariozechner/pi-coding-agent" in log[0].body["messages"][0]["content"]
    )
    assert str(Path.home()) not in orjson.dumps(log[0].body).decode() or str(Path.home()) == "/root"
    tool = log[1].body["messages"][-1]
    assert tool["role"] == "tool" and "a + b" in tool["content"], (
        "the continued agent ran in the rerun sandbox"
    )
    continued = session.parse(out / cont["files"]["continued_session"]).native_as(session.Native)
    wire = to_wire(continued.messages)
    assert wire[: len(expected)] == expected
    assert [m["role"] for m in wire[len(expected) :]] == ["assistant", "tool", "assistant"]
    assert files_containing(out, KEY.encode()) == []


@pytest.mark.agent
def test_a_boundary_prompt_goes_through_prompt(tmp_path: Path) -> None:
    out = tmp_path / "out"
    prompt = "Now also add a docstring."
    code, result, log, stderr = _continue(
        1, out, [Turn(blocks=[TextBlock(text="Ok.")])], "--boundary-prompt", prompt
    )
    assert code == 0, stderr
    cont = result["continuation"]
    assert cont["input_condition"] == "boundary_user_prompt_appended" and cont["gate"] == "accepted"
    assert log[0].body["messages"][-1] == {"role": "user", "content": [{"type": "text", "text": prompt}]}
    continued = session.parse(out / cont["files"]["continued_session"]).native_as(session.Native)
    assert {"role": "user", "content": [{"type": "text", "text": prompt}]} in to_wire(continued.messages)


@pytest.mark.agent
def test_the_step_budget_stops_pi(tmp_path: Path) -> None:
    out = tmp_path / "out"
    turns = [_bash(1, "ls"), _bash(2, "ls"), _bash(3, "ls"), Turn(blocks=[TextBlock(text="never")])]
    code, result, log, stderr = _continue(1, out, turns, "--max-steps", "2")
    assert code == 0, stderr
    cont = result["continuation"]
    assert (cont["agent_status"], cont["steps_used"], len(log)) == ("max_steps", 2, 2)


@pytest.mark.agent
def test_a_stalled_upstream_hits_the_idle_timeout(tmp_path: Path) -> None:
    out = tmp_path / "out"
    turns = [Turn(blocks=[TextBlock(text="late")], stall_s=60)]
    code, result, _, stderr = _continue(1, out, turns, "--idle-timeout", "3")
    assert code == 0, stderr
    assert result["continuation"]["agent_status"] == "idle_timeout"


def test_a_model_without_provider_is_refused_before_any_container(tmp_path: Path) -> None:
    code, result, log, stderr = _continue(1, tmp_path / "out", [], "--model", "fake-model")
    assert code == 4 and "provider/model" in stderr and log == [] and result == {}


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda m: m[3].update(content="tampered"), "messages[1:][2].content"),
        (
            lambda m: m.append({"role": "user", "content": [{"type": "text", "text": "extra"}]}),
            "messages[1:][4]",
        ),
        (lambda m: m.pop(), "messages[1:][3]"),
    ],
)
def test_the_gate_refuses_a_request_without_the_exact_prefix(change, path: str) -> None:
    body = copy.deepcopy(next(r["body"] for r in PI.requests("tools") if len(r["body"]["messages"]) == 5))
    prefix = copy.deepcopy(body["messages"][1:])
    facts = PiContinuation(session_file="session.jsonl", model="openai/gpt-4o-mini")
    gate = PiAdapter().gate(Rebuild(native_files=[], expected_prefix=prefix, continuation=facts), None, False)
    assert gate.route("POST", "/v1/chat/completions", copy.deepcopy(body)).kind == "main"
    change(body["messages"])
    fresh = PiAdapter().gate(
        Rebuild(native_files=[], expected_prefix=prefix, continuation=facts), None, False
    )
    decision = fresh.route("POST", "/v1/chat/completions", body)
    assert decision.kind == "refuse" and decision.mismatch is not None and decision.mismatch.path == path
