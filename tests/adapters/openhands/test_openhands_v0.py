"""OpenHands V0 event lists recorded by the pinned openhands-ai 1.6.0 (headless, local runtime, in the
sandbox): steps, the prepared prefix at every boundary against the request V0 really sent, the other
shapes of the format (an evaluation output's `history`, no system event, actions without observations),
the reruns by the V0 runtime in the sandbox, the continuation through the chat bridge, and the refusals."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import docker
import orjson
import pytest

from replayer.adapters.base import Rebuild
from replayer.adapters.openhands import bundle, v0
from replayer.adapters.openhands.v0_adapter import (
    OpenHandsV0Adapter,
    V0Continuation,
    _request_answer,
    _request_answer_line,
    _RequestAnswer,
    text_form_refusal,
)
from replayer.bridges.chat import ChatPrefixGate
from replayer.bridges.core import Decision
from replayer.bridges.scripted import LoggedRequest, Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn
from replayer.floor.errors import PlanRefused, SandboxError
from replayer.floor.pins import load_pins
from replayer.pipeline.engine import load
from replayer.pipeline.plan import make_plan
from tests.conftest import OPENHANDS, replayer
from tests.support.continuing import KEY, files_containing

FIXTURE = OPENHANDS.root / "v0"
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


def test_a_response_id_used_again_after_a_user_message_starts_a_new_step(tmp_path: Path) -> None:
    """A model service that numbers its responses anew (the scripted one of `replayer verify`, after a
    boundary prompt) gives a later response the id of an earlier one: a user message between them parts
    them, as ConversationMemory does."""
    events = _events()
    again = orjson.loads(orjson.dumps(events[8:10]).replace(b"chatcmpl-002", b"chatcmpl-001"))
    prompt = {"id": 90, "source": "user", "message": "Go on.", "action": "message"}
    prompt["args"] = {"content": "Go on.", "file_urls": [], "image_urls": [], "wait_for_response": False}
    path = tmp_path / "again.json"
    path.write_bytes(orjson.dumps([*events[:8], prompt, *again, *events[10:]]))
    _, traj = load(path)
    assert [[c.id for c in s.calls] for s in traj.steps] == [
        ["call_v0_01", "call_v0_02"],
        ["call_v0_03"],
        ["call_v0_04"],
        ["call_v0_05"],
        ["call_v0_06"],
    ]
    assert traj.steps[1].message_id == "chatcmpl-001" and all(s.complete for s in traj.steps)


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


def test_without_a_system_event_the_gate_takes_the_agents_own_and_holds_the_rest(tmp_path: Path) -> None:
    path = tmp_path / "no-system.json"
    path.write_bytes(orjson.dumps([e for e in _events() if e.get("action") != "system"]))
    out = tmp_path / "out"
    replayer("prepare", str(path), "-n", "2", "-o", str(out), check=True)
    prefix = orjson.loads((out / "expected_prefix.json").read_bytes())
    sent = [r["body"] for r in _requests()]
    assert prefix == sent[2]["messages"][1:], "the prefix is the real request without its system message"

    def route(gate: ChatPrefixGate, messages: list[dict]) -> Decision:
        return gate.route("POST", "/v1/chat/completions", {**sent[2], "messages": messages})

    adapter = OpenHandsV0Adapter()
    gate = adapter.gate(
        Rebuild(native_files=[], expected_prefix=prefix, continuation=V0Continuation()), None, False
    )
    no_system = route(gate, prefix)
    assert no_system.kind == "refuse" and no_system.mismatch and no_system.mismatch.path == "messages[0]"
    assert route(gate, sent[3]["messages"]).kind == "refuse", "a longer first request"
    assert route(gate, sent[2]["messages"]).kind == "main" and gate.passed
    assert len(gate.notes) == 1 and "the agent's own" in gate.notes[0]
    assert route(gate, sent[3]["messages"]).kind == "main"
    other = {"role": "system", "content": [{"type": "text", "text": "another prompt"}]}
    changed = route(gate, [other, *sent[3]["messages"][1:]])
    assert changed.kind == "refuse" and changed.mismatch and changed.mismatch.path.startswith("messages[0]")
    recorded = adapter.gate(
        Rebuild(native_files=[], expected_prefix=sent[2]["messages"], continuation=V0Continuation()),
        None,
        False,
    )
    assert route(recorded, [other, *prefix]).kind == "refuse", "a recorded system message is held"


FAKE_MODEL = ("--model", "openai/fake-model")


class Continued(NamedTuple):
    out: Path
    code: int
    result: dict
    log: list[LoggedRequest]
    stderr: str
    execs: list[str]
    """Every command the engine started in the run's container, as Docker reports each exec it starts."""


