"""OpenHands V0 event lists recorded by the pinned openhands-ai 1.6.0 (headless, local runtime, in the
sandbox): steps, the prepared prefix at every boundary against the request V0 really sent, the other
shapes of the format (an evaluation output's `history`, no system event, actions without observations),
the reruns by the V0 runtime in the sandbox, the continuation through the chat bridge, and the refusals."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from adapters.openhands.v0_adapter import OpenHandsV0Adapter
from bridges.scripted import LoggedRequest, Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn
from replayer.engine import load
from tests.conftest import ROOT, replayer
from tests.support.continuing import KEY, files_containing

FIXTURE = ROOT / "tests" / "fixtures" / "openhands" / "v0"
TRAJECTORY = FIXTURE / "trajectory.json"


def _requests() -> list[dict]:
    return [orjson.loads(line) for line in (FIXTURE / "upstream.jsonl").read_bytes().splitlines()]


def _events() -> list[dict]:
    return list(orjson.loads(TRAJECTORY.read_bytes()))


def test_steps_are_responses_with_interleaved_observations() -> None:
    adapter, traj = load(TRAJECTORY)
    assert isinstance(adapter, OpenHandsV0Adapter)
    assert (traj.agent, traj.agent_version, traj.cwd) == ("openhands_v0", "1.6.0", "/testbed")
    assert [[c.id for c in s.calls] for s in traj.steps] == [
        ["call_v0_01", "call_v0_02"],
        ["call_v0_03"],
        ["call_v0_04"],
        ["call_v0_05"],
        ["call_v0_06"],
    ]
    assert [s.message_id for s in traj.steps] == [f"chatcmpl-00{n}" for n in range(1, 6)]
    assert [s.final for s in traj.steps] == [False] * 4 + [True]
    first = traj.steps[0].calls[0]
    assert first.tool == "execute_bash" and first.input == {"command": "ls", "security_risk": "LOW"}
    failing = traj.steps[1].calls[0].historical
    assert failing is not None and str(failing.content).endswith("[Command finished with exit code 1]")


@pytest.mark.parametrize("after_step", range(5))
def test_prepared_prefix_is_the_request_v0_sent(after_step: int, tmp_path: Path) -> None:
    out = tmp_path / "out"
    replayer("prepare", str(TRAJECTORY), "-n", str(after_step), "-o", str(out), "--json", check=True)
    assert (
        orjson.loads((out / "expected_prefix.json").read_bytes())
        == _requests()[after_step]["body"]["messages"]
    )
    result = orjson.loads((out / "result.json").read_bytes())
    cut = orjson.loads((out / result["native_files"][0]).read_bytes())
    assert cut == _events()[: len(cut)], "the native prefix is the event list cut at the boundary"
    if after_step:
        assert cut[-1].get("observation") is not None and cut[-1]["cause"] is not None


def test_an_evaluation_output_wraps_the_same_history(tmp_path: Path) -> None:
    wrapped = tmp_path / "output.json"
    wrapped.write_bytes(orjson.dumps({"instance_id": "calc-1", "history": _events(), "test_result": {}}))
    _, traj = load(wrapped)
    assert traj.session_id == "calc-1" and len(traj.steps) == 5
    out = tmp_path / "out"
    replayer("prepare", str(wrapped), "-n", "2", "-o", str(out), "--json", check=True)
    assert orjson.loads((out / "expected_prefix.json").read_bytes()) == _requests()[2]["body"]["messages"]
    cut = orjson.loads((out / "native" / "home" / "trajectory.json").read_bytes())
    assert cut["instance_id"] == "calc-1" and cut["test_result"] == {}


def test_public_shapes_no_system_event_and_actions_without_observations(tmp_path: Path) -> None:
    actions_only = [e for e in _events() if "observation" not in e and e.get("action") != "system"]
    path = tmp_path / "public.json"
    path.write_bytes(orjson.dumps(actions_only))
    _, traj = load(path)
    assert traj.agent_version is None, "no system event: no recorded version"
    assert [len(s.calls) for s in traj.steps] == [2, 1, 1, 1, 1]
    assert not any(s.complete for s in traj.steps[:4])
    proc = replayer("prepare", str(path), "-n", "1", "-o", str(tmp_path / "out"))
    assert proc.returncode == 4 and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("after_step", [1, 4])
def test_rerun_by_the_v0_runtime_reproduces_every_observation(after_step: int, tmp_path: Path) -> None:
    out = tmp_path / "out"
    ws = FIXTURE / "workspace"
    replayer(
        "run", str(TRAJECTORY), "-n", str(after_step), "-w", str(ws), "-o", str(out), "--json", check=True
    )
    result = orjson.loads((out / "result.json").read_bytes())
    assert [d["status"] for d in result["divergences"]] == ["exact"] * [0, 2, 3, 4, 5][after_step]
    assert (
        orjson.loads((out / "expected_prefix.json").read_bytes())
        == _requests()[after_step]["body"]["messages"]
    )
    cut = orjson.loads((out / result["native_files"][0]).read_bytes())
    original = _events()[: len(cut)]
    fresh = [(a, b) for a, b in zip(cut, original, strict=True) if a != b]
    assert fresh and all(a.get("observation") and a["timestamp"] != b["timestamp"] for a, b in fresh)
    assert all({**a, "timestamp": b["timestamp"]} == b for a, b in fresh), "only the time differs"


def test_a_v0_continuation_needs_a_litellm_model(tmp_path: Path) -> None:
    ws = FIXTURE / "workspace"
    args = ["run", str(TRAJECTORY), "-n", "1", "-w", str(ws), "-o", str(tmp_path / "out")]
    proc = replayer(*args, "--continue", "--upstream", "http://127.0.0.1:9", env={"OPENAI_API_KEY": "k"})
    assert proc.returncode == 4 and "pass --model" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def test_damaged_and_unknown_v0_input_fails_in_one_line(tmp_path: Path) -> None:
    events = _events()
    events[5] = {**events[5], "action": "teleport"}
    path = tmp_path / "unknown.json"
    path.write_bytes(orjson.dumps(events))
    proc = replayer("inspect", str(path))
    assert proc.returncode == 3 and "unknown V0 action 'teleport'" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def _continue(out: Path, turns: list[Turn], *extra: str) -> tuple[int, dict, list[LoggedRequest], str]:
    with ScriptedUpstream(Script(turns=turns, model="fake-model"), expected_key=KEY) as upstream:
        args = ["run", str(TRAJECTORY), "-n", "3", "-w", str(FIXTURE / "workspace"), "-o", str(out), "--json"]
        args += ["--continue", "--upstream", upstream.url, "--model", "openai/fake-model", *extra]
        proc = replayer(*args, env={"OPENAI_API_KEY": KEY})
        log = list(upstream.log)
    result = orjson.loads((out / "result.json").read_bytes()) if (out / "result.json").exists() else {}
    return proc.returncode, result, log, proc.stderr


def _bash(n: int, command: str) -> ToolUseBlock:
    return ToolUseBlock(
        id=f"call_cont_{n}", name="execute_bash", input={"command": command, "security_risk": "LOW"}
    )


def test_continues_after_the_replayed_prefix_to_finish(tmp_path: Path) -> None:
    out = tmp_path / "out"
    finish = ToolUseBlock(id="call_cont_2", name="finish", input={"message": "done"})
    turns = [Turn(blocks=[TextBlock(text="Check again."), _bash(1, "cat calc.py")]), Turn(blocks=[finish])]
    code, result, log, stderr = _continue(out, turns)
    assert code == 0, stderr
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 2)
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert log[0].body["messages"] == expected == _requests()[3]["body"]["messages"]
    assert log[1].body["messages"][: len(expected)] == expected and all(r.key_ok for r in log)
    assert "return a + b" in log[1].body["messages"][-1]["content"][0]["text"], (
        "the edit was not applied twice"
    )
    continued = orjson.loads((out / "continued" / "trajectory.json").read_bytes())
    calls = [(e.get("tool_call_metadata") or {}).get("tool_call_id") for e in continued if "action" in e]
    assert calls[-2:] == ["call_cont_1", "call_cont_2"]
    assert files_containing(out, KEY.encode()) == []


def test_max_steps_counts_model_turns_after_the_replay(tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, result, log, stderr = _continue(
        out, [Turn(blocks=[_bash(n, "echo again")]) for n in range(1, 6)], "--max-steps", "2"
    )
    assert "continuation" in result, f"exit {code}: {stderr}"
    cont = result["continuation"]
    assert cont["agent_status"] == "max_steps", stderr
    assert len([r for r in log if r.main_thread]) == 2


def test_an_observation_v0_would_cut_is_refused_not_misrendered(tmp_path: Path) -> None:
    events = _events()
    events[5] = {**events[5], "content": "x" * 30_001}  # the observation of call_v0_01
    path = tmp_path / "long.json"
    path.write_bytes(orjson.dumps(events))
    proc = replayer("prepare", str(path), "-n", "1", "-o", str(tmp_path / "out"))
    assert proc.returncode == 4 and "call_v0_01" in proc.stderr and "cuts" in proc.stderr


def test_a_gui_export_with_environment_and_state_events_has_the_same_steps(tmp_path: Path) -> None:
    events = _events()
    state = {"id": 99, "source": "agent", "message": "", "action": "change_agent_state"}
    state["args"] = {"agent_state": "running", "thought": ""}
    changed = {"id": 100, "source": "environment", "message": "", "observation": "agent_state_changed"}
    changed.update(content="", extras={"agent_state": "running", "reason": ""}, cause=None)
    path = tmp_path / "export.json"
    path.write_bytes(orjson.dumps([*events[:4], state, changed, *events[4:]]))
    _, traj = load(path)
    assert [s.message_id for s in traj.steps] == [f"chatcmpl-00{n}" for n in range(1, 6)]
    out = tmp_path / "out"
    replayer("prepare", str(path), "-n", "2", "-o", str(out), "--json", check=True)
    assert orjson.loads((out / "expected_prefix.json").read_bytes()) == _requests()[2]["body"]["messages"]
