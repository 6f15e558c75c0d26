"""Gemini CLI continuation with the real pinned CLI (`gemini --resume SESSION -p NONCE`) through the Gemini
bridge against the scripted Gemini API: after a tool batch the CLI closes the unanswered responses with
a model turn of its own, the gate accepts exactly that and forwards the prefix alone (no closing turn,
no nonce), the continued session resumes the prefix, shell reruns differing only by process ids count
as reproduced, and the upstream key reaches no file.

The input is the recording of the real CLI 0.61.0 (tests/fixtures/gemini_cli/tools, tests/recorder_gemini.py).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replayer.adapters.gemini_cli import session, wire
from replayer.bridges.gemini import ScriptedGemini
from replayer.bridges.scripted import LoggedRequest, Script, TextBlock, ToolUseBlock, Turn
from tests.conftest import GEMINI, replayer
from tests.support.continuing import KEY, files_containing

pytestmark = pytest.mark.agent

FIXTURE = GEMINI.root / "tools"
MODEL = "gemini-2.5-flash"


def _continue(
    after_step: int, out: Path, turns: list[Turn], *extra: str
) -> tuple[int, dict, list[LoggedRequest], str]:
    with ScriptedGemini(Script(turns=turns, model=MODEL), expected_key=KEY) as upstream:
        args = [
            "run",
            str(FIXTURE / "session.jsonl"),
            "-n",
            str(after_step),
            "-w",
            str(FIXTURE / "workspace"),
        ]
        args += ["-o", str(out), "--json", "--continue", "--upstream", upstream.url, *extra]
        proc = replayer(*args, env={"GEMINI_API_KEY": KEY})
        log = [r for r in upstream.log if r.main_thread]
    result = orjson.loads((out / "result.json").read_bytes()) if (out / "result.json").exists() else {}
    return proc.returncode, result, log, proc.stderr


@pytest.fixture(scope="module")
def after_batch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int, dict, list[LoggedRequest], str]:
    out = tmp_path_factory.mktemp("gemini-continue") / "out"
    turns = [
        Turn(
            blocks=[
                ToolUseBlock(id="call_cont_1", name="run_shell_command", input={"command": "cat calc.py"})
            ]
        ),
        Turn(blocks=[TextBlock(text="Finished.")]),
    ]
    return (out, *_continue(1, out, turns, "--record-cassette", str(out.parent / "tape")))


def test_the_continuation_after_a_tool_batch_sends_exactly_the_rebuilt_prefix(after_batch) -> None:
    out, code, result, log, stderr = after_batch
    assert code == 0, stderr
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 2), cont
    assert cont["input_condition"] == "replayed_boundary_only"
    assert any("session context" in n for n in cont["gate_notes"])
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert expected[-1]["role"] == "user" and "functionResponse" in expected[-1]["parts"][-1]
    first, context = wire.without_context(log[0].body["contents"])
    assert context is not None and first == expected, "the prefix alone: no closing turn, no nonce"
    sent = orjson.dumps([r.body for r in log]).decode()
    assert "replayer-nonce" not in sent and wire.INTERRUPTED not in sent
    answered = wire.without_context(log[1].body["contents"])[0]
    assert answered[: len(expected)] == expected
    response = answered[-1]["parts"][-1]["functionResponse"]
    assert response["name"] == "run_shell_command" and "return a - b" in response["response"]["output"], (
        "the continued CLI ran its tool in the rerun sandbox (the prefix stops before the fix)"
    )


def test_the_recorded_cassette_replays_offline_verified(after_batch, tmp_path: Path) -> None:
    """The continuation's traffic, recorded (docs/cassettes.md), answers a second continuation with no
    upstream: its shell output differs from the recording's only by process ids, a normalization."""
    out, code, result, _log, stderr = after_batch
    assert code == 0 and result["continuation"]["cassette"]["verdict"] == "recorded", stderr
    again, tape = tmp_path / "again", out.parent / "tape"
    args = ["run", str(FIXTURE / "session.jsonl"), "-n", "1", "-w", str(FIXTURE / "workspace")]
    proc = replayer(*args, "-o", str(again), "--json", "--continue", "--cassette", str(tape))
    assert proc.returncode == 0, proc.stderr
    cont = orjson.loads((again / "result.json").read_bytes())["continuation"]
    assert (cont["cassette"]["verdict"], cont["gate"], cont["agent_status"]) == (
        "verified",
        "accepted",
        "completed",
    )
    assert files_containing(tape, KEY.encode()) == []


def test_the_continued_session_resumes_the_prefix_without_the_nonce(after_batch) -> None:
    out, code, result, _log, stderr = after_batch
    assert code == 0, stderr
    files = result["continuation"]["files"]
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    continued = session.parse(out / files["continued_session"])
    resumed = wire.resume_contents(continued.native_as(session.Native).messages)
    assert resumed[: len(expected)] == expected
    assert [c["role"] for c in resumed[len(expected) :]] == ["model", "user", "model"]
    assert b"replayer-nonce" in (out / files["continued_session_raw"]).read_bytes()
    assert files_containing(out, KEY.encode()) == []