@contextmanager
def _exec_starts() -> Iterator[list[tuple[str, str]]]:
    """(container name, command) of each exec Docker starts meanwhile, on any container: its event stream
    heard live (its kept backlog is short on a shared engine)."""
    heard: list[tuple[str, str]] = []
    stream = docker.from_env().events(filters={"event": "exec_start"}, decode=True)

    def listen() -> None:
        try:
            for event in stream:
                name = event.get("Actor", {}).get("Attributes", {}).get("name", "")
                heard.append((name, event.get("Action", "").removeprefix("exec_start: ")))
        except Exception:  # the stream closed
            pass

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    try:
        yield heard
    finally:
        stream.close()
        thread.join(10)


def _continue(
    out: Path,
    after_step: int,
    turns: list[Turn],
    *extra: str,
    trajectory: Path = TRAJECTORY,
    workspace: Path = FIXTURE / "workspace",
) -> Continued:
    with ScriptedUpstream(Script(turns=turns, model="fake-model"), expected_key=KEY) as upstream:
        ws = str(workspace)
        args = ["run", str(trajectory), "-n", str(after_step), "-w", ws, "-o", str(out), "--json"]
        args += ["--continue", "--upstream", upstream.url, *extra]
        with _exec_starts() as heard:
            proc = replayer(*args, env={"OPENAI_API_KEY": KEY})
        log = list(upstream.log)
    result = orjson.loads((out / "result.json").read_bytes()) if (out / "result.json").exists() else {}
    execs = [command for name, command in heard if name == result.get("container")]
    return Continued(out, proc.returncode, result, log, proc.stderr, execs)


def _companion_modes(run: Continued) -> list[str]:
    """The modes the V0 companion was started in, in the run's container, in order."""
    marker = "oh_v0_companion.py "
    return [c.split(marker, 1)[1].split()[0] for c in run.execs if marker in c]


def _bash(n: int, command: str) -> ToolUseBlock:
    return ToolUseBlock(
        id=f"call_cont_{n}", name="execute_bash", input={"command": command, "security_risk": "LOW"}
    )


PROMPT = "Now add a docstring."
KERNELS = "ps -eo args | grep -c '[k]ernelgateway\\|[i]pykernel'"
"""How many Jupyter processes (kernel gateway, kernel) run in the sandbox."""


@pytest.fixture(scope="module")
def continued(tmp_path_factory: pytest.TempPathFactory) -> Continued:
    """One run for the module: the reruns of steps 1-4 by the V0 runtime, a boundary prompt, then the agent
    goes on to finish (each V0 run starts the runtime twice, for the reruns and for the continuation)."""
    finish = ToolUseBlock(id="call_cont_2", name="finish", input={"message": "done"})
    turns = [
        Turn(blocks=[TextBlock(text="Check again."), _bash(1, f"cat calc.py; {KERNELS}")]),
        Turn(blocks=[finish]),
    ]
    root = tmp_path_factory.mktemp("v0")
    return _continue(root / "out", 4, turns, *FAKE_MODEL, "--boundary-prompt", PROMPT)


