"""Pi's three native forms (the session file, `--mode json` events, `--mode rpc` output) parse into the same
steps and into the context Pi itself builds; older session formats are migrated as Pi migrates them;
branches and compactions follow Pi's `buildSessionContext`. No Docker.

The ground truth is the pinned package itself: `_pi_context` runs its `SessionManager.open(...)
.buildSessionContext()` and pi-ai's `convertMessages` (the openai-completions request conversion) with the
pinned Node on a copy of the file. The inputs are recordings of real Pi CLIs (tests/recorder_pi.py,
tests/recorder_pi_sessions.py: Pi 0.30.2 wrote the v1 file, 0.32.3 the v2 one, the pinned 0.73.1 the
compaction) or variants of them written to a temporary directory, each test saying how it made them.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from replayer import adapters
from replayer.adapters.pi import session
from replayer.floor.errors import BadInput
from replayer.floor.pins import load_pins
from tests.conftest import ROOT, replayer

FIXTURES = ROOT / "tests" / "fixtures" / "pi"
SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "session.jsonl").exists())
"""tools, rpc, two_runs, unknown_tool: each with its session file and the CLI's event output."""
SESSIONS = FIXTURES / "sessions"
"""v1, v2 (older formats) and compaction: session files with a compaction, and their rpc output."""
_ORACLE = """
const [modules, file, dir] = process.argv.slice(2);
const pkg = `${modules}/@mariozechner/pi-coding-agent`;
const { SessionManager } = await import(`${pkg}/dist/core/session-manager.js`);
const { convertToLlm } = await import(`${pkg}/dist/core/messages.js`);
const { convertMessages } = await import(`${modules}/@mariozechner/pi-ai/dist/providers/openai-completions.js`);
const sm = SessionManager.open(file, dir);
const context = sm.buildSessionContext();
const model = { id: context.model?.modelId ?? "none", provider: context.model?.provider ?? "none",
  api: "openai-completions", input: ["text"], reasoning: false, baseUrl: "http://127.0.0.1:1/v1" };
const wire = convertMessages(model, { messages: convertToLlm(context.messages) }, {});
process.stdout.write(JSON.stringify({ header: sm.getHeader(), branch: sm.getBranch(), context, wire }));
"""
ID_FIELDS = ("id", "parentId", "firstKeptEntryId", "fromId", "targetId")


def _log(scenario: str) -> Path:
    """The CLI's stdout of the scenario: `--mode json` events or `--mode rpc` output."""
    directory = FIXTURES / scenario
    return directory / ("rpc.jsonl" if (directory / "rpc.jsonl").exists() else "events.jsonl")


