"""mini-swe-agent continuation through the chat-completions bridge with the real pinned package:
submission, the step budget (mini's own step limit), a boundary prompt, a tampered prefix, a
failing and a stalled upstream; every run leaves a complete result and the key in no file."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import orjson
import pytest

from replayer.adapters.mini_swe_agent import MiniSweAgentAdapter
from replayer.bridges.scripted import LoggedRequest, Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn
from replayer.floor.requests import ContinueRequest, ReplayRequest
from replayer.pipeline.engine import execute
from replayer.sandboxes.docker import LABEL
from tests.conftest import MINI, replayer
from tests.support.continuing import KEY, files_containing

SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def _bash(n: int, command: str, text: str = "") -> Turn:
    blocks: list[TextBlock | ToolUseBlock] = [TextBlock(text=text)] if text else []
    return Turn(blocks=[*blocks, ToolUseBlock(id=f"call_cont_{n}", name="bash", input={"command": command})])


def _continue(
    after_step: int, out: Path, turns: list[Turn], *extra: str, workspace: Path | None = None
) -> tuple[int, dict, list[LoggedRequest], str]:
    traj = MINI.fixture("toolcall") / "trajectory.traj.json"
    ws = workspace or MINI.fixture("toolcall") / "workspace"
    with ScriptedUpstream(Script(turns=turns, model="fake-model"), expected_key=KEY) as upstream:
        args = ["run", str(traj), "-n", str(after_step), "-w", str(ws), "-o", str(out), "--json"]
        args += ["--continue", "--upstream", upstream.url, *extra]
        proc = replayer(*args, env={"OPENAI_API_KEY": KEY})
        log = list(upstream.log)
    result = orjson.loads((out / "result.json").read_bytes()) if (out / "result.json").exists() else {}
    return proc.returncode, result, log, proc.stderr


def _no_key_anywhere(out: Path) -> None:
    assert files_containing(out, KEY.encode()) == []


@pytest.mark.agent
def test_continues_from_the_fresh_prefix_to_a_submission(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    shutil.copytree(MINI.fixture("toolcall") / "workspace", workspace)
    (workspace / "calc.py").write_text("def add(a, b):\n    return a + b  # fixed before\n")
    out = tmp_path / "out"
    turns = [_bash(1, "cat calc.py", "Look again."), _bash(2, SUBMIT, "Submit.")]
    code, result, log, stderr = _continue(3, out, turns, workspace=workspace)
    assert code == 0, stderr
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 2)
    assert cont["input_condition"] == "replayed_boundary_only" and cont["model"] == "openai/fake-model"
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert log[0].body["messages"] == expected, "the first request is exactly the rebuilt prefix"
    assert "fixed before" in expected[-1]["content"]
    assert all(r.key_ok for r in log) and len(log) == 2
    continued = json.loads((out / cont["files"]["continued_trajectory"]).read_text())
    assert continued["info"]["exit_status"] == "Submitted"
    assert continued["info"]["model_stats"]["api_calls"] == 3 + 2
    assert (
        continued["messages"][: len(expected)]
        == json.loads((out / result["native_files"][0]).read_text())["messages"]
    )
    tool = next(m for m in continued["messages"] if m.get("tool_call_id") == "call_cont_1")
    assert "fixed before" in tool["content"], "the continued agent ran in the same sandbox"
    _no_key_anywhere(out)


PROMPT = "Run the tests too."


@pytest.fixture(scope="module")
def prompted_to_the_budget(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, int, dict, list[LoggedRequest], str]:
    """One continuation after step 2 with a boundary prompt, stopped by `--max-steps 1` (mini's own limit)."""
    out = tmp_path_factory.mktemp("mini-budget") / "out"
    turns = [_bash(1, "ls"), _bash(2, "ls"), _bash(3, SUBMIT)]
    return (out, *_continue(2, out, turns, "--max-steps", "1", "--boundary-prompt", PROMPT))


@pytest.mark.agent
def test_max_steps_is_mini_swe_agents_own_step_limit(prompted_to_the_budget) -> None:
    out, code, result, log, stderr = prompted_to_the_budget
    assert code == 0, stderr
    cont = result["continuation"]
    assert (cont["agent_status"], cont["steps_used"], cont["counters"]["held_requests"]) == (
        "max_steps",
        1,
        0,
    )
    continued = json.loads((out / cont["files"]["continued_trajectory"]).read_text())
    assert continued["info"]["exit_status"] == "LimitsExceeded"
    assert len(log) == 1


@pytest.mark.agent
def test_a_boundary_prompt_is_appended_and_kept(prompted_to_the_budget) -> None:
    out, code, result, log, stderr = prompted_to_the_budget
    assert code == 0, stderr
    assert result["continuation"]["input_condition"] == "boundary_user_prompt_appended"
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert log[0].body["messages"] == [*expected, {"role": "user", "content": PROMPT}]


class TamperingAdapter(MiniSweAgentAdapter):
    """Changes one observation in the rebuilt trajectory after the rebuild (expected_prefix stays)."""

    def rebuild(self, trajectory, after_step, observations, dest):  # type: ignore[no-untyped-def]
        result = super().rebuild(trajectory, after_step, observations, dest)
        path = result.native_files[0]
        path.write_text(
            path.read_text().replace("README.md\\\\ncalc.py", "README.md\\\\ncalc.py\\\\nextra.py")
        )
        return result


@pytest.mark.agent
def test_a_tampered_prefix_is_refused_and_never_forwarded(tmp_path: Path, docker_client) -> None:
    out = tmp_path / "out"
    with ScriptedUpstream(Script(turns=[]), expected_key=KEY) as upstream:
        os.environ["OPENAI_API_KEY"] = KEY
        request = ReplayRequest(
            mode="run",
            trajectory=MINI.fixture("toolcall") / "trajectory.traj.json",
            after_step=2,
            out=out,
            workspace=MINI.fixture("toolcall") / "workspace",
            continuation=ContinueRequest(
                upstream=upstream.url, agent_env={"MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1"}
            ),
        )
        result = execute(request, adapter=TamperingAdapter())
        log = list(upstream.log)
    cont = result.continuation
    assert cont is not None
    assert (cont.gate, cont.agent_status) == ("refused", "bridge_refused")
    assert cont.mismatch is not None and cont.mismatch.path == "messages[3].content"
    assert "extra.py" in cont.mismatch.actual and "extra.py" not in cont.mismatch.expected
    assert log == [], "a refused request reached the upstream"
    names = {c.name for c in docker_client.containers.list(all=True, filters={"label": LABEL})}
    assert result.container not in names


@pytest.mark.agent
def test_a_failing_upstream_ends_the_run_as_an_agent_error(tmp_path: Path) -> None:
    out = tmp_path / "out"
    turns = [Turn(blocks=[TextBlock(text="x")], fail_after_events=0, repeat=True)]
    code, result, log, stderr = _continue(
        1, out, turns, "--agent-env", "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT=1"
    )
    assert code == 9, stderr  # AgentError, with the complete result directory
    cont = result["continuation"]
    assert cont["agent_status"] == "agent_error" and cont["gate"] == "accepted"
    assert cont["counters"]["upstream_errors"] >= 1
    assert (out / "agent" / "stdout.jsonl").read_bytes().splitlines()[-1].startswith(b'{"type": "exit"')
    _no_key_anywhere(out)


@pytest.mark.agent
def test_a_stalled_upstream_hits_the_idle_timeout(tmp_path: Path) -> None:
    out = tmp_path / "out"
    turns = [Turn(blocks=[TextBlock(text="late")], stall_s=60)]
    code, result, _, stderr = _continue(1, out, turns, "--idle-timeout", "3")
    assert code == 0, stderr
    assert result["continuation"]["agent_status"] == "idle_timeout"


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--model", "anthropic/claude-sonnet-5"], "is not routed to chat completions"),
        (["--after-step", "7"], "where the run ended"),
    ],
)
def test_refusals_before_any_container(extra: list[str], message: str, tmp_path: Path) -> None:
    traj = MINI.fixture("toolcall") / "trajectory.traj.json"
    args = ["run", str(traj), "-n", "2", "-w", str(MINI.fixture("toolcall") / "workspace")]
    args += ["-o", str(tmp_path / "out"), "--continue", "--upstream", "http://127.0.0.1:9", *extra]
    proc = replayer(*args, env={"OPENAI_API_KEY": KEY})
    assert proc.returncode == 4
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