@pytest.mark.agent
def test_rerun_by_the_v0_runtime_reproduces_every_observation(continued: Continued) -> None:
    out, result = continued.out, continued.result
    assert [d["status"] for d in result["divergences"]] == ["exact"] * 5
    assert orjson.loads((out / "expected_prefix.json").read_bytes()) == _requests()[4]["body"]["messages"]
    cut = orjson.loads((out / result["native_files"][0]).read_bytes())
    original = _events()[: len(cut)]
    fresh = [(a, b) for a, b in zip(cut, original, strict=True) if a != b]
    assert fresh and all(a.get("observation") and a["timestamp"] != b["timestamp"] for a, b in fresh)
    assert all({**a, "timestamp": b["timestamp"]} == b for a, b in fresh), "only the time differs"


@pytest.mark.agent
def test_a_boundary_prompt_is_a_user_message_replayed_after_the_prefix(continued: Continued) -> None:
    """The prompt is appended to the replayed list as a user message event; ReplayManager replays it last,
    and the agent's first request is the prefix and that message, as ConversationMemory renders it."""
    assert continued.code == 0, continued.stderr
    cont = continued.result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["input_condition"]) == (
        "accepted",
        "completed",
        "boundary_user_prompt_appended",
    )
    expected = orjson.loads((continued.out / "expected_prefix.json").read_bytes())
    first = continued.log[0].body["messages"]
    assert first[:-1] == expected == _requests()[4]["body"]["messages"]
    assert first[-1] == {"content": [{"type": "text", "text": PROMPT}], "role": "user"}
    events = orjson.loads((continued.out / "continued" / "trajectory.json").read_bytes())
    prompt = [e for e in events if e.get("source") == "user" and e.get("action") == "message"][-1]
    assert prompt["args"]["content"] == PROMPT


def test_a_v0_continuation_needs_a_litellm_model(tmp_path: Path) -> None:
    ws = FIXTURE / "workspace"
    args = ["run", str(TRAJECTORY), "-n", "1", "-w", str(ws), "-o", str(tmp_path / "out")]
    proc = replayer(*args, "--continue", "--upstream", "http://127.0.0.1:9", env={"OPENAI_API_KEY": "k"})
    assert proc.returncode == 4 and "pass --model" in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "out").exists()


def _forked(tmp_path: Path) -> Path:
    """The recording with its first tool call made by an action a fork adds (`chat`), answered by the fork's
    own observation kind."""
    events = _events()
    action, observation = events[4], events[5]
    tcm = action["tool_call_metadata"]
    for call in tcm["model_response"]["choices"][0]["message"]["tool_calls"]:
        if call["id"] == tcm["tool_call_id"]:
            call["function"]["name"] = "chat"
    events[4] = {**action, "action": "chat", "tool_call_metadata": {**tcm, "function_name": "chat"}}
    events[5] = {
        **observation,
        "observation": "chat",
        "tool_call_metadata": {**observation["tool_call_metadata"], "function_name": "chat"},
    }
    path = tmp_path / "forked.json"
    path.write_bytes(orjson.dumps(events))
    return path