def _records(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    """JSON.stringify's escapes (a lone surrogate stays `\\udXXX`)."""
    path.write_text("".join(json.dumps(r, ensure_ascii=True, separators=(",", ":")) + "\n" for r in records))
    return path


def _pi_context(path: Path, tmp_path: Path) -> dict[str, Any]:
    """The pinned Pi's own view of a session file (on a copy: Pi rewrites a file it migrates)."""
    work = tmp_path / "oracle"
    work.mkdir(exist_ok=True)
    copy_path = work / "session.jsonl"
    shutil.copyfile(path, copy_path)
    script = work / "oracle.mjs"
    script.write_text(_ORACLE)
    pins = load_pins()
    modules = pins.bundle_dir("pi") / "node_modules"
    proc = subprocess.run(
        [str(pins.agents["pi"].node), str(script), str(modules), str(copy_path), str(work / "sessions")],
        capture_output=True,
        check=True,
    )
    return json.loads(proc.stdout)


def _by_position(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Entries with every id replaced by the position of its entry (migrated v1 ids are random in Pi)."""
    where = {e["id"]: f"#{i}" for i, e in enumerate(entries)}
    out = copy.deepcopy(entries)
    for entry in out:
        for key in ID_FIELDS:
            if isinstance(entry.get(key), str):
                entry[key] = where.get(entry[key], entry[key])
    return out


def _assert_pi_agrees(path: Path, tmp_path: Path) -> dict[str, Any]:
    native = session.parse(path).native_as(session.Native)
    pi = _pi_context(path, tmp_path)
    assert native.messages == pi["context"]["messages"]
    assert _by_position(native.entries) == _by_position(pi["branch"])
    assert native.header == pi["header"]
    model = pi["context"]["model"]
    assert native.model == ((model["provider"], model["modelId"]) if model else None)
    assert native.thinking_level == pi["context"]["thinkingLevel"]
    tools = {m["tool_call_id"]: m["content"] for m in pi["wire"] if m["role"] == "tool"}
    traj = session.parse(path)
    for step, at in zip(traj.steps, native.step_messages, strict=True):
        for call in step.calls:
            if at >= 0 and call.historical is not None:  # in the context: sent as Pi sends it
                assert call.historical.content == tools[call.id], call.id
    return pi


def _steps(traj) -> list[list[tuple[str, str, dict, Any, bool | None]]]:  # type: ignore[no-untyped-def]
    return [
        [(c.id, c.tool, c.input, c.historical.content, c.historical.is_error) for c in s.calls]
        for s in traj.steps
    ]


def _expected_steps(path: Path) -> list[list[tuple[str, str, dict, Any, bool | None]]]:
    """Straight from a linear session file: assistant messages with toolCall blocks, each call with the
    text of the toolResult message that names it."""
    messages = [r["message"] for r in _records(path) if r["type"] == "message"]
    results = {m["toolCallId"]: m for m in messages if m["role"] == "toolResult"}
    steps = []
    for message in messages:
        calls = (
            [b for b in message["content"] if b["type"] == "toolCall"]
            if message["role"] == "assistant"
            else []
        )
        if calls:
            steps.append(
                [
                    (
                        b["id"],
                        b["name"],
                        b["arguments"],
                        "\n".join(t["text"] for t in results[b["id"]]["content"]),
                        results[b["id"]]["isError"],
                    )
                    for b in calls
                ]
            )
    return steps


def _tool_requests(directory: Path) -> list[dict[str, Any]]:
    """The requests Pi sent to the model in its turns (a compaction's summary request offers no tools)."""
    rows = _records(directory / "upstream.jsonl")
    return [r["body"] for r in rows if r["path"].endswith("/chat/completions") and r["body"].get("tools")]


def _one_line_error(proc, code: int, needle: str) -> None:  # type: ignore[no-untyped-def]
    assert proc.returncode == code, proc.stderr
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


# every form of one session -------------------------------------------------------------------
@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_form_gives_the_same_steps(scenario: str) -> None:
    file_path, log_path = FIXTURES / scenario / "session.jsonl", _log(scenario)
    from_file, from_log = session.parse(file_path), session.parse(log_path)
    expected = _expected_steps(file_path)
    assert expected and _steps(from_file) == expected
    assert from_log.steps == from_file.steps
    assert all(s.complete and not s.before_compaction for s in from_file.steps)
    assert [s.index for s in from_file.steps] == list(range(1, len(expected) + 1))
    assert from_log.native_as(session.Native).messages == from_file.native_as(session.Native).messages
    header = _records(file_path)[0]
    for traj, path in ((from_file, file_path), (from_log, log_path)):
        assert traj.agent == "pi" and traj.agent_version is None
        assert (
            traj.source == str(path) and traj.source_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        )
    assert from_file.session_id == header["id"] and from_file.cwd == "/testbed"
    assert (
        from_file.native_as(session.Native).form == "session"
        and from_file.native_as(session.Native).header == header
    )
    if scenario == "rpc":  # no header line, no get_state answer: nothing names the session
        assert (
            from_log.native_as(session.Native).form == "rpc"
            and from_log.session_id is None
            and from_log.cwd is None
        )
        first = from_log.native_as(session.Native).messages[0]["timestamp"]
        assert from_log.native_as(session.Native).header == {
            "type": "session",
            "version": 3,
            "id": None,
            "timestamp": session._iso(first),
            "cwd": None,
        }
    else:
        assert (
            from_log.native_as(session.Native).form == "events"
            and from_log.native_as(session.Native).header == header
        )
        assert from_log.session_id == header["id"] and from_log.cwd == "/testbed"


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_session_file_is_the_context_pi_builds(scenario: str, tmp_path: Path) -> None:
    _assert_pi_agrees(FIXTURES / scenario / "session.jsonl", tmp_path)


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_each_request_pi_sent_is_the_context_up_to_its_step(scenario: str, tmp_path: Path) -> None:
    """Request k of the recording carries exactly the context up to the k-th assistant message (Pi's own
    request conversion of our messages), and every tool message content is the call's observation."""
    for path in (FIXTURES / scenario / "session.jsonl", _log(scenario)):
        traj = session.parse(path)
        native = traj.native_as(session.Native)
        wire = _pi_context(FIXTURES / scenario / "session.jsonl", tmp_path)["wire"]
        assistants = [i for i, m in enumerate(native.messages) if m["role"] == "assistant"]
        requests = _tool_requests(FIXTURES / scenario)
        assert len(requests) == len(assistants)
        for request, at in zip(requests, assistants, strict=True):
            sent = request["messages"][1:]  # after the system prompt
            assert len(sent) == at and sent == wire[:at]  # one request message per context message here
        sent = {m["tool_call_id"]: m["content"] for m in requests[-1]["messages"] if m["role"] == "tool"}
        observed = {c.id: c.historical.content for s in traj.steps for c in s.calls}
        assert observed == sent
        for step, at in zip(traj.steps, native.step_messages, strict=True):
            assert native.messages[at]["content"][-1]["id"] == step.calls[-1].id


def test_two_appended_runs_are_one_conversation() -> None:
    """The 2nd json run was `--continue`: its header line repeats the first."""
    log = _records(FIXTURES / "two_runs" / "events.jsonl")
    assert [r for r in log if r["type"] == "session"] == [log[0], log[0]]
    traj = session.parse(FIXTURES / "two_runs" / "events.jsonl")
    native = traj.native_as(session.Native)
    users = [m for m in native.messages if m["role"] == "user"]
    assert [u["content"][0]["text"] for u in users] == orjson.loads(
        (FIXTURES / "two_runs" / "meta.json").read_bytes()
    )["prompts"]
    second = native.messages.index(users[1])
    assert native.step_messages[0] < second < native.step_messages[1]
    assert native.messages[second - 1]["stopReason"] == "stop"
    from_file = session.parse(FIXTURES / "two_runs" / "session.jsonl")
    assert traj.steps == from_file.steps


def test_the_event_log_entries_are_a_session_pi_reads(tmp_path: Path) -> None:
    """The synthesized entries (linear, fresh ids, one model_change first) give Pi our messages."""
    for scenario in SCENARIOS:
        native = session.parse(_log(scenario)).native_as(session.Native)
        entries = native.entries
        assert entries[0]["type"] == "model_change" and (entries[0]["provider"], entries[0]["modelId"]) == (
            "fake",
            "fake-model",
        )
        assert [e["parentId"] for e in entries] == [None, *[e["id"] for e in entries[:-1]]]
        assert len({e["id"] for e in entries}) == len(entries)
        assert all(len(e["id"]) == 8 and int(e["id"], 16) >= 0 for e in entries)
        assert [e["message"] for e in entries if e["type"] == "message"] == native.messages
        header = {**native.header, "id": native.header["id"] or "00000000-rpc-log", "cwd": "/testbed"}
        written = _write(tmp_path / f"{scenario}.jsonl", [header, *entries])
        pi = _assert_pi_agrees(written, tmp_path)
        assert pi["context"]["messages"] == native.messages
        steps = [dataclasses.replace(s, message_id="") for s in session.parse(_log(scenario)).steps]
        assert steps == [dataclasses.replace(s, message_id="") for s in session.parse(written).steps]
    again = session.parse(_log("tools")).native_as(session.Native).entries
    assert again == session.parse(_log("tools")).native_as(session.Native).entries  # reproducible ids


def test_the_steps_keep_call_order_not_completion_order() -> None:
    log = _records(FIXTURES / "tools" / "events.jsonl")
    ended = [e["toolCallId"] for e in log if e["type"] == "tool_execution_end"]
    parsed = [c.id for s in session.parse(FIXTURES / "tools" / "events.jsonl").steps for c in s.calls]
    assert sorted(parsed) == sorted(ended) and parsed != ended  # bash ended before read
    assert parsed == sorted(parsed)


def test_an_unknown_tool_keeps_its_name_and_error() -> None:
    traj = session.parse(FIXTURES / "unknown_tool" / "events.jsonl")
    call = next(c for s in traj.steps for c in s.calls if c.tool == "no_such_tool")
    assert call.input == {"x": 1} and call.historical is not None
    assert call.historical.content == "Tool no_such_tool not found" and call.historical.is_error is True
    assert call.historical.structured["role"] == "toolResult"
    assert call.historical.structured["toolCallId"] == call.id


# event logs ----------------------------------------------------------------------------------
def test_message_update_partials_are_never_read(tmp_path: Path) -> None:
    records = _records(FIXTURES / "tools" / "events.jsonl")
    for record in records:
        if record["type"] in ("message_update", "message_start", "turn_end", "agent_end"):
            for key in ("message", "assistantMessageEvent", "messages", "toolResults"):
                if key in record:
                    record[key] = {"role": "assistant", "content": [{"type": "text", "text": "PARTIAL"}]}
    traj = session.parse(_write(tmp_path / "events.jsonl", records))
    assert _steps(traj) == _steps(session.parse(FIXTURES / "tools" / "events.jsonl"))
    assert "PARTIAL" not in orjson.dumps(traj.native_as(session.Native).messages).decode()


def test_a_log_cut_inside_a_batch_ends_with_an_incomplete_step(tmp_path: Path) -> None:
    records = _records(FIXTURES / "tools" / "events.jsonl")
    cut = max(
        i
        for i, r in enumerate(records)
        if r["type"] == "message_end" and r["message"].get("toolCallId") == "call_tools_07"
    )
    traj = session.parse(_write(tmp_path / "events.jsonl", records[:cut]))
    assert [s.complete for s in traj.steps] == [True, True, True, False]
    last = traj.steps[-1].calls
    assert last[0].historical is not None and last[1].historical is None


def test_an_errored_assistant_message_is_no_step(tmp_path: Path) -> None:
    """Pi drops stopReason error/aborted messages from every request and runs none of their tools."""
    records = _records(FIXTURES / "tools" / "events.jsonl")
    at = next(
        i for i, r in enumerate(records) if r["type"] == "message_end" and r["message"]["role"] == "assistant"
    )
    failed = copy.deepcopy(records[at])
    failed["message"].update(stopReason="error", errorMessage="boom")
    for block in failed["message"]["content"]:
        if block["type"] == "toolCall":
            block["id"] += "_failed"
    variant = [*records[:at], failed, *records[at:]]
    traj = session.parse(_write(tmp_path / "events.jsonl", variant))
    assert _steps(traj) == _steps(session.parse(FIXTURES / "tools" / "events.jsonl"))
    assert failed["message"] in traj.native_as(session.Native).messages  # kept in the context, as Pi keeps it


def test_rpc_state_answers_name_the_session_and_the_settings(tmp_path: Path) -> None:
    """Appended answers as Pi's rpc mode gives them: get_state (sessionId, thinkingLevel), set_model, and the
    thinking_level_changed event of a set_thinking_level."""
    records = _records(FIXTURES / "rpc" / "rpc.jsonl")
    model = {"id": "other-model", "name": "other-model", "api": "openai-completions", "provider": "fake"}
    state = {"model": model, "thinkingLevel": "off", "sessionId": "01a2379f-1ab3-7610-8fd5-b0468cca6348"}
    variant = [
        *records,
        {"id": "req-2", "type": "response", "command": "get_state", "success": True, "data": state},
        {"id": "req-3", "type": "response", "command": "set_model", "success": True, "data": model},
        {"type": "thinking_level_changed", "level": "high"},
        {"id": "req-4", "type": "response", "command": "set_thinking_level", "success": True},
    ]
    traj = session.parse(_write(tmp_path / "rpc.jsonl", variant))
    native = traj.native_as(session.Native)
    assert traj.session_id == state["sessionId"] and native.header["id"] == state["sessionId"]
    kinds = [
        (e["type"], e.get("modelId") or e.get("thinkingLevel"))
        for e in native.entries
        if e["type"] != "message"
    ]
    assert kinds == [
        ("model_change", "fake-model"),
        ("thinking_level_change", "off"),
        ("model_change", "other-model"),
        ("thinking_level_change", "high"),
    ]
    assert native.entries[1]["type"] == "thinking_level_change"  # Pi's order at a session's start
    assert native.model == ("fake", "other-model") and native.thinking_level == "high"
    assert _steps(traj) == _steps(session.parse(FIXTURES / "rpc" / "rpc.jsonl"))


def test_a_header_of_another_session_is_refused(tmp_path: Path) -> None:
    other = _records(FIXTURES / "two_runs" / "events.jsonl")[0]
    path = _write(tmp_path / "events.jsonl", [*_records(FIXTURES / "tools" / "events.jsonl"), other])
    with pytest.raises(BadInput, match=f"starts session {other['id']}, not 01a2379f-10ff"):
        session.parse(path)


@pytest.mark.parametrize("name", ["compaction", "v1", "v2"])
def test_an_event_log_of_a_compacted_session_is_refused(name: str) -> None:
    """Pi's event output does not show the compacted context (and an rpc `compact` rewrote it)."""
    with pytest.raises(BadInput, match="pass the session file instead") as caught:
        session.parse(SESSIONS / name / "rpc.jsonl")
    assert caught.value.exit_code == 3 and "\n" not in str(caught.value)


def test_an_rpc_shell_command_is_refused(tmp_path: Path) -> None:
    """A user's rpc `bash` becomes a bashExecution message in the context, printed as no event."""
    answer = {"output": "x\n", "exitCode": 0, "cancelled": False, "truncated": False}
    bash = {"id": "req-9", "type": "response", "command": "bash", "success": True, "data": answer}
    path = _write(tmp_path / "rpc.jsonl", [*_records(FIXTURES / "rpc" / "rpc.jsonl"), bash])
    with pytest.raises(BadInput, match="rpc command bash changed the context"):
        session.parse(path)


# branches, compactions, entry types -----------------------------------------------------------
def _entry(kind: str, entry_id: str, parent: str | None, **fields: Any) -> dict[str, Any]:
    return {
        "type": kind,
        "id": entry_id,
        "parentId": parent,
        "timestamp": "2026-12-02T16:40:00.000Z",
        **fields,
    }


def _assistant(call_id: str, command: str, stamp: int) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "toolCall", "id": call_id, "name": "bash", "arguments": {"command": command}}],
        "api": "openai-completions",
        "provider": "fake",
        "model": "fake-model",
        "usage": {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2},
        "stopReason": "toolUse",
        "timestamp": stamp,
    }