def test_shell_reruns_differing_by_process_ids_are_reproduced(after_batch) -> None:
    _out, code, result, _log, stderr = after_batch
    assert code == 0, stderr
    by_tool = {d["tool"]: d for d in result["divergences"]}
    assert by_tool["read_file"]["status"] == "exact"
    shell = by_tool["run_shell_command"]
    # the fresh container may happen to give the process group the recorded id: then it is exact
    assert (shell["status"], shell["normalizers"]) in (("exact", []), ("normalized_equal", ["process_ids"]))


def test_a_release_before_0_53_continues_with_the_responses_in_two_user_turns(tmp_path: Path) -> None:
    """0.45.2 (before `MERGES_SINCE`, `CLOSES_SINCE`) reruns the batch and resumes the rebuilt 0.61 log:
    the batch's responses (in the call and in the recorded user message) go as two user turns, no closing
    turn, and the nonce as a turn of its own; the gate accepts that and forwards the prefix alone."""
    out = tmp_path / "out"
    code, result, log, stderr = _continue(
        1, out, [Turn(blocks=[TextBlock(text="Finished.")])], "--agent-version", "0.45.2"
    )
    assert code == 0, stderr
    assert result["version"]["version"] == "0.45.2"
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1), cont
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert [c["role"] for c in expected[-3:]] == ["model", "user", "user"] and expected[-1] == expected[-2]
    assert all("functionResponse" in p for p in expected[-1]["parts"])
    assert len(log) == 1 and log[0].body["contents"][0]["parts"][0]["text"].startswith("<session_context>")
    assert log[0].body["contents"][1:] == expected, "the context turn, then the prefix alone"


def test_every_step_of_both_prompts_reruns_reproduced(tmp_path: Path) -> None:
    """Steps 4 and 5 belong to the second prompt: the driven CLI ends its first run and resumes its own
    session (`--resume latest`) with that prompt."""
    out = tmp_path / "out"
    args = [
        "run",
        str(FIXTURE / "session.jsonl"),
        "-n",
        "5",
        "-w",
        str(FIXTURE / "workspace"),
        "-o",
        str(out),
    ]
    proc = replayer(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    statuses = {(d["step"], d["tool"], d["status"]) for d in result["divergences"]}
    assert {s for s, _t, _st in statuses} == {1, 2, 3, 4, 5}
    assert all(st in ("exact", "normalized_equal") for _s, _t, st in statuses), result["divergences"]
    assert "a + b" in (out / "state" / "workspace" / "calc.py").read_text()
    assert (out / "state" / "workspace" / "new.txt").read_text() == "hello\n"


def test_a_boundary_prompt_variant_compares_with_the_closing_turn_sent(tmp_path: Path) -> None:
    """`compare` with one variant that appends a prompt at the boundary after the first tool batch, two runs
    at once (the scripted API answers each conversation by what it has answered): the CLI sends its closing
    turn and the prompt upstream (kept, as the CLI sends them), each fork's check passes."""
    prompt = "Also leave a marker file."
    turns = [
        Turn(
            blocks=[
                ToolUseBlock(
                    id="call_cmp_1", name="run_shell_command", input={"command": "echo made > made.txt"}
                )
            ]
        ),
        Turn(blocks=[TextBlock(text="Made it.")]),
    ]
    out = tmp_path / "cmp"
    variant = orjson.dumps({"boundary_prompt": prompt}).decode()
    with ScriptedGemini(Script(turns=turns, model=MODEL, by_history=True), expected_key=KEY) as upstream:
        proc = replayer(
            "compare", str(FIXTURE / "session.jsonl"), "-n", "1", "-w", str(FIXTURE / "workspace"),
            "-o", str(out), "--upstream", upstream.url, "--variant", f"hint={variant}", "--repeat", "2", "-j", "2",
            "--check", "test -f made.txt", env={"GEMINI_API_KEY": KEY},
        )  # fmt: skip
        log = [r for r in upstream.log if r.main_thread]
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "compare.json").read_bytes())
    assert len(result["runs"]) == 2 and result["boundary_check"]["passed"] is False
    for run in result["runs"]:
        assert run["status"] == "ok", run["error"]
        cont = run["continuation"]
        assert (cont["gate"], cont["input_condition"]) == ("accepted", "boundary_user_prompt_appended"), cont
        assert run["check"]["passed"] is True
    expected = orjson.loads((out / "replay" / "expected_prefix.json").read_bytes())
    closing = {"role": "model", "parts": [{"text": wire.INTERRUPTED}]}
    asked = {"role": "user", "parts": [{"text": prompt}]}
    firsts = [r for r in log if "call_cmp_1" not in upstream.answered_call_ids(r.body)]
    assert len(firsts) == 2, "each run asked once before its tool call was answered"
    assert all(wire.without_context(r.body["contents"])[0] == [*expected, closing, asked] for r in firsts)