def test_an_action_a_fork_adds_is_an_unknown_tool_kept_with_allow_degraded(tmp_path: Path) -> None:
    path = _forked(tmp_path)
    inspected = replayer("inspect", str(path))
    assert inspected.returncode == 0, inspected.stderr
    assert (
        "actions the replayer does not know (a fork's?), carried as recorded: 'chat' (1)" in inspected.stdout
    )

    adapter, traj = load(path)
    _, recorded = load(TRAJECTORY)
    assert [[c.id for c in s.calls] for s in traj.steps] == [[c.id for c in s.calls] for s in recorded.steps]
    assert traj.steps[0].calls[0].tool == "chat" and traj.steps[0].complete
    with pytest.raises(PlanRefused, match=r"unknown tool 'chat'.*--allow-degraded"):
        make_plan(adapter, traj, 1, allow_degraded=False)
    assert [d.action for d in make_plan(adapter, traj, 1, allow_degraded=True).degradations] == [
        "historical_kept"
    ]
    # the fork's observation is the call's tool result in the prefix, as every tool call's is
    out = tmp_path / "out"
    replayer("prepare", str(path), "-n", "1", "-o", str(out), "--allow-degraded", check=True)
    prefix = orjson.loads((out / "expected_prefix.json").read_bytes())
    recorded_prefix = _requests()[1]["body"]["messages"]
    assert [m["role"] for m in prefix] == [m["role"] for m in recorded_prefix]
    call_id = traj.steps[0].calls[0].id
    [result] = [m for m in prefix if m.get("tool_call_id") == call_id]
    assert result["name"] == "chat" and result["content"] == [
        {"type": "text", "text": _events()[5]["content"]}
    ]
    # the pinned openhands-ai cannot load the fork's action back: a continuation is refused before it starts
    args = ["run", str(path), "-n", "1", "-w", str(FIXTURE / "workspace"), "-o", str(tmp_path / "run")]
    proc = replayer(
        *args, "--allow-degraded", "--continue", "--upstream", "mock", "--model", "openai/fake-model"
    )
    assert proc.returncode == 4 and "does not define ('chat')" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


@pytest.mark.agent
def test_continues_after_the_replayed_prefix_to_finish(continued: Continued) -> None:
    out, log = continued.out, continued.log
    assert continued.code == 0, continued.stderr
    cont = continued.result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 2)
    assert cont["gate_notes"] == [], "the file records the system message: the gate holds it too"
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert log[0].body["messages"][:-1] == expected == _requests()[4]["body"]["messages"]  # + the prompt
    assert log[1].body["messages"][: len(expected)] == expected and all(r.key_ok for r in log)
    assert "return a + b" in log[1].body["messages"][-1]["content"][0]["text"], (
        "the edit was not applied twice"
    )
    events = orjson.loads((out / "continued" / "trajectory.json").read_bytes())
    calls = [(e.get("tool_call_metadata") or {}).get("tool_call_id") for e in events if "action" in e]
    assert calls[-2:] == ["call_cont_1", "call_cont_2"]
    assert files_containing(out, KEY.encode()) == []


@pytest.mark.agent
def test_the_reruns_companion_tells_the_first_request_no_interpreter_started_for_it(
    continued: Continued,
) -> None:
    """The continuation's first request (function calling native or not) is told by the reruns' companion,
    which has the version imported and its runtime up: no `request` process is started, and what it told
    is what the gate held the agent's request to (the native form: the expected prefix)."""
    assert continued.code == 0, continued.stderr
    assert _companion_modes(continued) == ["serve", "continue"], continued.execs
    cont = continued.result["continuation"]
    assert cont["gate"] == "accepted" and cont["metadata"]["function_calling"] == "native"


@pytest.mark.agent
def test_no_jupyter_kernel_runs_for_an_agent_without_the_ipython_tool(continued: Continued) -> None:
    """CodeActAgent asks each runtime for a Jupyter kernel whatever its tools; with `enable_jupyter` off
    (the replayed configuration) neither the reruns' runtime nor the continuation's starts one."""
    assert continued.code == 0, continued.stderr
    output = continued.log[1].body["messages"][-1]["content"][0]["text"]
    assert "\n0\n[The command completed with exit code 1.]" in output, output


SHELL_STATE = "ls; export FOO=from-prefix; cd /tmp; (exit 3)"
"""Call 1 with the same output, leaving V0's shell in another directory with a variable exported and
`$?` 3."""


