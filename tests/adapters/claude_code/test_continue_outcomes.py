"""Every way a continuation can end, with the real CLI: refused tampered prefixes and wrong nonces,
an upstream failing mid-stream, the step and idle budgets, a boundary prompt; each leaves a
complete result directory and no container."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from replayer.adapters.claude_code import ClaudeCodeAdapter, reminders, wire
from replayer.adapters.claude_code import continue_launch as cc_continuation
from replayer.adapters.claude_code.gate import ClaudeCodeGate
from replayer.bridges.difference import first_difference
from replayer.bridges.scripted import Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn
from replayer.floor.requests import ContinueRequest, ReplayRequest
from replayer.pipeline.engine import execute
from replayer.sandboxes.docker import LABEL
from tests.conftest import CLAUDE, replayer
from tests.support.continuing import KEY, changed_workspace, continue_run, files_containing, scripted


class TamperingAdapter(ClaudeCodeAdapter):
    """Changes one byte of one observation in the rebuilt session after the rebuild (expected_prefix stays)."""

    def rebuild(self, trajectory, after_step, observations, dest):  # type: ignore[no-untyped-def]
        result = super().rebuild(trajectory, after_step, observations, dest)
        path = result.native_files[0]
        path.write_bytes(path.read_bytes().replace(b'"content":"2 a.txt"', b'"content":"3 a.txt"'))
        return result


class WrongNonceAdapter(ClaudeCodeAdapter):
    def continue_command(self, trajectory, launch):  # type: ignore[no-untyped-def]
        wrong = launch.model_copy(update={"prompt": launch.prompt + "-not-the-nonce"})
        return super().continue_command(trajectory, wrong)


def _in_process(adapter: ClaudeCodeAdapter, out: Path, upstream: ScriptedUpstream):
    request = ReplayRequest(
        mode="run",
        trajectory=CLAUDE.fixture("parallel") / "session.jsonl",
        after_step=2,
        out=out,
        workspace=CLAUDE.fixture("parallel") / "workspace",
        continuation=ContinueRequest(upstream=upstream.url),
    )
    os.environ["ANTHROPIC_API_KEY"] = KEY
    return execute(request, adapter=adapter)


def _gone(docker_client, name: str | None) -> bool:
    assert name
    return name not in {c.name for c in docker_client.containers.list(all=True, filters={"label": LABEL})}


@pytest.mark.agent
@pytest.mark.parametrize(
    ("adapter", "path"),
    [
        (TamperingAdapter(), "messages[2].content[1].content"),
        (WrongNonceAdapter(), "messages[6].content[0].text"),
    ],
)
def test_gate_refuses_and_never_forwards(adapter, path: str, tmp_path: Path, docker_client) -> None:
    with scripted("claude_code", Script(turns=[]), expected_key=KEY) as upstream:
        result = _in_process(adapter, tmp_path / "out", upstream)
        log = list(upstream.log)
    cont = result.continuation
    assert cont is not None
    assert (cont.gate, cont.agent_status) == ("refused", "bridge_refused")
    assert cont.mismatch is not None and cont.mismatch.path == path
    assert cont.counters.main_requests == 0 and cont.counters.refused_requests >= 1
    assert not any(r.main_thread for r in log), "a refused request reached the upstream"
    assert (tmp_path / "out" / "result.json").exists() and (
        tmp_path / "out" / "agent" / "stdout.jsonl"
    ).exists()
    assert _gone(docker_client, result.container)


@pytest.mark.agent
def test_refusal_exit_code_and_one_line(tmp_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from replayer import adapters
    from replayer.cli import app

    monkeypatch.setattr(adapters, "detect_form", lambda path: (TamperingAdapter(), TamperingAdapter.forms[0]))
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    with scripted("claude_code", Script(turns=[]), expected_key=KEY) as upstream:
        args = [
            "run",
            str(CLAUDE.fixture("parallel") / "session.jsonl"),
            "-n",
            "2",
            "-w",
            str(CLAUDE.fixture("parallel") / "workspace"),
        ]
        args += ["-o", str(tmp_path / "out"), "--continue", "--upstream", upstream.url]
        outcome = CliRunner().invoke(app, args)
    assert isinstance(outcome.exception, Exception) and type(outcome.exception).__name__ == "BridgeRefused"
    assert outcome.exception.exit_code == 8
    # the cause in the one line: where, and the first difference as values; then where the details are
    assert str(outcome.exception) == (
        "the first main-thread request does not carry the rebuilt prefix at messages[2].content[1].content: "
        f'expected "2 a.txt", got "3 a.txt" (see {tmp_path / "out" / "result.json"}, continuation.mismatch)'
    )
    result = orjson.loads((tmp_path / "out" / "result.json").read_bytes())
    assert result["continuation"]["mismatch"]["expected"] == "2 a.txt"
    assert result["continuation"]["mismatch"]["actual"] == "3 a.txt"


@pytest.mark.agent
def test_upstream_failing_mid_stream_is_an_agent_error(tmp_path: Path, docker_client) -> None:
    failing = Turn(
        blocks=[TextBlock(text="This answer breaks in the middle of the stream.")],
        fail_after_events=4,
        repeat=True,
    )
    code, result, log, err = continue_run(
        "parallel",
        2,
        tmp_path / "out",
        CLAUDE.fixture("parallel") / "workspace",
        [failing],
        "--agent-env",
        "CLAUDE_CODE_MAX_RETRIES=0",
    )
    assert code == 9 and err.strip().startswith("replayer: agent_error:"), err
    # the cause in the one line: the message of the agent's last event (it wrote no stderr), then the file
    last = orjson.loads((tmp_path / "out" / "agent" / "stdout.jsonl").read_bytes().splitlines()[-1])
    assert last["is_error"] and f"(exit 1): '{last['result'][:60]}" in err, err
    assert err.strip().endswith(f"(see {tmp_path / 'out' / 'agent' / 'stdout.jsonl'})"), err
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"]) == ("accepted", "agent_error")
    assert cont["counters"]["upstream_errors"] >= 1
    for name in (
        "result.json",
        "expected_prefix.json",
        "agent/stdout.jsonl",
        "bridge/log.jsonl",
        "continued/session.jsonl",
    ):
        assert (tmp_path / "out" / name).exists(), name
    assert result["request"]["continuation"]["agent_env"] == {"CLAUDE_CODE_MAX_RETRIES": "0"}
    assert _gone(docker_client, result["container"])
    assert files_containing(tmp_path / "out", KEY.encode()) == []


@pytest.mark.agent
def test_a_compare_run_whose_agent_failed_says_why_in_compare_json_and_the_report(tmp_path: Path) -> None:
    """A run whose agent exited with an error is a run the variant decided (not an infrastructure failure),
    but compare.json and report.html named only its status: now its cause, as `run` says it."""
    failing = Turn(blocks=[TextBlock(text="This answer breaks.")], fail_after_events=4, repeat=True)
    out = tmp_path / "cmp"
    with scripted("claude_code", Script(turns=[failing]), expected_key=KEY) as upstream:
        proc = replayer(
            "compare", str(CLAUDE.fixture("parallel") / "session.jsonl"), "-n", "2",
            "-w", str(CLAUDE.fixture("parallel") / "workspace"), "-o", str(out), "--upstream", upstream.url,
            "--variant", "shared=", "--agent-env", "CLAUDE_CODE_MAX_RETRIES=0",
            env={"ANTHROPIC_API_KEY": KEY},
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [run] = orjson.loads((out / "compare.json").read_bytes())["runs"]
    assert (run["status"], run["continuation"]["agent_status"], run["infrastructure_failure"]) == (
        "ok",
        "agent_error",
        None,
    )
    why = run["continuation_error"]
    assert why.startswith("agent_error: the continued agent failed (exit 1): "), why
    assert why.endswith(f"(see {run['dir']}/agent/stdout.jsonl)"), "named from the compare's output"
    assert (
        why in (out / "report.html").read_text()
        or why.replace("'", "&#x27;") in (out / "report.html").read_text()
    )
    assert f"run shared/1: {why.split(' (see ')[0]}" in proc.stdout, proc.stdout


@pytest.mark.agent
def test_step_budget_of_one(tmp_path: Path, docker_client) -> None:
    turns = [
        Turn(blocks=[ToolUseBlock(id="toolu_budget_1", name="Bash", input={"command": "echo one"})]),
        Turn(blocks=[TextBlock(text="never reached")]),
    ]
    code, result, log, err = continue_run(
        "parallel", 2, tmp_path / "out", CLAUDE.fixture("parallel") / "workspace", turns, "--max-steps", "1"
    )
    assert code == 0, err
    cont = result["continuation"]
    assert (cont["agent_status"], cont["steps_used"], cont["counters"]["held_requests"]) == (
        "max_steps",
        1,
        1,
    )
    assert sum(r.main_thread for r in log) == 1
    assert _gone(docker_client, result["container"])


@pytest.mark.agent
def test_idle_timeout(tmp_path: Path) -> None:
    stalled = [Turn(blocks=[TextBlock(text="late")], stall_s=60)]
    code, result, _, err = continue_run(
        "parallel",
        2,
        tmp_path / "out",
        CLAUDE.fixture("parallel") / "workspace",
        stalled,
        "--idle-timeout",
        "2",
    )
    assert code == 0, err
    assert result["continuation"]["agent_status"] == "idle_timeout"
    assert result["continuation"]["duration_s"] < 50


@pytest.mark.agent
def test_boundary_prompt_is_kept(tmp_path: Path) -> None:
    workspace = changed_workspace("single", tmp_path / "ws")
    code, result, log, err = continue_run(
        "single", 1, tmp_path / "out", workspace, None, "--boundary-prompt", "Please double-check a.txt."
    )
    assert code == 0, err
    cont = result["continuation"]
    assert cont["input_condition"] == "boundary_user_prompt_appended"
    first = next(r for r in log if r.main_thread).body["messages"]
    last = first[-1]["content"]
    assert (
        last[0]["tool_use_id"] == "toolu_single_01"
        and last[0]["content"] == "hi\nchanged after the recording"
    )
    assert last[-1]["text"] == "Please double-check a.txt."
    records = [
        orjson.loads(x)
        for x in (tmp_path / "out" / cont["files"]["continued_session"]).read_bytes().splitlines()
    ]
    prompt = next(r for r in records if r.get("message", {}).get("content") == "Please double-check a.txt.")
    leaf = next(
        r for r in records if r.get("type") == "user" and "toolu_single_01" in orjson.dumps(r).decode()
    )
    assert prompt["parentUuid"] == leaf["uuid"]
    assert not any(r.get("message", {}).get("model") == "<synthetic>" for r in records)


def test_a_stored_tool_use_is_sent_as_stored_by_2_0_64_only() -> None:
    """The API's `caller` on a stored tool_use (2.0.67 on store it): 2.0.65 on send every tool_use rebuilt
    from its id, name and input (tool search is off in the sandbox); 2.0.64 sends the block as stored."""
    call = {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
    records = [
        {"type": "user", "uuid": "u", "message": {"role": "user", "content": "task"}},
        {
            "type": "assistant",
            "uuid": "a",
            "message": {"id": "m1", "content": [{**call, "caller": {"type": "direct"}}]},
        },
        {
            "type": "assistant",
            "uuid": "b",
            "message": {"id": "m1", "content": [{**call, "id": "t2", "extra": 1}]},
        },
        {
            "type": "user",
            "uuid": "r",
            "message": {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": "a"},
                    {"type": "tool_result", "tool_use_id": "t2", "content": "b"},
                ],
            },
        },
    ]
    for version in ("2.0.65", "2.0.67", "2.0.76", "2.0.77", "2.1.197"):
        assert wire.to_messages(records, version)[1]["content"] == [call, {**call, "id": "t2"}], version
    kept = wire.to_messages(records, "2.0.64")[1]["content"]
    assert kept == [{**call, "caller": {"type": "direct"}}, {**call, "id": "t2", "extra": 1}]


def test_a_file_notice_is_merged_into_the_tool_result_before_it_as_each_version_words_it() -> None:
    """`edited_text_file` and `date_change` as the bundled JS renders them (no -p recording made the CLI notice
    a change: read, not recorded): into the tool result of string content before the record; 2.1.196 on word
    an omitted snippet; 2.1.332 words the notice anew; the versions that have no such text render nothing."""
    edited = {"type": "edited_text_file", "filename": "/w/a.txt", "snippet": "2\tTWO"}
    records = [
        {"type": "user", "uuid": "u", "message": {"role": "user", "content": "task"}},
        {"type": "assistant", "uuid": "a", "message": {"id": "m1", "content": [{"type": "tool_use", "id": "t1"}]}},
        {"type": "user", "uuid": "r", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "done\n"}]}},
        {"type": "attachment", "uuid": "e", "attachment": edited},
        {"type": "attachment", "uuid": "d", "attachment": {"type": "date_change", "newDate": "2026-01-02"}},
    ]  # fmt: skip
    result = wire.to_messages(records, "2.1.121")[2]["content"][0]["content"]
    assert result.startswith("done\n\n<system-reminder>\nNote: /w/a.txt was modified, either by the user")
    assert result.count("<system-reminder>") == 2 and "now 2026-01-02." in result
    assert "changes (shown with line numbers):\n2\tTWO\n</system-reminder>" in result
    omitted = reminders.render({**edited, "snippet": ""}, "2.1.197")
    assert omitted is not None and "The diff was omitted" in omitted[0]
    assert reminders.render(edited, "1.0.108") is None
    assert (
        "/w/a.txt changed on disk since you last read it." in (reminders.render(edited, "2.1.332") or [""])[0]
    )
    assert reminders.render(records[-1]["attachment"], "2.0.67") is None


def test_first_difference_paths() -> None:
    assert first_difference({"a": [1, {"b": "x"}]}, {"a": [1, {"b": "y"}]}).path == "a[1].b"  # type: ignore[union-attr]
    assert first_difference([1, 2], [1]).path == "[1]"  # type: ignore[union-attr]
    assert first_difference({"a": 1}, {"a": 1}) is None


def test_gate_is_pure_and_strips_the_envelope() -> None:
    prefix = [
        {"role": "user", "content": [{"type": "text", "text": "task"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "out"}]},
    ]
    gate = ClaudeCodeGate(prefix, "nonce-1", keep_prompt=False, prefix_last_was_string=False)
    body = {
        "tools": [{"name": "Bash", "input_schema": {}}],  # the main thread offers Bash
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "task"}]},
            {"role": "system", "content": "listing"},
            prefix[1],
            {
                "role": "user",
                "content": [
                    prefix[2]["content"][0],
                    {"type": "text", "text": "Continue from where you left off."},
                ],
            },
            {"role": "assistant", "content": [{"type": "text", "text": "No response requested."}]},
            {
                "role": "user",
                "content": [{"type": "text", "text": "nonce-1", "cache_control": {"type": "ephemeral"}}],
            },
        ],
    }
    decision = gate.route("POST", "/v1/messages", body)
    assert decision.kind == "main"
    sent = decision.body["messages"]
    assert [m["role"] for m in sent] == ["user", "system", "assistant", "user"]
    assert sent[-1]["content"] == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "out", "cache_control": {"type": "ephemeral"}}
    ]
    assert gate.route("HEAD", "/", None).kind == "side"
    assert gate.route("POST", "/v1/messages/count_tokens", body).kind == "side"
    other = ClaudeCodeGate(prefix, "nonce-2", keep_prompt=False, prefix_last_was_string=False)
    refused = other.route("POST", "/v1/messages", body)
    assert refused.kind == "refuse" and refused.mismatch.path == "messages[4].content[0].text"  # type: ignore[union-attr]
    warmup = {"messages": [{"role": "user", "content": "Warmup"}]}  # 2.0.x, before the main request: no tools
    assert (
        ClaudeCodeGate(prefix, "n", keep_prompt=False, prefix_last_was_string=False)
        .route("POST", "/v1/messages", warmup)
        .kind
        == "side"
    )


def test_cleanup_reparents_after_the_envelope() -> None:
    recs = [
        {
            "type": "user",
            "uuid": "leaf",
            "parentUuid": None,
            "message": {"content": [{"type": "tool_result"}]},
        },
        {"type": "queue-operation", "operation": "enqueue", "content": "n"},
        {"type": "queue-operation", "operation": "dequeue"},
        {
            "type": "user",
            "uuid": "m",
            "parentUuid": "leaf",
            "isMeta": True,
            "message": {"content": [{"type": "text", "text": "Continue from where you left off."}]},
        },
        {
            "type": "assistant",
            "uuid": "s",
            "parentUuid": "m",
            "message": {
                "model": "<synthetic>",
                "content": [{"type": "text", "text": "No response requested."}],
            },
        },
        {"type": "user", "uuid": "p", "parentUuid": "s", "message": {"content": "n"}},
        {
            "type": "assistant",
            "uuid": "a",
            "parentUuid": "p",
            "message": {"model": "m1", "content": [{"type": "text", "text": "hi"}]},
        },
    ]
    cleaned = cc_continuation.clean(recs, 1, "n", keep_prompt=False)
    assert [r.get("uuid") for r in cleaned] == ["leaf", "a"]
    assert cleaned[1]["parentUuid"] == "leaf"
    kept = cc_continuation.clean(recs, 1, "n", keep_prompt=True)
    assert [r.get("uuid") for r in kept if r.get("uuid")] == ["leaf", "p", "a"]
    assert kept[3]["parentUuid"] == "leaf" if kept[3].get("uuid") == "p" else True


def test_other_versions_envelopes_are_accepted_exactly_and_nothing_else() -> None:
    """2.0.x resumes with no meta text: the synthetic reply, then reminders and the prompt; some versions
    put context reminders before a prompt. Anything beyond those forms is refused."""
    prefix = [
        {"role": "user", "content": [{"type": "text", "text": "task"}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "out"}]},
    ]
    reminder = {"type": "text", "text": "<system-reminder>\nA file changed.\n</system-reminder>"}
    synthetic = {"role": "assistant", "content": [{"type": "text", "text": "No response requested."}]}

    def route(first: list[dict], last: list[dict]) -> tuple[str, list[str]]:
        gate = ClaudeCodeGate(prefix, "nonce-3", keep_prompt=False, prefix_last_was_string=False)
        messages = [
            {"role": "user", "content": first},
            *prefix[1:],
            synthetic,
            {"role": "user", "content": last},
        ]
        decision = gate.route("POST", "/v1/messages", {"tools": [{"name": "Bash"}], "messages": messages})
        if decision.kind == "main":
            assert decision.body is not None and len(decision.body["messages"]) == len(prefix)
        return decision.kind, gate.notes

    nonce = {"type": "text", "text": "nonce-3"}
    kind, notes = route([reminder, *prefix[0]["content"]], [reminder, nonce])
    assert kind == "main" and len(notes) == 2 and "reminders form" in notes[1]
    # 2.1.50 lists its bundled skills in a reminder before the prompt of the 2.1.x envelope
    continued = [*prefix[2]["content"], {"type": "text", "text": "Continue from where you left off."}]
    gate = ClaudeCodeGate(prefix, "nonce-3", keep_prompt=False, prefix_last_was_string=False)
    with_skills = [*prefix[:2], {"role": "user", "content": continued}, synthetic]
    body = {
        "tools": [{"name": "Bash"}],
        "messages": [*with_skills, {"role": "user", "content": [reminder, nonce]}],
    }
    decision = gate.route("POST", "/v1/messages", body)
    assert decision.kind == "main" and gate.notes == ["1 context reminder(s) the CLI put before the prompt"]
    assert decision.body is not None and decision.body["messages"] == prefix
    later = {**body, "messages": [*body["messages"], {"role": "assistant", "content": [nonce]}]}
    assert gate.route("POST", "/v1/messages", later).kind == "main"
    not_reminder = {"type": "text", "text": "not a reminder"}
    refused = ClaudeCodeGate(prefix, "nonce-3", keep_prompt=False, prefix_last_was_string=False)
    other = {**body, "messages": [*with_skills, {"role": "user", "content": [not_reminder, nonce]}]}
    assert refused.route("POST", "/v1/messages", other).kind == "refuse"
    assert route(prefix[0]["content"], [{"type": "text", "text": "not a reminder"}, nonce])[0] == "refuse"
    assert route([{"type": "text", "text": "extra"}, *prefix[0]["content"]], [nonce])[0] == "refuse"


@pytest.mark.agent
def test_the_mock_model_continues_records_and_replays_a_cassette_without_a_key(tmp_path: Path) -> None:
    """`--upstream mock` with no key: the agent ends on the mock's final answer; the recorded cassette then
    replays offline and the summary says `verified`."""
    from replayer.pipeline.mock import FINAL_TEXT
    from tests.conftest import replayer

    fixture = CLAUDE.fixture("single")
    tape = tmp_path / "tape"
    base = ["run", str(fixture / "session.jsonl"), "-n", "1", "-w", str(fixture / "workspace"), "--continue"]
    no_key = {"ANTHROPIC_API_KEY": "", "REPLAYER_UPSTREAM": ""}
    out = tmp_path / "mock"
    proc = replayer(*base, "-o", str(out), "--upstream", "mock", "--record-cassette", str(tape), env=no_key)
    assert proc.returncode == 0, proc.stderr
    assert "answers from the mock model" in proc.stdout and "cassette recorded" in proc.stdout
    result = orjson.loads((out / "result.json").read_bytes())
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"], cont["mock"]) == (
        "accepted",
        "completed",
        1,
        True,
    )
    assert result["request"]["continuation"]["upstream"] == "mock"
    assert FINAL_TEXT.encode() in (out / cont["files"]["continued_session"]).read_bytes()
    again = tmp_path / "again"
    proc = replayer(*base, "-o", str(again), "--cassette", str(tape), env=no_key)
    assert proc.returncode == 0, proc.stderr
    assert "cassette verified" in proc.stdout, proc.stdout