def _result(call_id: str, text: str, stamp: int) -> dict[str, Any]:
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": "bash",
        "content": [{"type": "text", "text": text}],
        "isError": False,
        "timestamp": stamp,
    }


def _branched(summary: bool) -> list[dict[str, Any]]:
    """tools/session.jsonl plus a new branch from the entry after step 2's result (entry 7 of the file's
    entries), as `branch()`/`branchWithSummary()` then appends write it; steps 3..5 are abandoned."""
    records = _records(FIXTURES / "tools" / "session.jsonl")
    fork = records[8]
    assert fork["message"]["toolCallId"] == "call_tools_03"
    added = []
    parent = fork["id"]
    if summary:
        added.append(_entry("branch_summary", "b0000001", parent, fromId=parent, summary="Tried notes.txt."))
        parent = "b0000001"
    added += [
        _entry("message", "b0000002", parent, message=_assistant("call_branch_01", "echo hi", 1796229600000)),
        _entry("message", "b0000003", "b0000002", message=_result("call_branch_01", "hi\n", 1796229600001)),
    ]
    return [*records, *added]


@pytest.mark.parametrize("summary", [False, True])
def test_the_active_branch_ends_at_the_last_entry(summary: bool, tmp_path: Path) -> None:
    path = _write(tmp_path / "branched.jsonl", _branched(summary))
    _assert_pi_agrees(path, tmp_path)
    traj = session.parse(path)
    ids = [[c.id for c in s.calls] for s in traj.steps]
    assert ids == [["call_tools_01", "call_tools_02"], ["call_tools_03"], ["call_branch_01"]]
    assert traj.steps[-1].calls[0].historical.content == "hi\n"
    native = traj.native_as(session.Native)
    roles = [m["role"] for m in native.messages]
    assert ("branchSummary" in roles) is summary
    assert native.entries[-1]["id"] == "b0000003" and len(native.entries) == 8 + summary + 2
    if summary:
        message = native.messages[roles.index("branchSummary")]
        assert message == {
            "role": "branchSummary",
            "summary": "Tried notes.txt.",
            "fromId": native.entries[7]["id"],
            "timestamp": session._ms("2026-12-02T16:40:00.000Z"),
        }


