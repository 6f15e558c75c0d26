"""OpenCode continuation through the chat-completions bridge with the real pinned CLI: the nonce on stdin
validated and stripped, a boundary prompt kept, the replayer's own step budget (SIGINT), the idle
timeout, the continued session exported without the nonce; refusals before any container starts."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from replayer.adapters.opencode.gate import opencode_gate
from replayer.adapters.opencode.wire import to_wire
from replayer.bridges.scripted import LoggedRequest, Script, TextBlock, ToolUseBlock, Turn
from tests.conftest import OPENCODE, replayer
from tests.support.continuing import KEY, files_containing, scripted

EXPORT = OPENCODE.fixture("tools") / "export.json"


def _bash(n: int, command: str) -> Turn:
    return Turn(
        blocks=[
            ToolUseBlock(id=f"call_cont_{n}", name="bash", input={"command": command, "description": "x"})
        ]
    )


def _continue(
    after_step: int, out: Path, turns: list[Turn], *extra: str, source: Path = EXPORT
) -> tuple[int, dict, list[LoggedRequest], str]:
    ws = OPENCODE.fixture("tools") / "workspace"
    with scripted("opencode", Script(turns=turns, model="fake-model"), expected_key=KEY) as upstream:
        args = ["run", str(source), "-n", str(after_step), "-w", str(ws), "-o", str(out), "--json"]
        args += ["--continue", "--upstream", upstream.url, *extra]
        proc = replayer(*args, env={"OPENAI_API_KEY": KEY})
        log = [r for r in upstream.log if r.main_thread]
    result = orjson.loads((out / "result.json").read_bytes()) if (out / "result.json").exists() else {}
    return proc.returncode, result, log, proc.stderr


Continued = tuple[Path, int, dict, list[LoggedRequest], str]
"""The result directory, then `_continue`'s exit code, result.json, upstream log and stderr."""


LISTING = 'seq -f "line %g of a long listing {n}" 1 8000'


@pytest.fixture(scope="module")
def to_the_end(tmp_path_factory: pytest.TempPathFactory) -> Continued:
    """One continuation after step 2 that runs to its end: it reads calc.py, then four tools print 8,000 lines
    each (32,000 lines; the CLI keeps what its own bash tool keeps), then it finishes."""
    out = tmp_path_factory.mktemp("opencode-continue") / "out"
    turns = [_bash(0, "cat calc.py")] + [_bash(n + 1, LISTING.format(n=n)) for n in range(4)]
    return (out, *_continue(2, out, [*turns, Turn(blocks=[TextBlock(text="Listed.")])]))


@pytest.fixture(scope="module")
def prompted_to_the_budget(tmp_path_factory: pytest.TempPathFactory) -> Continued:
    """One continuation from the prompt alone (`-n 0`) with a boundary prompt, stopped by `--max-steps 2`
    while the model still calls tools."""
    out = tmp_path_factory.mktemp("opencode-budget") / "out"
    turns = [_bash(1, "ls"), _bash(2, "ls"), _bash(3, "ls"), Turn(blocks=[TextBlock(text="never")])]
    return (out, *_continue(0, out, turns, "--boundary-prompt", PROMPT, "--max-steps", "2"))


PROMPT = "Now also add a docstring."


@pytest.mark.agent
def test_continues_from_the_rebuilt_session_to_the_end(to_the_end: Continued) -> None:
    out, code, result, log, stderr = to_the_end
    assert code == 0, stderr
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 6)
    assert cont["input_condition"] == "replayed_boundary_only" and cont["model"] == "fake/fake-model"
    assert any("system message" in note for note in cont["gate_notes"])
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert log[0].body["messages"][1:] == expected, "the nonce was stripped: exactly the rebuilt prefix"
    assert not any("replayer-nonce" in orjson.dumps(r.body).decode() for r in log)
    assert all(r.key_ok for r in log) and len(log) == 6
    tool = log[1].body["messages"][-1]
    assert tool["role"] == "tool" and "a + b" in tool["content"], "the continued CLI ran in the rerun sandbox"
    continued = json.loads((out / cont["files"]["continued_session"]).read_text())
    wire = to_wire(continued["messages"])
    assert wire[: len(expected)] == expected
    assert [m["role"] for m in wire[len(expected) :]] == ["assistant", "tool"] * 5 + ["assistant"]
    assert files_containing(out, KEY.encode()) == []