@pytest.mark.agent
def test_max_steps_counts_model_turns_after_the_replay_in_the_prefixs_shell(tmp_path: Path) -> None:
    """The continuation's runtime starts a new shell: it is given the prefix's working directory and
    exports (adapters/openhands/shell.py) before the agent's first command, which sees them, and sees
    nothing of that in its output."""
    turns = [Turn(blocks=[_bash(1, 'echo "status=$?"; pwd; echo "FOO=$FOO"')])]
    turns += [Turn(blocks=[_bash(n, "echo again")]) for n in range(2, 6)]
    path = tmp_path / "shell.json"
    path.write_bytes(orjson.dumps(_with_call_1(SHELL_STATE)))
    run = _continue(tmp_path / "out", 1, turns, *FAKE_MODEL, "--max-steps", "2", trajectory=path)
    assert "continuation" in run.result, f"exit {run.code}: {run.stderr}"
    assert run.result["continuation"]["agent_status"] == "max_steps", run.stderr
    main = [r for r in run.log if r.main_thread]
    assert len(main) == 2
    expected = orjson.loads((run.out / "expected_prefix.json").read_bytes())
    assert main[0].body["messages"] == expected, "without a prompt the first request is the prefix alone"
    assert (
        main[1]
        .body["messages"][-1]["content"][0]["text"]
        .startswith(
            "status=3\n/tmp\nFOO=from-prefix\n[The command completed with exit code 0.]\n"
            "[Current working directory: /tmp]\n"
        )
    )


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


def _one_call_per_response(
    path: Path, native_tool_calling: bool | None, recorded: list[dict] | None = None
) -> Path:
    """The fixture (or `recorded`, events of it) as an evaluation output of a run whose responses each made
    one call (step 1 without its second call, `call_v0_02`), recording its LLM config: V0's text form carries
    one call per message."""
    recorded = _events() if recorded is None else recorded
    events = [e for e in recorded if (e.get("tool_call_metadata") or {}).get("tool_call_id") != "call_v0_02"]
    for e in events:
        for choice in (e.get("tool_call_metadata") or {}).get("model_response", {}).get("choices", []):
            message = choice["message"]
            message["tool_calls"] = [c for c in message["tool_calls"] if c["id"] != "call_v0_02"]
    config = {"model": "openai/fake-model", "native_tool_calling": native_tool_calling}
    path.write_bytes(
        orjson.dumps({"instance_id": "calc-1", "metadata": {"llm_config": config}, "history": events})
    )
    return path


def test_the_recorded_llm_config_gives_the_model_and_the_tool_calling_setting(tmp_path: Path) -> None:
    for recorded, setting in ((None, "unset"), (False, "false"), (True, "true")):
        adapter, traj = load(_one_call_per_response(tmp_path / "out.json", recorded))
        assert isinstance(adapter, OpenHandsV0Adapter)
        assert adapter.default_model(traj) == "openai/fake-model"
        assert v0.native_tool_calling(traj.native_as(v0.NativeV0).wrapper) == setting
    bare = load(TRAJECTORY)[1]
    assert v0.native_tool_calling(bare.native_as(v0.NativeV0).wrapper) == "true", "the pinned config's"
    assert OpenHandsV0Adapter().default_model(bare) is None


def test_in_the_text_form_the_gate_holds_the_converted_request_not_the_native_prefix() -> None:
    native = _requests()[2]["body"]["messages"]
    text = [{"role": m["role"], "content": f"as text: {m['role']}"} for m in native if m["role"] != "tool"]
    facts = V0Continuation(function_calling=False, request=text)
    gate = OpenHandsV0Adapter().gate(
        Rebuild(native_files=[], expected_prefix=native, continuation=facts), None, False
    )
    refused = gate.route("POST", "/v1/chat/completions", {"messages": native})
    assert refused.kind == "refuse" and refused.mismatch and refused.mismatch.path.startswith("messages[0]")
    assert gate.route("POST", "/v1/chat/completions", {"messages": text}).kind == "main"
    assert gate.notes == [], "the converted request carries the recorded system message: held, not taken"