def test_the_leaf_is_the_last_line_even_on_an_older_branch(tmp_path: Path) -> None:
    """A last entry appended under the abandoned branch's leaf makes that branch the active one again."""
    records = _branched(summary=False)
    old_leaf = records[17]["id"]
    records.append(_entry("session_info", "b0000009", old_leaf, name="back"))
    path = _write(tmp_path / "back.jsonl", records)
    _assert_pi_agrees(path, tmp_path)
    traj = session.parse(path)
    assert _steps(traj) == _expected_steps(FIXTURES / "tools" / "session.jsonl")
    assert traj.native_as(session.Native).entries[-1]["type"] == "session_info"


def _compacted(tmp_path: Path, *points: tuple[int, int]) -> Path:
    """tools/session.jsonl with compaction entries inserted per docs/session-format.md's CompactionEntry
    (as `appendCompaction` writes them): after the record `after` (0-based, the header is 0), keeping from
    the record `first_kept`; the next entry is re-parented onto the compaction."""
    records = _records(FIXTURES / "tools" / "session.jsonl")
    for n, (after, first_kept) in enumerate(sorted(points, reverse=True)):
        entry = _entry(
            "compaction",
            f"c000000{n}",
            records[after]["id"],
            summary=f"Summary {after}.",
            firstKeptEntryId=records[first_kept]["id"],
            tokensBefore=1000 + after,
            details={"readFiles": ["/testbed/calc.py"], "modifiedFiles": []},
        )
        records[after + 1]["parentId"] = entry["id"]
        records.insert(after + 1, entry)
    return _write(tmp_path / "compacted.jsonl", records)


