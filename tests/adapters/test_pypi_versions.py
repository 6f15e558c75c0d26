"""mini-swe-agent and OpenHands V1 recordings made by other released versions than the pin
(tests/recorder_mini.py and tests/recorder_openhands.py with --version V): the wire prefix that version
sent at every boundary, reruns by that version's own package in the sandbox, and a continuation by that
version through the gate. One probe scenario per version."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from replayer.adapters.mini_swe_agent import session as mini_format
from replayer.adapters.openhands import session as conversation
from replayer.adapters.openhands.rebuild import prefix_events
from replayer.adapters.openhands.wire import to_messages
from replayer.bridges.scripted import LoggedRequest, Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn
from replayer.floor.pins import pinned_version
from tests.conftest import ROOT, replayer
from tests.support.continuing import KEY, files_containing

FIXTURES = ROOT / "tests" / "fixtures"
MINI = FIXTURES / "mini_swe_agent" / "versions"
OPENHANDS = FIXTURES / "openhands" / "versions"
MINI_VERSIONS = sorted(p.name for p in MINI.iterdir())
OPENHANDS_VERSIONS = sorted(p.name for p in OPENHANDS.iterdir())
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def _mini(version: str) -> Path:
    return MINI / version / "probe"


def _openhands(version: str) -> Path:
    return OPENHANDS / version / "probe"


def _sent(folder: Path) -> list[list[dict]]:
    lines = (folder / "upstream.jsonl").read_bytes().splitlines()
    return [r["body"]["messages"] for r in map(orjson.loads, lines) if r["method"] == "POST"]


def _run(
    trajectory: Path,
    workspace: Path,
    out: Path,
    after_step: int,
    *extra: str,
    env: dict[str, str] | None = None,
) -> tuple[int, dict, str]:
    args = ["run", str(trajectory), "-n", str(after_step), "-w", str(workspace), "-o", str(out), "--json"]
    proc = replayer(*args, *extra, env=env)
    result = orjson.loads((out / "result.json").read_bytes()) if (out / "result.json").exists() else {}
    return proc.returncode, result, proc.stderr


def _continue(
    trajectory: Path, workspace: Path, out: Path, after_step: int, turns: list[Turn], *extra: str
) -> tuple[int, dict, list[LoggedRequest], str]:
    with ScriptedUpstream(Script(turns=turns, model="fake-model"), expected_key=KEY) as upstream:
        code, result, stderr = _run(
            trajectory,
            workspace,
            out,
            after_step,
            "--continue",
            "--upstream",
            upstream.url,
            *extra,
            env={"OPENAI_API_KEY": KEY},
        )
        return code, result, list(upstream.log), stderr


def _reruns_exactly(result: dict, agent: str, version: str, source: str, calls: int) -> None:
    assert (result["version"]["version"], result["version"]["source"]) == (version, source)
    assert result["version"]["status"] == ("verified" if version == pinned_version(agent) else "unverified")
    assert result["version"]["reruns"] == f"{agent} {version}, its own code"
    statuses = [d["status"] for d in result["divergences"]]
    assert len(statuses) == calls and set(statuses) <= {"exact", "normalized_equal"}, result["divergences"]


# mini-swe-agent ----------------------------------------------------------------------------------------
def _mini_last_boundary(version: str) -> tuple[mini_format.Native, int]:
    traj = mini_format.parse(_mini(version) / "trajectory.traj.json")
    return traj.native_as(mini_format.Native), next(
        (s.index - 1 for s in traj.steps if s.final), len(traj.steps)
    )


@pytest.mark.parametrize("version", MINI_VERSIONS)
def test_mini_wire_prefix_is_what_that_version_sent_at_every_boundary(version: str) -> None:
    traj = mini_format.parse(_mini(version) / "trajectory.traj.json")
    assert traj.agent_version == version
    native, last = _mini_last_boundary(version)
    sent = _sent(_mini(version))
    for boundary in range(last + 1):
        messages = mini_format.prefix_messages(native, boundary)
        n_calls, _ = mini_format.calls_and_cost(messages)
        assert mini_format.to_wire(messages) == sent[n_calls], f"boundary {boundary}"


@pytest.mark.agent
@pytest.mark.docker
@pytest.mark.parametrize("version", MINI_VERSIONS)
def test_mini_that_version_reruns_every_observation_and_continues_through_the_gate(
    version: str, tmp_path: Path
) -> None:
    """One run a version (`run -n LAST --continue`): reruns by that version's own package, then its
    continuation."""
    native, last = _mini_last_boundary(version)
    folder, out = _mini(version), tmp_path / "out"
    submit = ToolUseBlock(id="call_cont_1", name="bash", input={"command": SUBMIT})
    turns = [Turn(blocks=[TextBlock(text="Submitting."), submit])]
    code, result, log, stderr = _continue(
        folder / "trajectory.traj.json", folder / "workspace", out, last, turns
    )
    assert code == 0, stderr
    calls = sum(1 for m in mini_format.prefix_messages(native, last) if m.get("role") == "tool")
    _reruns_exactly(result, "mini_swe_agent", version, "recorded", calls)
    rebuilt = json.loads((out / result["native_files"][0]).read_text())
    assert rebuilt["info"]["mini_version"] == version
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1), cont
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert log[0].body["messages"] == expected and all(r.key_ok for r in log)
    continued = json.loads((out / cont["files"]["continued_trajectory"]).read_text())
    assert continued["info"]["mini_version"] == version, "saved by that version"
    assert continued["info"]["exit_status"] == "Submitted"
    assert files_containing(out, KEY.encode()) == []


# OpenHands V1 ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("version", OPENHANDS_VERSIONS)
def test_openhands_wire_prefix_is_what_that_version_sent_at_every_boundary(version: str) -> None:
    traj = conversation.parse(_openhands(version) / "conversation")
    sent = _sent(_openhands(version))
    last = next((s.index - 1 for s in traj.steps if s.final), len(traj.steps))
    for boundary in range(last + 1):
        assert to_messages(prefix_events(traj, boundary, {})) == sent[boundary], f"boundary {boundary}"


@pytest.mark.parametrize("version", OPENHANDS_VERSIONS)
def test_openhands_another_versions_directory_is_not_taken_for_the_pin(version: str) -> None:
    """The directory records no version; an older SDK writes fewer base-state keys than the pin."""
    traj = conversation.parse(_openhands(version) / "conversation")
    assert traj.agent_version is None


def _openhands_last(version: str) -> tuple[conversation.Native, int]:
    traj = conversation.parse(_openhands(version) / "conversation")
    return traj.native_as(conversation.Native), next(
        (s.index - 1 for s in traj.steps if s.final), len(traj.steps)
    )


@pytest.mark.agent
@pytest.mark.docker
@pytest.mark.parametrize("version", OPENHANDS_VERSIONS)
def test_openhands_rerun_by_that_version_reproduces_every_observation(version: str, tmp_path: Path) -> None:
    """A plain run, apart from the continuation's (not one `run --continue` as mini's): once in four such
    runs at load 7-9 the reruns of the two commands that exit non-zero (calls 2 and 3) came back different,
    which no plain run has shown yet; until that is understood, this assertion holds a plain run's reruns."""
    native, last = _openhands_last(version)
    folder, out = _openhands(version), tmp_path / "out"
    args = (folder / "conversation", folder / "workspace", out, last, "--agent-version", version)
    code, result, stderr = _run(*args)
    assert code == 0, stderr
    calls = sum(1 for e in native.events if e["kind"] == "ObservationEvent")
    _reruns_exactly(result, "openhands", version, "stated", calls)
    assert orjson.loads((out / "expected_prefix.json").read_bytes()) == _sent(folder)[last]
    conv = out / Path(result["native_files"][0]).parent
    base = orjson.loads((conv / "base_state.json").read_bytes())
    assert set(base) == set(native.base_state), "the rebuilt state has the keys that version writes"