def test_the_gate_holds_a_boundary_prompt_after_the_prefix_and_the_text_form_as_converted() -> None:
    native = _requests()[2]["body"]["messages"]
    prompted = [*native, {"content": [{"type": "text", "text": "Go on."}], "role": "user"}]

    def kind(facts: V0Continuation, prompt: str, keep: bool, messages: list[dict]) -> str:
        gate = OpenHandsV0Adapter().gate(
            Rebuild(native_files=[], expected_prefix=native, continuation=facts), prompt, keep
        )
        return gate.route("POST", "/v1/chat/completions", {"messages": messages}).kind

    assert kind(V0Continuation(), "Go on.", True, prompted) == "main"
    assert kind(V0Continuation(), "Go on.", True, native) == "refuse", "the prompt is held too"
    assert kind(V0Continuation(), "nonce", False, native) == "main", "a prompt not kept is no message"
    text = [{"role": m["role"], "content": f"as text: {m['role']}"} for m in prompted if m["role"] != "tool"]
    converted = V0Continuation(function_calling=False, request=text)
    assert kind(converted, "Go on.", True, text) == "main", "the converter's rendering, prompt included"


def test_a_companion_answer_that_is_not_one_request_line_fails_in_one_line() -> None:
    good = b'{"type": "request", "model": "m", "function_calling": false, "messages": [], "error": null}\n'
    assert _request_answer(b"noise\n" + good, b"", 0).function_calling is False
    both = good.replace(b'"error": null', b'"error": "x"')
    for stdout, code in ((b"", 0), (good, 1), (b"{not json", 0), (both, 0)):
        with pytest.raises(SandboxError) as err:
            _request_answer(stdout, b"Traceback\nValueError: boom\n", code)
        assert len(str(err.value).splitlines()) == 1 and "ValueError: boom" in str(err.value)


def test_the_reruns_companions_answer_that_is_not_one_request_fails_in_one_line() -> None:
    """The reruns' companion answers {"request": ...} on its socket, or {"error": ...} when telling it
    raised; anything but one valid answer is a one-line error naming why."""
    good = orjson.loads(
        b'{"type": "request", "model": "m", "function_calling": true, "messages": [], "error": null}'
    )
    assert _request_answer_line({"request": good}).function_calling is True
    both = {**good, "error": "x"}
    for line in ({"error": "ValueError: boom\nmore"}, {"request": both}, {"request": "text"}, {}):
        with pytest.raises(SandboxError) as err:
            _request_answer_line(line)
        assert len(str(err.value).splitlines()) == 1 and "did not tell the first request" in str(err.value)
    with pytest.raises(SandboxError, match="ValueError: boom"):
        _request_answer_line({"error": "ValueError: boom"})


@pytest.mark.agent
def test_the_versions_own_llm_renders_the_native_form_and_refuses_two_calls_in_text(tmp_path: Path) -> None:
    """The companion's `request` mode (it makes the agent and its LLM, no runtime), run by the pinned V0
    interpreter on the host here: with function calling on, its rendering of the prefix is the request V0
    really sent; off, its converter refuses step 1's two calls in one message, which the replayer refuses
    in one line naming the mode and the model."""
    out = tmp_path / "out"
    replayer("prepare", str(TRAJECTORY), "-n", "2", "-o", str(out), check=True)
    python = load_pins().bundle_dir(bundle.NAME_V0) / "bin" / "python"
    companion = bundle.COMPANION_DIR / "oh_v0_companion.py"

    def ask(setting: str) -> _RequestAnswer:
        env = {**bundle.base_env(), "HOME": str(tmp_path), "TMPDIR": str(tmp_path), "LOG_LEVEL": "warning"}
        env.update(LLM_MODEL="openai/fake-model", REPLAYER_NATIVE_TOOL_CALLING=setting)
        config, prefix = companion.parent / "v0_config.toml", out / "expected_prefix.json"
        argv = [str(python), str(companion), "request", str(config), str(tmp_path), str(prefix)]
        proc = subprocess.run(argv, capture_output=True, env=env, cwd=tmp_path)
        return _request_answer(proc.stdout, proc.stderr, proc.returncode)

    native = ask("true")
    assert native.function_calling and native.messages == _requests()[2]["body"]["messages"]
    text = ask("unset")
    assert (text.function_calling, text.messages) == (False, None)
    refusal = text_form_refusal("1.6.0", text, "unset")
    assert "text form with openai/fake-model (native_tool_calling unset)" in refusal
    assert "FunctionCallConversionError: Expected exactly one tool call" in refusal
    assert len(refusal.splitlines()) == 1


