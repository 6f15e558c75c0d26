"""OpenHands V0's files of the field corpus (tests/support/field.py): a replay list continued against bare
`mock` and through the gate without a system event, and a 0.35.0 evaluation output rerun and continued by that
version's code."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.conftest import replayer
from tests.support import field
from tests.support.field import V0_LIST


@pytest.mark.agent
@pytest.mark.docker
def test_a_field_continuation_ends_when_the_bare_mock_ends_it(tmp_path: Path) -> None:
    """For every agent, a real field file at the version that reruns it, continued against bare `mock`
    (whose first answer ends the session the agent's way): `completed` in a few requests, its session read
    back."""
    field.check_the_bare_mock_ends_it("openhands_v0", tmp_path)


@pytest.mark.agent
@pytest.mark.docker
def test_a_v0_list_without_a_system_event_continues_through_the_gate(tmp_path: Path) -> None:
    """The file records no system message; the agent sends its own first, which the gate takes as the
    agent's and reports, holding the rest of the request to the rebuilt prefix exactly. The pin runs it (the
    inferred 0.35.0 sends fake-model its text form, which the prefix compared here is not)."""
    from replayer.bridges.scripted import Script, ScriptedUpstream, ToolUseBlock, Turn
    from tests.support.continuing import KEY

    out, empty = tmp_path / "out", tmp_path / "workspace"
    empty.mkdir()
    finish = Turn(blocks=[ToolUseBlock(id="call_field_1", name="finish", input={"message": "done"})])
    with ScriptedUpstream(Script(turns=[finish], model="fake-model"), expected_key=KEY) as upstream:
        args = ["run", str(V0_LIST), "-n", "1", "--cwd", "/workspace", "-w", str(empty), "-o", str(out)]
        args += ["--continue", "--upstream", upstream.url, "--model", "openai/fake-model"]
        args += ["--agent-version", "1.6.0"]
        proc = replayer(*args, env={"OPENAI_API_KEY": KEY})
        log = list(upstream.log)
    assert proc.returncode == 0, proc.stderr
    cont = orjson.loads((out / "result.json").read_bytes())["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1)
    assert len(cont["gate_notes"]) == 1 and cont["gate_notes"][0].startswith("messages[0]: the file records")
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert expected[0]["role"] == "user" and log[0].body["messages"][0]["role"] == "system"
    assert log[0].body["messages"][1:] == expected


@pytest.mark.agent
@pytest.mark.docker
def test_a_v0_evaluation_output_of_0_35_0_reruns_and_continues_by_that_versions_code(tmp_path: Path) -> None:
    """openhands-ai 0.35.0 runs in the sandbox (its own config loader, the kernel gateway its runtime starts,
    no browser); the ponyc repository is not published with the output, so both reruns differ. With the
    recorded model and `native_tool_calling: null`, 0.35.0 calls functions in its text form: the companion
    renders the first request with 0.35.0's converter. The evaluation ran a development commit reporting
    0.35.0 whose system prompt is not the release's: the gate holds the recorded one and refuses the
    release's, in one line at that text."""
    name = "openhands/multi-swe-bench-example-output.jsonl"
    options = ("--session", "ponylang__ponyc-4595")
    proc, out, sent = field.continue_field(name, 2, "openhands", options, tmp_path)
    said = [line for line in proc.stderr.strip().splitlines() if not line.startswith("installed ")]
    assert proc.returncode == 8 and len(said) == 1, proc.stderr  # (the first run installs 0.35.0: said so)
    result = orjson.loads((out / "result.json").read_bytes())
    assert (result["version"]["version"], result["version"]["reruns"]) == (
        "0.35.0",
        "openhands_v0 0.35.0, its own code",
    )
    assert [(d["kind"], d["status"]) for d in result["divergences"]] == [("rerun", "different")] * 2
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"]) == ("refused", "bridge_refused") and sent == []
    assert (cont["model"], cont["metadata"]["function_calling"]) == (
        "openai/openrouter-llama-4-maverick",
        "text (fn_call_converter)",
    )
    # the text form (string contents): only the system prompt's text differs
    assert cont["mismatch"]["path"] == "messages[0].content"
    stderr = (out / "agent" / "stderr.log").read_text()
    assert "[agent] enable_mcp, enable_plan_mode: not in this version, left out" in stderr