@pytest.mark.agent
def test_a_boundary_prompt_is_kept(prompted_to_the_budget: Continued) -> None:
    out, code, result, log, stderr = prompted_to_the_budget
    assert code == 0, stderr
    cont = result["continuation"]
    assert cont["input_condition"] == "boundary_user_prompt_appended" and cont["gate"] == "accepted"
    assert log[0].body["messages"][-1] == {"role": "user", "content": PROMPT}
    continued = json.loads((out / cont["files"]["continued_session"]).read_text())
    assert {"role": "user", "content": PROMPT} in to_wire(continued["messages"])


@pytest.mark.agent
def test_the_replayer_enforces_the_step_budget(prompted_to_the_budget: Continued) -> None:
    _out, code, result, log, stderr = prompted_to_the_budget
    assert code == 0, stderr
    cont = result["continuation"]
    assert (cont["agent_status"], cont["steps_used"]) == ("max_steps", 2)
    assert cont["counters"]["held_requests"] >= 1 and len(log) == 2
    assert cont["metadata"]["opencode_step_budget"]["max_steps"] == 2


@pytest.mark.agent
def test_a_stalled_upstream_hits_the_idle_timeout(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, result, _, stderr = _continue(
        0, out, [Turn(blocks=[TextBlock(text="late")], stall_s=60)], "--idle-timeout", "3"
    )
    assert code == 0, stderr
    assert result["continuation"]["agent_status"] == "idle_timeout"


def test_a_model_without_provider_is_refused_before_any_container(tmp_path: Path) -> None:
    code, result, log, stderr = _continue(1, tmp_path / "out", [], "--model", "fake-model")
    assert code == 4 and "provider/model" in stderr and log == [] and result == {}


@pytest.mark.agent
def test_a_sub_agent_call_is_refused_unless_degraded(tmp_path: Path) -> None:
    document = orjson.loads(EXPORT.read_bytes())
    part = next(p for m in document["messages"] for p in m["parts"] if p.get("tool") == "edit")
    part["tool"] = "task"
    source = tmp_path / "export.json"
    source.write_bytes(orjson.dumps(document))
    proc = replayer(
        "run",
        str(source),
        "-n",
        "3",
        "-w",
        str(OPENCODE.fixture("tools") / "workspace"),
        "-o",
        str(tmp_path / "o"),
    )
    assert proc.returncode == 4 and "sub-agent" in proc.stderr and not (tmp_path / "o").exists()
    workspace = str(OPENCODE.fixture("tools") / "workspace")
    args = ["run", str(source), "-n", "3", "-w", workspace, "-o", str(tmp_path / "p"), "--allow-degraded"]
    proc = replayer(*args)
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((tmp_path / "p" / "result.json").read_bytes())
    assert [g["tool"] for g in result["degradations"]] == ["task"]
    kept = next(d for d in result["divergences"] if d["tool"] == "task")
    assert kept["status"] == "historical_kept"
    read = next(d for d in result["divergences"] if d["call_id"] == "call_tools_04")
    assert read["status"] == "exact", "the steps around the kept call were rerun by the CLI"


# the gate alone (pure) ---------------------------------------------------------------------------
def _first_request(name: str, after: int) -> tuple[list[dict], dict]:
    """The recorded request right after the step at history length `after`, with a nonce appended."""
    body = copy.deepcopy(
        next(r["body"] for r in OPENCODE.requests(name) if len(r["body"]["messages"]) - 1 == after)
    )
    prefix = copy.deepcopy(body["messages"][1:])
    body["messages"].append({"role": "user", "content": "replayer-nonce-abc"})
    return prefix, body


def test_the_gate_strips_the_nonce_and_reports_the_system_message() -> None:
    prefix, body = _first_request("tools", 4)
    gate = opencode_gate(prefix, "replayer-nonce-abc", keep_prompt=False)
    decision = gate.route("POST", "/v1/chat/completions", body)
    assert decision.kind == "main" and decision.body["messages"] == body["messages"][:-1]
    assert "Today's date" in gate.notes[0]
    later = copy.deepcopy(body)
    later["messages"] += [{"role": "assistant", "content": "hi"}]
    assert gate.route("POST", "/v1/chat/completions", later).body["messages"][-1] == {
        "role": "assistant",
        "content": "hi",
    }


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (lambda m: m[3].update(content="tampered"), "messages[1:][2].content"),
        (lambda m: m.pop(), "messages[1:][4]"),
        (lambda m: m.append({"role": "user", "content": "extra"}), "messages[1:][5]"),
    ],
)
def test_the_gate_refuses_a_request_without_the_exact_prefix(change, path: str) -> None:
    prefix, body = _first_request("tools", 4)
    change(body["messages"])
    decision = opencode_gate(prefix, "replayer-nonce-abc", keep_prompt=False).route(
        "POST", "/v1/chat/completions", body
    )
    assert decision.kind == "refuse" and decision.mismatch is not None
    assert decision.mismatch.path == path