def test_a_compaction_keeps_its_summary_and_the_kept_messages(tmp_path: Path) -> None:
    """A compaction after step 3 (after file line 12, step 3's last result) that keeps from step 3's
    assistant message (line 10) on: steps 1..3 are before it, step 3 still in the context."""
    path = _compacted(tmp_path, (11, 9))
    _assert_pi_agrees(path, tmp_path)
    traj = session.parse(path)
    native = traj.native_as(session.Native)
    assert _steps(traj) == _expected_steps(FIXTURES / "tools" / "session.jsonl")  # every step still listed
    assert [s.before_compaction for s in traj.steps] == [True, True, True, False, False]
    assert native.step_messages[:3] == [-1, -1, 1]
    assert native.messages[0] == {
        "role": "compactionSummary",
        "summary": "Summary 11.",
        "tokensBefore": 1011,
        "timestamp": session._ms("2026-12-02T16:40:00.000Z"),
    }
    assert native.messages[1]["content"][0]["id"] == "call_tools_04"
    assert [native.messages[at]["content"][0]["id"] for at in native.step_messages[2:]] == [
        "call_tools_04",
        "call_tools_06",
        "call_tools_08",
    ]
    assert [e["type"] for e in native.entries].count("compaction") == 1
    assert len(native.entries) == 18  # the whole branch, summarized entries included


def test_only_the_latest_compaction_counts(tmp_path: Path) -> None:
    path = _compacted(tmp_path, (8, 7), (14, 12))
    _assert_pi_agrees(path, tmp_path)
    traj = session.parse(path)
    assert [s.before_compaction for s in traj.steps] == [True, True, True, True, False]
    native = traj.native_as(session.Native)
    assert native.messages[0]["summary"] == "Summary 14." and native.step_messages[:4] == [-1, -1, -1, 1]
    assert not any(m.get("summary") == "Summary 8." for m in native.messages)


def test_a_recorded_compaction() -> None:
    """Pi 0.73.1's own rpc `compact` (recorded): it kept the last assistant message before it."""
    traj = session.parse(SESSIONS / "compaction" / "session.jsonl")
    native = traj.native_as(session.Native)
    assert [s.before_compaction for s in traj.steps] == [True, False, False]
    assert native.step_messages == [-1, 3, 5]
    assert [m["role"] for m in native.messages[:3]] == ["compactionSummary", "assistant", "user"]
    assert traj.steps[0].calls[0].historical.content == "def add(a, b):\n    return a - b\n"


def test_a_recorded_compaction_is_the_context_pi_sent_after_it(tmp_path: Path) -> None:
    directory = SESSIONS / "compaction"
    pi = _assert_pi_agrees(directory / "session.jsonl", tmp_path)
    after = _tool_requests(directory)[2:]  # the two requests before the compaction saw the old context
    assert len(after) == 3
    for request in after:
        sent = request["messages"][1:]
        assert sent == pi["wire"][: len(sent)]
    assert pi["wire"][0]["content"][0]["text"].startswith(
        "The conversation history before this point was compacted"
    )


def test_the_context_of_a_branch_prefix(tmp_path: Path) -> None:
    """`context_messages(entries[:k])` is what Pi builds with the leaf at entry k: before the recorded
    compaction the whole history, through the end the compacted context."""
    path = SESSIONS / "compaction" / "session.jsonl"
    native = session.parse(path).native_as(session.Native)
    assert session.context_messages(native.entries) == native.messages
    at = next(i for i, e in enumerate(native.entries) if e["type"] == "compaction")
    before = session.context_messages(native.entries[:at])
    assert before == [e["message"] for e in native.entries[:at] if e["type"] == "message"]
    cut = _write(tmp_path / "cut.jsonl", [native.header, *native.entries[:at]])
    assert _pi_context(cut, tmp_path)["context"]["messages"] == before


def test_an_older_pis_event_output_parses(tmp_path: Path) -> None:
    """Pi 0.30.2's rpc output (recorded) up to its `compact` answer: no header line, the same events."""
    records = _records(SESSIONS / "v1" / "rpc.jsonl")
    cut = next(i for i, r in enumerate(records) if r.get("command") == "compact")
    traj = session.parse(_write(tmp_path / "rpc.jsonl", records[:cut]))
    reference = session.parse(SESSIONS / "v1" / "session.jsonl")
    assert traj.native_as(session.Native).form == "rpc" and traj.session_id is None
    # Pi 0.30.2 kept no responseId; the file has the compaction
    same = {"message_id": "", "before_compaction": False}
    assert [dataclasses.replace(s, **same) for s in traj.steps] == [
        dataclasses.replace(s, **same) for s in reference.steps[:1]
    ]
    assert traj.native_as(session.Native).header["timestamp"] == session._iso(
        traj.native_as(session.Native).messages[0]["timestamp"]
    )


