"""OpenHands V1 with the real pinned SDK in the sandbox: the prefix's actions rerun by the SDK's own tools
(no model call) reproduce every recorded observation at every boundary, a changed workspace shows up as
a divergence, and the rebuilt conversation is resumed by the SDK and continued through the chat bridge."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import NamedTuple

import orjson
import pytest

from replayer.bridges.scripted import LoggedRequest, Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn
from tests.adapters.openhands.test_openhands_parse import CONVERSATION, FIXTURE, _events, requests
from tests.conftest import replayer
from tests.support.continuing import KEY, files_containing

pytestmark = pytest.mark.agent


def _run(after_step: int, out: Path, workspace: Path = FIXTURE / "workspace", *extra: str) -> dict:
    args = ["run", str(CONVERSATION), "-n", str(after_step), "-w", str(workspace), "-o", str(out), "--json"]
    replayer(*args, *extra, check=True)
    return orjson.loads((out / "result.json").read_bytes())


class Replayed(NamedTuple):
    folder: Path
    """The agent server's `<id>` folder holding the recorded conversation as `event_service/`."""
    out: Path
    """`OUT` of `run FOLDER -n 0,1,2,3,4`: `OUT/after-K/` is what `run FOLDER -n K` writes."""


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    """One replay for every boundary, of the conversation in the agent server's folder (`<id>/event_service/`)."""
    root = tmp_path_factory.mktemp("v1")
    folder = root / "0123456789abcdef0123456789abcdef"
    shutil.copytree(CONVERSATION, folder / "event_service")
    out = root / "out"
    args = ["run", str(folder), "-n", "0,1,2,3,4", "-w", str(FIXTURE / "workspace"), "-o", str(out)]
    replayer(*args, "--json", check=True)
    return Replayed(folder, out)


@pytest.mark.parametrize("after_step", range(5))
def test_rerun_reproduces_every_observation(after_step: int, replayed: Replayed) -> None:
    out = replayed.out / f"after-{after_step}"
    result = orjson.loads((out / "result.json").read_bytes())
    calls = [1, 2, 3, 4, 5][:after_step]
    assert len(result["divergences"]) == [0, 2, 3, 4, 5][after_step] or calls == []
    assert [d["status"] for d in result["divergences"]] == ["exact"] * len(result["divergences"])
    assert (
        orjson.loads((out / "expected_prefix.json").read_bytes())
        == requests()[after_step]["body"]["messages"]
    )
    conv = out / Path(result["native_files"][0]).parent
    events = _events(conv)
    original = _events(CONVERSATION)
    fresh = [e for e in events if e["kind"] == "ObservationEvent"]
    old = {e["tool_call_id"]: e for e in original if e["kind"] == "ObservationEvent"}
    actions = {e["id"] for e in events if e["kind"] == "ActionEvent"}
    for event in fresh:
        assert event["id"] != old[event["tool_call_id"]]["id"], "the observation was made again"
        assert event["action_id"] in actions
        assert event["observation"]["content"] == old[event["tool_call_id"]]["observation"]["content"]
    base = orjson.loads((conv / "base_state.json").read_bytes())
    assert base["leaf_event_id"] == events[-1]["id"]
    assert [e["parent_id"] for e in events[1:]] == [e["id"] for e in events[:-1]]