def _against_mock_turns(
    turns: list[Turn], out: Path, *extra: str
) -> tuple[subprocess.CompletedProcess[str], dict]:
    """`run -n 0 --continue --upstream mock:FILE` of the tools export (its prompt alone: no rerun), FILE
    holding `turns` (beside `out`)."""
    script = out.parent / "turns.json"
    script.write_bytes(orjson.dumps(Script(turns=turns, model="fake-model").model_dump(mode="json")))
    args = ["run", str(EXPORT), "-n", "0", "-w", str(OPENCODE.fixture("tools") / "workspace"), "-o", str(out)]
    proc = replayer(*args, "--continue", "--upstream", f"mock:{script}", *extra)
    assert proc.returncode == 0, proc.stderr
    return proc, orjson.loads((out / "result.json").read_bytes())["continuation"]


@pytest.mark.agent
def test_a_long_continuation_is_read_back_and_exported_whole(to_the_end: Continued, tmp_path: Path) -> None:
    """The continuation's four long listings: the continued session is read back whole (once cut at the
    64 KiB of a pipe, which lost it), and `export` writes the prefix and all that followed it."""
    from replayer.adapters import by_name

    out, code, result, _log, stderr = to_the_end
    assert code == 0, stderr
    cont = result["continuation"]
    assert (cont["agent_status"], cont["steps_used"]) == ("completed", 6), cont["files"]
    continued = out / cont["files"]["continued_session"]
    assert continued.stat().st_size > 64 * 1024
    record = tmp_path / "chat.jsonl"
    replayer("export", str(out), "--format", "chat", "-o", str(record), check=True)
    [line] = record.read_bytes().splitlines()
    messages = orjson.loads(line)["messages"]
    wire = to_wire(orjson.loads(continued.read_bytes())["messages"])
    assert messages == by_name("opencode").dialect().to_chat(wire), (
        "the record is the whole continued session"
    )
    outputs = [m["content"] for m in messages if m["role"] == "tool"][-4:]
    assert all(f"of a long listing {n}\n" in o for n, o in enumerate(outputs)), "what the CLI kept of each"
    assert messages[-1] == {"role": "assistant", "content": "Listed."}
    broken = tmp_path / "broken"  # the same run, its continued session gone
    shutil.copytree(out, broken)
    (broken / cont["files"]["continued_session"]).unlink()
    refused = replayer("export", str(broken), "--format", "chat", "-o", str(tmp_path / "prefix.jsonl"))
    assert refused.returncode == 3 and "cannot be read back" in refused.stderr, refused.stderr
    assert not (tmp_path / "prefix.jsonl").exists(), "never the prefix alone as if it were the record"


@pytest.mark.agent
def test_a_model_that_answers_the_same_each_round_ends_as_a_loop(tmp_path: Path) -> None:
    """The same tool call with the same output, round after round: after `--loop-limit 2` such rounds the
    next request is held, never forwarded, and the run ends as `loop`, said in the summary."""
    again = Turn(blocks=_bash(1, "echo same").blocks, repeat=True)
    proc, cont = _against_mock_turns([again], tmp_path / "out", "--loop-limit", "2")
    assert (cont["agent_status"], cont["steps_used"]) == ("loop", 3)
    assert [r["reason"] for r in cont["refusals"]] == ["loop"]
    assert (
        "agent_status loop" in proc.stdout and "the same request after the same answer 2 times" in proc.stdout
    )


@pytest.mark.agent
def test_a_continuation_whose_session_cannot_be_read_back_is_not_completed(tmp_path: Path) -> None:
    """The agent ends well, but its sandbox put a link where the continued session's export is written: the
    export is not read (a link is never followed), and the run is `session_unreadable`, not `completed`,
    with the reason in its files and its summary."""
    link = _bash(1, "ln -s /dev/null /tmp/replayer-continued-export.json")
    turns = [link, Turn(blocks=[TextBlock(text="Linked.")])]
    out = tmp_path / "out"
    proc, cont = _against_mock_turns(turns, out)
    assert (cont["agent_status"], cont["steps_used"]) == ("session_unreadable", 2)
    assert "not a regular file" in cont["files"]["continued_session_error"]
    assert "continued session not read back: SandboxError" in proc.stdout