@pytest.mark.agent
@pytest.mark.docker
@pytest.mark.parametrize("version", OPENHANDS_VERSIONS)
def test_openhands_that_version_continues_through_the_gate(version: str, tmp_path: Path) -> None:
    _, last = _openhands_last(version)
    folder, out = _openhands(version), tmp_path / "out"
    turns = [
        Turn(blocks=[ToolUseBlock(id="call_cont_1", name="terminal", input={"command": "cat calc.py"})]),
        Turn(blocks=[ToolUseBlock(id="call_cont_2", name="finish", input={"message": "done"})]),
    ]
    args = (folder / "conversation", folder / "workspace", out, last, turns, "--agent-version", version)
    code, result, log, stderr = _continue(*args)
    assert code == 0, stderr
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 2), cont
    assert result["version"]["version"] == version
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert log[0].body["messages"] == expected and all(r.key_ok for r in log)
    assert "return a + b" in log[1].body["messages"][-1]["content"][0]["text"]
    continued = out / "continued" / "conversation"
    events = [orjson.loads(p.read_bytes()) for p in sorted((continued / "events").glob("event-*.json"))]
    assert [e["tool_call_id"] for e in events if e["kind"] == "ActionEvent"][-2:] == [
        "call_cont_1",
        "call_cont_2",
    ]
    assert files_containing(out, KEY.encode()) == []