def test_a_changed_workspace_diverges_where_the_file_is_read(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    shutil.copytree(FIXTURE / "workspace", workspace)
    (workspace / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    result = _run(2, tmp_path / "out", workspace)
    status = {d["call_id"]: d["status"] for d in result["divergences"]}
    assert status == {"call_v1_01": "exact", "call_v1_02": "different", "call_v1_03": "different"}
    expected = orjson.loads((tmp_path / "out" / "expected_prefix.json").read_bytes())
    assert "return a + b" in expected[4]["content"][0]["text"]
    assert expected[-1]["content"][0]["text"].endswith("[Command finished with exit code 0]")


def _continue(
    out: Path, turns: list[Turn], *extra: str, conversation: Path = CONVERSATION, after_step: int = 3
) -> tuple[int, dict, list[LoggedRequest], str]:
    with ScriptedUpstream(Script(turns=turns, model="fake-model"), expected_key=KEY) as upstream:
        args = ["run", str(conversation), "-n", str(after_step), "-w", str(FIXTURE / "workspace")]
        args += ["-o", str(out)]
        args += ["--json", "--continue", "--upstream", upstream.url, *extra]
        proc = replayer(*args, env={"OPENAI_API_KEY": KEY})
        log = list(upstream.log)
    result = orjson.loads((out / "result.json").read_bytes()) if (out / "result.json").exists() else {}
    return proc.returncode, result, log, proc.stderr


def _terminal(n: int, command: str) -> Turn:
    return Turn(blocks=[ToolUseBlock(id=f"call_cont_{n}", name="terminal", input={"command": command})])


PROMPT = "Now add a docstring."


class Continued(NamedTuple):
    out: Path
    code: int
    result: dict
    log: list[LoggedRequest]
    stderr: str


@pytest.fixture(scope="module")
def continued(tmp_path_factory: pytest.TempPathFactory) -> Continued:
    """One continuation for the module: the reruns of steps 1-3, a boundary prompt, then the agent runs one
    command and finishes."""
    turns = [
        Turn(blocks=[TextBlock(text="Check again."), *_terminal(1, "cat calc.py").blocks]),
        Turn(blocks=[ToolUseBlock(id="call_cont_2", name="finish", input={"message": "done"})]),
    ]
    out = tmp_path_factory.mktemp("v1-continued") / "out"
    return Continued(out, *_continue(out, turns, "--boundary-prompt", PROMPT))


def test_continues_the_resumed_conversation_to_finish(continued: Continued) -> None:
    out, result, log = continued.out, continued.result, continued.log
    assert continued.code == 0, continued.stderr
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 2)
    assert cont["model"] == "openai/fake-model"
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert all(r.key_ok for r in log)
    assert log[1].body["messages"][: len(expected)] == expected
    assert "return a + b" in log[1].body["messages"][-1]["content"][0]["text"]
    events = _events(out / "continued" / "conversation")
    assert [e["tool_call_id"] for e in events if e["kind"] == "ActionEvent"][-2:] == [
        "call_cont_1",
        "call_cont_2",
    ]
    assert files_containing(out, KEY.encode()) == []


def test_a_boundary_prompt_is_the_user_message_after_the_prefix(continued: Continued) -> None:
    assert continued.code == 0, continued.stderr
    cont = continued.result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["input_condition"]) == (
        "accepted",
        "completed",
        "boundary_user_prompt_appended",
    )
    expected = orjson.loads((continued.out / "expected_prefix.json").read_bytes())
    first = [r for r in continued.log if r.main_thread][0].body["messages"]
    assert first[: len(expected)] == expected and len(first) == len(expected) + 1
    assert first[-1]["role"] == "user" and first[-1]["content"][0]["text"] == PROMPT


SHELL_STATE = "ls; export FOO=from-prefix; cd /tmp; (exit 3)"
"""Call 1 with the same output, leaving the terminal in another directory with a variable exported
and `$?` 3."""


def _with_call_1(conversation: Path, command: str) -> Path:
    """The recorded conversation with `command` in place of call 1's `ls` (its action and observation)."""
    shutil.copytree(CONVERSATION, conversation, ignore=shutil.ignore_patterns(".eventlog.lock"))
    for path in (conversation / "events").glob("event-*.json"):
        event = orjson.loads(path.read_bytes())
        if event.get("tool_call_id") != "call_v1_01":
            continue
        if event["kind"] == "ActionEvent":
            event["action"]["command"] = command
            event["tool_call"]["arguments"] = orjson.dumps({"command": command}).decode()
            event["summary"] = event["summary"].replace('"ls"', orjson.dumps(command).decode())
        else:
            event["observation"]["command"] = command
        path.write_bytes(orjson.dumps(event))
    return conversation