def test_other_entry_types_are_kept_and_only_custom_messages_count(tmp_path: Path) -> None:
    """After the user message: a custom_message (in the context), custom, label, session_info and a type
    Pi 0.73.1 does not know (kept in the branch, no message), chained as appends chain them."""
    records = _records(FIXTURES / "tools" / "session.jsonl")
    user = records[3]
    assert user["message"]["role"] == "user"
    added = [
        _entry("custom_message", "d0000001", user["id"], customType="ext", content="Injected.", display=True),
        _entry("custom", "d0000002", "d0000001", customType="ext", data={"n": 1}),
        _entry("label", "d0000003", "d0000002", targetId=user["id"], label="start"),
        _entry("session_info", "d0000004", "d0000003", name="named"),
        _entry("future_kind", "d0000005", "d0000004", anything=[1, 2]),
    ]
    records[4]["parentId"] = "d0000005"
    path = _write(tmp_path / "typed.jsonl", [*records[:4], *added, *records[4:]])
    pi = _assert_pi_agrees(path, tmp_path)
    native = session.parse(path).native_as(session.Native)
    assert [e["type"] for e in native.entries[2:8]] == [
        "message",
        "custom_message",
        "custom",
        "label",
        "session_info",
        "future_kind",
    ]
    assert native.messages[1] == {
        "role": "custom",
        "customType": "ext",
        "content": "Injected.",
        "display": True,
        "timestamp": session._ms("2026-12-02T16:40:00.000Z"),
    }
    assert pi["wire"][1] == {"role": "user", "content": [{"type": "text", "text": "Injected."}]}
    assert _steps(session.parse(path)) == _expected_steps(FIXTURES / "tools" / "session.jsonl")