IRI_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import deferred_iri, jsonschema
imported = "rfc3987_syntax.syntax_helpers" in sys.modules
checker = jsonschema.FormatChecker()
checks = [checker.conforms(*c) for c in (("http://\u4f8b.jp/\u00fc", "iri"), ("no iri", "iri"), ("a b", "iri-reference"))]
print(json.dumps([imported, checks, "rfc3987_syntax.syntax_helpers" in sys.modules]))
"""
"""With the companion's folder on the path: whether jsonschema's import built the IRI parser, what its `iri`
checks answer, and whether checking built it."""


@pytest.mark.agent
def test_the_v0_processes_build_the_iri_parser_where_it_is_first_used() -> None:
    """rfc3987_syntax (jsonschema's `iri` formats in openhands-ai 1.6.0) builds its parser as it is imported,
    in every V0 process: the companion and its action execution server import the stand-in first
    (companion/deferred_iri.py), with which jsonschema's import does not build it and its first check does,
    answering as the real module does."""
    python = load_pins().bundle_dir(bundle.NAME_V0) / "bin" / "python"
    proc = subprocess.run(
        [str(python), "-c", IRI_PROBE, str(bundle.COMPANION_DIR)], capture_output=True, text=True
    )
    assert orjson.loads(proc.stdout) == [False, [True, False, False], True], proc.stderr
    for name in ("oh_v0_companion.py", "v0_server.py"):
        imported = []
        for node in ast.parse((bundle.COMPANION_DIR / name).read_text()).body:
            if isinstance(node, ast.Import):
                imported += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                imported.append(node.module or "")
        ours = [m for m in imported if m.split(".")[0] not in sys.stdlib_module_names]
        assert ours[0] == "deferred_iri", f"{name} imports {ours[0]} first"


def _text_call(tool: str, **params: str) -> TextBlock:
    """A tool call as V0's text form writes it (fn_call_converter's format, parsed back by the version)."""
    lines = [f"<parameter={k}>{v}</parameter>" for k, v in params.items()]
    return TextBlock(text="\n".join([f"<function={tool}>", *lines, "</function>"]))


PAUSE_SHELL = "ls; (python3 .pause_shell.py $$ >.pause_shell.log 2>&1 &)"
"""Call 1 (`ls`) with the same output and exit code, which also stops V0's shell (bash in its tmux pane)
for 4 s as soon as V0 has cleared the pane after it (data/pause_shell.py, put in the workspace unlisted):
call 3 is typed into a shell that does not take it at once, as a loaded machine's shell does now and
then."""


def _with_call_1(command: str) -> list[dict]:
    """The fixture's events with `command` in place of call 1's `ls`, in every event that records it."""
    events = _events()
    for event in events[4:6]:  # call 1's action and observation
        event["message"] = event["message"].replace("ls", command, 1)
        event.get("args", event.get("extras"))["command"] = command
    for event in events:  # the response, in each of its actions' and observations' metadata
        response = (event.get("tool_call_metadata") or {}).get("model_response") or {}
        for choice in response.get("choices", []):
            for call in choice["message"].get("tool_calls") or []:
                if call["id"] == "call_v0_01":
                    call["function"]["arguments"] = orjson.dumps(
                        {"command": command, "security_risk": "LOW"}
                    ).decode()
    return events


@pytest.mark.agent
def test_a_text_form_continuation_passes_the_gate_and_is_parsed_back_after_a_shell_slow_to_take_a_command(
    tmp_path: Path,
) -> None:
    """native_tool_calling recorded unset and a model 1.6.0 does not take for a function caller: the version
    itself (asked by the companion) calls functions in its text form, its converter renders the first
    request, the gate holds the real one to it exactly, and the scripted text answers are parsed back.

    The same run's reruns: V0's shell types a command into its tmux pane and takes the first screen that ends
    in a prompt for the command's end: a shell that has not yet echoed the command (or not yet redrawn its
    prompt after V0's Ctrl-L) answers with the screen and exit code of the command before, behind "[Previous
    command outputs are truncated...]" or not. The recorded run never lost that race (a model call came
    between commands); the rerun waits for the pane as that run had it, so call 3, typed while the shell is
    stopped (call 1 is PAUSE_SHELL), still answers with its own traceback, and every call after it as
    recorded."""
    path = _one_call_per_response(tmp_path / "output.json", None, _with_call_1(PAUSE_SHELL))
    workspace = tmp_path / "workspace"
    shutil.copytree(FIXTURE / "workspace", workspace)
    shutil.copy(Path(__file__).parent / "data" / "pause_shell.py", workspace / ".pause_shell.py")
    turns = [
        Turn(
            blocks=[
                TextBlock(text="Look again.\n\n"),
                _text_call("execute_bash", command="cat calc.py", security_risk="LOW"),
            ]
        ),
        Turn(blocks=[_text_call("finish", message="done")]),
    ]
    run = _continue(tmp_path / "out", 4, turns, trajectory=path, workspace=workspace)
    assert run.code == 0, run.stderr
    # the slow shell: every call of steps 1-4 (call_v0_02 is not in this file) reruns as recorded
    assert (run.out / "state" / "workspace" / ".pause_shell.log").read_text() == "", "the shell was stopped"
    reruns = orjson.loads((run.out / "reruns.json").read_bytes())
    assert [d["status"] for d in run.result["divergences"]] == ["exact"] * 4, reruns
    # the text form
    assert _companion_modes(run) == ["serve", "continue"], "the reruns' companion told the text form"
    cont = run.result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 2)
    assert (cont["model"], cont["metadata"]["function_calling"]) == (
        "openai/fake-model",
        "text (fn_call_converter)",
    )
    first, second = (r.body for r in run.log)
    assert "tools" not in first and first["stop"] == ["</function"]
    system, task, *rest = first["messages"]
    assert "You have access to the following functions" in system["content"]
    assert (
        task["content"].startswith("Here's a running example") and "Fix add() in calc.py." in task["content"]
    )
    assert rest[0]["content"].endswith(
        f"<parameter=command>{PAUSE_SHELL}</parameter>\n<parameter=security_risk>LOW</parameter>\n</function>"
    )
    bash = "EXECUTION RESULT of [execute_bash]:\n"
    results = [m["content"] for m in rest if str(m["content"]).startswith(bash)]  # calls 1, 3 and 5
    assert len(results) == 3 and results[1].startswith(f"{bash}Traceback"), results
    assert second["messages"][: len(first["messages"])] == first["messages"]
    assert second["messages"][-1]["content"].startswith(f"{bash}def add(a, b):")
    events = orjson.loads((run.out / "continued" / "trajectory.json").read_bytes())
    continued = [e for e in events if "action" in e][-2:]
    assert [(e["action"], e["tool_call_metadata"]["function_name"]) for e in continued] == [
        ("run", "execute_bash"),
        ("finish", "finish"),
    ]
    assert continued[0]["args"]["command"] == "cat calc.py"