class Forked(NamedTuple):
    out: Path
    """`OUT` of `run CONVERSATION -n 1,2 --continue --max-steps 2`: `OUT/after-K/` is boundary K's."""
    code: int
    stderr: str
    log: list[LoggedRequest]
    """The main thread's requests of both continuations."""


@pytest.fixture(scope="module")
def forked(tmp_path_factory: pytest.TempPathFactory) -> Forked:
    """One replay of the conversation with SHELL_STATE as call 1, continued at boundaries 1 and 2 (each from
    the state the replay passed there), two model turns each: the first shows the shell, the second runs
    `echo again`; the script answers each conversation by its history."""
    root = tmp_path_factory.mktemp("v1-forked")
    conversation = _with_call_1(root / "conversation", SHELL_STATE)
    turns = [_terminal(1, 'echo "status=$?"; pwd; echo "FOO=$FOO"')]
    turns += [_terminal(n, "echo again") for n in range(2, 6)]
    out = root / "out"
    with ScriptedUpstream(
        Script(by_history=True, model="fake-model", turns=turns), expected_key=KEY
    ) as upstream:
        args = ["run", str(conversation), "-n", "1,2", "-w", str(FIXTURE / "workspace"), "-o", str(out)]
        args += ["--json", "--continue", "--upstream", upstream.url, "--max-steps", "2"]
        proc = replayer(*args, env={"OPENAI_API_KEY": KEY})
        log = [r for r in upstream.log if r.main_thread]
    return Forked(out, proc.returncode, proc.stderr, log)


def test_max_steps_is_the_sdk_iteration_budget_in_the_prefixs_shell(forked: Forked) -> None:
    """The resumed conversation's terminal is a new shell: it is given the prefix's working directory and
    exports (adapters/openhands/shell.py) before the agent's first command, which sees them, and sees
    nothing of that in its output (boundary 1 of the forked run)."""
    out = forked.out / "after-1"
    result = orjson.loads((out / "result.json").read_bytes()) if (out / "result.json").exists() else {}
    assert "continuation" in result, f"exit {forked.code}: {forked.stderr}"
    cont = result["continuation"]
    assert cont["agent_status"] == "max_steps", forked.stderr
    assert cont["metadata"] == {"max_iterations": 2}
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    at_2 = orjson.loads((forked.out / "after-2" / "expected_prefix.json").read_bytes())
    main = [r for r in forked.log if r.body["messages"][: len(at_2)] != at_2]  # boundary 1's
    assert len(main) == 2
    assert main[0].body["messages"] == expected, "without a prompt the first request is the prefix alone"
    assert main[1].body["messages"][-1]["content"][0]["text"] == (
        "\x1b[?2004lstatus=3\n/tmp\nFOO=from-prefix\n\x1b[?2004h\n"
        "[The command completed with exit code 0.]\n[Current working directory: /tmp]\n"
        "[Command finished with exit code 0]"
    )


def test_the_agent_server_folder_reruns_like_the_conversation(replayed: Replayed) -> None:
    """`<id>/event_service/` (the agent server's place of the conversation): every call reruns exact."""
    result = orjson.loads((replayed.out / "after-4" / "result.json").read_bytes())
    assert [d["status"] for d in result["divergences"]] == ["exact"] * 5  # the calls of steps 1-4
    assert result["request"]["trajectory"] == str(replayed.folder)


def test_each_boundary_of_one_replay_continues_in_its_own_prefixs_shell(forked: Forked) -> None:
    """`run -n 1,2 --continue` forks each boundary's continuation from the state the one replay passed
    there: each fresh terminal is given the shell as that boundary left it (the replay's shell went on)."""
    assert forked.code == 0, forked.stderr
    seen = [
        r.body["messages"][-1]["content"][0]["text"]
        for r in forked.log
        if r.body["messages"][-1]["role"] == "tool"
    ]
    answers = [t for t in seen if "FOO=" in t]
    assert len(answers) == 2 and all("/tmp\nFOO=from-prefix\n" in t for t in answers), answers