def test_tool_contents_are_sent_as_pi_sends_them(tmp_path: Path) -> None:
    """Results rewritten in a copy of tools/session.jsonl: two text blocks (joined by a newline), no block
    (Pi's placeholder), a lone surrogate (removed); an image keeps the block list."""
    records = _records(FIXTURES / "tools" / "session.jsonl")
    results = {
        r["message"]["toolCallId"]: r["message"]
        for r in records
        if r["type"] == "message" and r["message"]["role"] == "toolResult"
    }
    results["call_tools_01"]["content"] = [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]
    results["call_tools_02"]["content"] = []
    results["call_tools_03"]["content"] = [{"type": "text", "text": "cut \ud83d"}]
    image = {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"}
    results["call_tools_04"]["content"] = [{"type": "text", "text": "a picture"}, image]
    path = _write(tmp_path / "contents.jsonl", records)
    pi = _pi_context(path, tmp_path)
    sent = {m["tool_call_id"]: m["content"] for m in pi["wire"] if m["role"] == "tool"}
    calls = {c.id: c for s in session.parse(path).steps for c in s.calls}
    for call_id, text in (
        ("call_tools_01", "one\ntwo"),
        ("call_tools_02", "(see attached image)"),
        ("call_tools_03", "cut "),
    ):
        assert calls[call_id].historical.content == text == sent[call_id]
    assert calls["call_tools_04"].historical.content == [{"type": "text", "text": "a picture"}, image]
    assert calls["call_tools_04"].historical.structured["content"][1] == image


# older formats ---------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "version"), [("v1", 1), ("v2", 2), ("compaction", 3)])
def test_recorded_older_formats_are_migrated_as_pi_migrates_them(
    name: str, version: int, tmp_path: Path
) -> None:
    """v1 (Pi 0.30.2: no version, no ids, compaction by firstKeptEntryIndex) and v2 (Pi 0.32.3), recorded;
    the same scenario written by the pinned Pi (v3) as the reference."""
    path = SESSIONS / name / "session.jsonl"
    assert _records(path)[0].get("version") == (None if version == 1 else version)
    _assert_pi_agrees(path, tmp_path)
    traj = session.parse(path)
    native = traj.native_as(session.Native)
    assert native.format_version == version and native.header["version"] == 3
    assert traj.session_id == _records(path)[0]["id"] and traj.cwd == "/testbed"
    assert [[c.tool for c in s.calls] for s in traj.steps] == [["read", "bash"], ["edit"], ["bash"]]
    assert [s.before_compaction for s in traj.steps] == [True, False, False]
    assert native.step_messages == [-1, 3, 5]
    compaction = next(e for e in native.entries if e["type"] == "compaction")
    assert "firstKeptEntryIndex" not in compaction
    kept = next(e for e in native.entries if e["id"] == compaction["firstKeptEntryId"])
    assert kept["message"]["content"] == [{"type": "text", "text": "It subtracts."}]
    if version == 1:
        assert (
            session.parse(path).native_as(session.Native).entries == native.entries
        )  # reproducible migrated ids
        assert [e["parentId"] for e in native.entries] == [None, *[e["id"] for e in native.entries[:-1]]]


def _to_v2(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The inverse of `migrateV2ToV3`: version 2, a message role custom back to hookMessage."""
    out = copy.deepcopy(records)
    out[0]["version"] = 2
    for entry in out[1:]:
        if entry["type"] == "message" and entry["message"]["role"] == "custom":
            entry["message"]["role"] = "hookMessage"
    return out


def _to_v1(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The inverse of `migrateV1ToV2` on a linear file: no version, no id/parentId, a compaction's kept
    entry by its index among the file's lines (the header is line index 0)."""
    out = _to_v2(records)
    assert [e["parentId"] for e in out[1:]] == [None, *[e["id"] for e in out[1:-1]]], "v1 is linear"
    index = {e["id"]: i for i, e in enumerate(out) if i}
    del out[0]["version"]
    for entry in out[1:]:
        if entry["type"] == "compaction":
            entry["firstKeptEntryIndex"] = index[entry.pop("firstKeptEntryId")]
        del entry["id"], entry["parentId"]
    return out


def _with_hook_message(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A message entry with role custom after the last user message (what v2's hookMessage becomes)."""
    out = copy.deepcopy(records)
    user = max(i for i, e in enumerate(out) if e.get("type") == "message" and e["message"]["role"] == "user")
    custom = {
        "role": "custom",
        "customType": "hook",
        "content": "From a hook.",
        "display": True,
        "timestamp": 1,
    }
    entry = _entry("message", "e0000001", out[user]["id"], message=custom)
    out[user + 1]["parentId"] = "e0000001"
    out.insert(user + 1, entry)
    return out


@pytest.mark.parametrize("source", ["tools", "compaction"])
@pytest.mark.parametrize("to_older", [_to_v1, _to_v2])
def test_older_formats_made_by_inverting_the_migrations(source: str, to_older, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Made from recorded v3 files (tools, and the recorded compaction) by applying the inverse of Pi's
    documented migrations; they parse to the v3 file's steps and messages."""
    v3_path = (
        FIXTURES / "tools" / "session.jsonl"
        if source == "tools"
        else SESSIONS / "compaction" / "session.jsonl"
    )
    v3 = _with_hook_message(_records(v3_path))
    reference = session.parse(_write(tmp_path / "v3.jsonl", v3))
    older = _write(tmp_path / "older.jsonl", to_older(v3))
    _assert_pi_agrees(older, tmp_path)
    traj = session.parse(older)
    native = traj.native_as(session.Native)
    assert native.format_version == (1 if to_older is _to_v1 else 2)
    assert [dataclasses.replace(s, message_id="") for s in traj.steps] == [
        dataclasses.replace(s, message_id="") for s in reference.steps
    ]
    assert native.messages == reference.native_as(session.Native).messages
    assert any(m["role"] == "custom" for m in native.messages)
    assert _by_position(native.entries) == _by_position(reference.native_as(session.Native).entries)


def test_a_newer_format_is_refused(tmp_path: Path) -> None:
    records = _records(FIXTURES / "tools" / "session.jsonl")
    records[0]["version"] = 4
    with pytest.raises(BadInput, match="session format version 4 is newer"):
        session.parse(_write(tmp_path / "v4.jsonl", records))


# damaged input -------------------------------------------------------------------------------
def _cut_line_5(tmp_path: Path) -> Path:
    """The tools session file with its line 5 (a message entry) torn after 40 bytes."""
    lines = (FIXTURES / "tools" / "session.jsonl").read_bytes().splitlines()
    lines[4] = lines[4][:40]
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_a_session_line_that_is_not_json_is_skipped_as_pi_skips_it(tmp_path: Path) -> None:
    """Pi's loadEntriesFromFile drops a line JSON.parse throws on; its children lose their parent, so the
    branch starts after it. The parse follows Pi and says which line it skipped."""
    path = _cut_line_5(tmp_path)
    _assert_pi_agrees(path, tmp_path)
    traj = session.parse(path)
    assert traj.parse_notes == [
        "line 5 skipped, as Pi's session loader skips a line that is not JSON: "
        "Unterminated string starting at: column 35"
    ]
    full = session.parse(FIXTURES / "tools" / "session.jsonl")
    assert len(traj.steps) < len(full.steps) and full.parse_notes == []


def test_two_records_on_one_line_are_skipped_as_pi_skips_them(tmp_path: Path) -> None:
    """A real v3 session (tests/fixtures/field/SOURCES.md) with the newline between its lines 5 and 6
    removed, as when a resumed run appends to a file whose last line has no newline. JSON.parse throws on
    the joined line, so Pi loses both records, and the entry after them, whose parent was one of them,
    starts the branch."""
    path = (
        ROOT / "tests" / "fixtures" / "field" / "pi" / "sandcastle-v3-resumed-0.73.1-lines-5-6-joined.jsonl"
    )
    _assert_pi_agrees(path, tmp_path)
    traj = session.parse(path)
    assert traj.parse_notes == [
        "line 5 skipped, as Pi's session loader skips a line that is not JSON: "
        "two records with no newline between them (a second JSON value starts at column 701)"
    ]
    assert [e["id"] for e in traj.native_as(session.Native).entries] == ["df79f975"]


def test_a_torn_header_line_is_refused(tmp_path: Path) -> None:
    """Pi takes a file whose first record is not a header for a corrupt one and starts it anew."""
    lines = (FIXTURES / "tools" / "session.jsonl").read_bytes().splitlines()
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"\n".join([lines[0][:30], *lines[1:]]) + b"\n")
    with pytest.raises(BadInput, match="line 1 is not JSON: .*the session header's line"):
        session.parse(path)


@pytest.mark.parametrize("name", ["tools/events.jsonl", "rpc/rpc.jsonl"])
def test_a_damaged_event_line_is_named(name: str, tmp_path: Path) -> None:
    lines = (FIXTURES / name).read_bytes().splitlines()
    lines[4] = lines[4][:40]
    path = tmp_path / Path(name).name
    path.write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(BadInput, match="line 5 is not JSON") as caught:
        session.parse(path)
    assert caught.value.exit_code == 3 and "\n" not in str(caught.value)
    assert adapters.adapter_class("pi").detect(adapters.read_head(path))


def test_broken_session_trees_are_refused(tmp_path: Path) -> None:
    records = _records(FIXTURES / "tools" / "session.jsonl")
    no_id = copy.deepcopy(records)
    del no_id[6]["id"]
    with pytest.raises(BadInput, match="line 7 is a Pi session entry without an id"):
        session.parse(_write(tmp_path / "no_id.jsonl", no_id))
    loop = copy.deepcopy(records)
    loop[3]["parentId"] = loop[-1]["id"]
    with pytest.raises(BadInput, match="loops back"):
        session.parse(_write(tmp_path / "loop.jsonl", loop))
    no_header = records[1:]
    with pytest.raises(BadInput, match="line 1 is not a Pi session header"):
        session.parse(_write(tmp_path / "no_header.jsonl", no_header))
    not_object = tmp_path / "list.jsonl"
    not_object.write_bytes(orjson.dumps(records[0]) + b"\n[1, 2]\n")
    with pytest.raises(BadInput, match="line 2 is not a Pi record"):
        session.parse(not_object)


def test_a_missing_parent_ends_the_branch_as_in_pi(tmp_path: Path) -> None:
    """Pi's walk stops at a parentId it cannot find: the context starts there."""
    records = _records(FIXTURES / "tools" / "session.jsonl")
    records[9]["parentId"] = "ffffffff"
    path = _write(tmp_path / "orphan.jsonl", records)
    _assert_pi_agrees(path, tmp_path)
    native = session.parse(path).native_as(session.Native)
    assert native.entries[0]["id"] == records[9]["id"]
    assert [c.id for s in session.parse(path).steps for c in s.calls][0] == "call_tools_04"


# detection -----------------------------------------------------------------------------------
def _pi_files() -> list[Path]:
    return sorted(
        p for p in FIXTURES.rglob("*.jsonl") if p.name in ("session.jsonl", "events.jsonl", "rpc.jsonl")
    )


def _other_files() -> list[Path]:
    fixtures = ROOT / "tests" / "fixtures"
    files = (f for f in fixtures.rglob("*") if f.is_file() and "workspace" not in f.parts)
    return sorted(f for f in files if "pi" not in f.relative_to(fixtures).parts)  # field/pi/ holds Pi files


def test_pi_files_are_detected_and_other_agents_files_are_not() -> None:
    pi_files = _pi_files()
    versions = list((FIXTURES / "versions").glob("*/probe"))  # tests/recorder_pi.py --version V
    assert len(pi_files) == 2 * len(SCENARIOS) + 6 + 2 * len(versions)
    for path in pi_files:
        assert adapters.adapter_class("pi").detect(adapters.read_head(path)), path
    meta = [FIXTURES / "tools" / "meta.json", FIXTURES / "tools" / "upstream.jsonl"]
    others = _other_files()
    assert len(others) > 20
    for path in [*others, *meta]:
        assert not adapters.adapter_class("pi").detect(adapters.read_head(path)), path


def test_other_adapters_do_not_claim_pi_files() -> None:
    for path in _pi_files():
        head = adapters.read_head(path)
        claimed = [a.name for a in adapters.all_adapters() if a.name != "pi" and a.detect(head)]
        assert claimed == [], (path, claimed)


# the CLI (needs adapters.pi.PiAdapter registered in adapters.all_adapters) ----------------------
@pytest.mark.parametrize(
    "name",
    [
        "tools/session.jsonl",
        "tools/events.jsonl",
        "rpc/rpc.jsonl",
        "two_runs/events.jsonl",
        "sessions/v1/session.jsonl",
        "sessions/compaction/session.jsonl",
    ],
)
def test_inspect_lists_each_form(name: str) -> None:
    path = FIXTURES / name
    assert adapters.detect(path).name == "pi"
    proc = replayer("inspect", str(path), "--json", check=True)
    report = orjson.loads(proc.stdout)
    traj = session.parse(path)
    assert report["agent"] == "pi" and report["agent_version"] is None
    assert report["cwd"] == traj.cwd
    if traj.session_id is not None:  # the adapter names an rpc log's session itself
        assert report["session_id"] == traj.session_id
    assert [[c["id"] for c in s["calls"]] for s in report["steps"]] == [
        [c.id for c in s.calls] for s in traj.steps
    ]
    assert [s["before_compaction"] for s in report["steps"]] == [s.before_compaction for s in traj.steps]
    assert all(c["has_observation"] for s in report["steps"] for c in s["calls"])


def test_inspect_names_a_damaged_line(tmp_path: Path) -> None:
    lines = (FIXTURES / "tools" / "events.jsonl").read_bytes().splitlines()
    lines[4] = lines[4][:40]
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    _one_line_error(replayer("inspect", str(path)), 3, "line 5 is not JSON")


def test_inspect_and_prepare_report_a_skipped_line(tmp_path: Path) -> None:
    path = _cut_line_5(tmp_path)
    report = orjson.loads(replayer("inspect", str(path), "--json", check=True).stdout)
    assert report["parse_notes"] == session.parse(path).parse_notes != []
    text = replayer("inspect", str(path), check=True).stdout
    assert "note: line 5 skipped" in text
    out = tmp_path / "out"
    replayer("prepare", str(path), "-n", "1", "-o", str(out), check=True)
    assert orjson.loads((out / "result.json").read_bytes())["parse_notes"] == report["parse_notes"]
