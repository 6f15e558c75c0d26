"""OpenCode's three native forms (export JSON, `run --format json` events, the SQLite store) parse into the
same steps; event logs merge repeated parts; what cannot be parsed is refused in one line. No Docker.
Every input is a recording of the pinned CLI or a variant of one written to a temporary directory."""

from __future__ import annotations

import copy
import hashlib
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from replayer import adapters
from replayer.adapters.opencode import OpenCodeAdapter, importable, session
from replayer.floor.errors import BadInput
from tests.conftest import ROOT, replayer

FIXTURES = ROOT / "tests" / "fixtures" / "opencode"
SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "events.jsonl").exists())
FORMS = ("export.json", "opencode.db", "events.jsonl")


def _meta(scenario: str) -> dict[str, Any]:
    return orjson.loads((FIXTURES / scenario / "meta.json").read_bytes())


def _export(scenario: str) -> dict[str, Any]:
    return orjson.loads((FIXTURES / scenario / "export.json").read_bytes())


def _expected_steps(scenario: str) -> list[tuple[str, list[tuple[str, str, dict, str, bool]]]]:
    """Straight from the recorded export: assistant messages with tool parts, their calls in part order."""
    steps = []
    for message in _export(scenario)["messages"]:
        tools = [p for p in message["parts"] if p["type"] == "tool"]
        if message["info"]["role"] == "assistant" and tools:
            calls = [
                (
                    p["callID"],
                    p["tool"],
                    p["state"]["input"],
                    p["state"].get("output", p["state"].get("error")),
                    p["state"]["status"] == "error",
                )
                for p in tools
            ]
            steps.append((message["info"]["id"], calls))
    return steps


def _steps(traj) -> list[tuple[str, list[tuple[str, str, dict, str, bool]]]]:  # type: ignore[no-untyped-def]
    return [
        (
            s.message_id,
            [(c.id, c.tool, c.input, c.historical.content, c.historical.is_error) for c in s.calls],
        )
        for s in traj.steps
    ]


def _lines(scenario: str) -> list[bytes]:
    return (FIXTURES / scenario / "events.jsonl").read_bytes().splitlines()


def _alone(tmp_path: Path, lines: list[bytes], name: str = "events.jsonl") -> Path:
    """An event log with no sibling export or store."""
    path = tmp_path / name
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def _one_line_error(proc, code: int, needle: str) -> None:  # type: ignore[no-untyped-def]
    assert proc.returncode == code, proc.stderr
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def _listing(directory: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in directory.iterdir() if p.is_file()}


# the same session in three forms -------------------------------------------------------------
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("form", FORMS)
def test_each_form_gives_the_recorded_steps(scenario: str, form: str) -> None:
    path = FIXTURES / scenario / form
    traj = session.parse(path)
    expected = _expected_steps(scenario)
    assert expected and _steps(traj) == expected
    assert all(s.complete for s in traj.steps)
    assert [s.index for s in traj.steps] == list(range(1, len(expected) + 1))
    assert traj.agent == "opencode" and traj.agent_version == "1.18.33"
    assert traj.session_id == _meta(scenario)["session_id"] and traj.cwd == "/testbed"
    assert traj.source == str(path) and traj.source_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    native = traj.native_as(session.Native)
    assert native.form == {"export.json": "export", "opencode.db": "sqlite", "events.jsonl": "events"}[form]
    assert [native.messages[at]["info"]["id"] for at in native.step_messages] == [m for m, _ in expected]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_the_store_and_the_event_log_rebuild_the_export(scenario: str) -> None:
    recorded = _export(scenario)
    for form in ("opencode.db", "events.jsonl"):
        native = session.parse(FIXTURES / scenario / form).native_as(session.Native)
        assert native.messages == recorded["messages"], form
        assert native.info == recorded["info"], form
    db = session.parse(FIXTURES / scenario / "opencode.db").native_as(session.Native)
    assert list(db.info) == list(recorded["info"])  # the CLI's field order too


def test_a_tool_error_is_an_error_observation_with_the_state() -> None:
    traj = session.parse(FIXTURES / "tools" / "export.json")
    calls = {c.id: c for s in traj.steps for c in s.calls}
    failed = [c for c in calls.values() if c.historical and c.historical.is_error]
    assert failed
    for call in failed:
        assert call.historical.structured["status"] == "error"
        assert call.historical.content == call.historical.structured["error"]
    ok = next(c for c in calls.values() if c.historical and not c.historical.is_error)
    assert ok.historical.content == ok.historical.structured["output"]


def test_the_step_batches_keep_call_order_not_completion_order() -> None:
    lines = [orjson.loads(line) for line in _lines("tools")]
    printed = [e["part"]["callID"] for e in lines if e["type"] == "tool_use"]
    traj = session.parse(FIXTURES / "tools" / "events.jsonl")
    parsed = [c.id for s in traj.steps for c in s.calls]
    assert sorted(parsed) == sorted(printed) and parsed != printed  # the CLI prints in completion order
    assert parsed == sorted(parsed)  # call_tools_01 .. call_tools_11


# event logs -----------------------------------------------------------------------------------
def _tool_lines(lines: list[bytes]) -> list[int]:
    return [i for i, line in enumerate(lines) if orjson.loads(line)["type"] == "tool_use"]


def _with_state(line: bytes, status: str) -> bytes:
    event = orjson.loads(line)
    state = event["part"]["state"]
    event["part"]["state"] = {"status": status, "input": state["input"], "raw": "", "time": state["time"]}
    if status == "pending":
        event["part"]["state"] = {"status": "pending", "input": {}, "raw": ""}
    return orjson.dumps(event)


def test_intermediate_tool_states_and_repeated_lines_replay_no_call_twice(tmp_path: Path) -> None:
    lines = _lines("tools")
    variant = list(lines)
    for i in reversed(_tool_lines(lines)):
        variant[i:i] = [_with_state(lines[i], "pending"), _with_state(lines[i], "running")]
    variant += lines[:5]  # identical lines again (the first step printed twice)
    path = _alone(tmp_path, variant)
    traj = session.parse(path, "Fix add() in calc.py.")
    ids = [c.id for s in traj.steps for c in s.calls]
    assert len(ids) == len(set(ids)) == 11
    assert _steps(traj) == _expected_steps("tools") and all(s.complete for s in traj.steps)
    for message in traj.native_as(session.Native).messages:
        part_ids = [p["id"] for p in message["parts"]]
        assert len(part_ids) == len(set(part_ids))


def test_the_last_line_of_a_part_wins(tmp_path: Path) -> None:
    lines = _lines("tools")
    last_tool = _tool_lines(lines)[-1]
    variant = [*lines, _with_state(lines[last_tool], "running")]
    traj = session.parse(_alone(tmp_path, variant), "Fix add() in calc.py.")
    call_id = orjson.loads(lines[last_tool])["part"]["callID"]
    step = next(s for s in traj.steps if any(c.id == call_id for c in s.calls))
    assert not step.complete
    assert next(c for c in step.calls if c.id == call_id).historical is None
    assert sum(s.complete for s in traj.steps) == len(traj.steps) - 1


def test_unknown_and_error_events_are_ignored(tmp_path: Path) -> None:
    lines = _lines("tools")
    first = orjson.loads(lines[0])
    unknown = {
        "type": "future_kind",
        "timestamp": first["timestamp"],
        "sessionID": first["sessionID"],
        "x": 1,
    }
    error = {**unknown, "type": "error", "error": {"name": "UnknownError", "data": {"message": "boom"}}}
    variant = [lines[0], orjson.dumps(unknown), *lines[1:], orjson.dumps(error)]
    traj = session.parse(_alone(tmp_path, variant), "Fix add() in calc.py.")
    assert _steps(traj) == _expected_steps("tools")


def test_an_event_log_without_a_prompt_parses_with_a_stand_in(tmp_path: Path) -> None:
    """Reruns need some prompt to start the CLI with; only a continuation needs the real one."""
    traj = session.parse(_alone(tmp_path, _lines("tools")))
    assert traj.prompt_missing
    assert _steps(traj) == _expected_steps("tools")
    first = session.Native.model_validate(traj.native_as(session.Native)).messages[0]
    assert first["parts"][0]["text"] == session.STAND_IN_PROMPT
    assert not session.parse(_alone(tmp_path, _lines("tools")), "Fix add() in calc.py.").prompt_missing


def test_a_task_becomes_the_first_user_message(tmp_path: Path) -> None:
    task = _meta("tools")["task"]
    traj = session.parse(_alone(tmp_path, _lines("tools")), task)
    assert _steps(traj) == _expected_steps("tools")
    native = traj.native_as(session.Native)
    user, first = native.messages[0], native.messages[1]
    assert user["info"]["role"] == "user" and [p["text"] for p in user["parts"]] == [task]
    assert user["info"]["id"].startswith("msg_") and user["info"]["id"] < first["info"]["id"]
    assert user["parts"][0]["id"].startswith("prt_") and user["parts"][0]["messageID"] == user["info"]["id"]
    assert user["info"]["time"]["created"] == orjson.loads(_lines("tools")[0])["timestamp"]
    assert {m["info"]["parentID"] for m in native.messages[1:]} == {user["info"]["id"]}
    assert first["info"]["finish"] == "tool-calls" and native.messages[-1]["info"]["finish"] == "stop"
    assert [m["info"]["role"] for m in native.messages].count("user") == 1
    assert native.info["id"] == traj.session_id and native.info["version"] is None
    assert traj.agent_version is None and traj.cwd is None
    # the recorded assistant parts, as the export has them
    recorded = [m for m in _export("tools")["messages"] if m["info"]["role"] == "assistant"]
    assert [m["parts"] for m in native.messages[1:]] == [m["parts"] for m in recorded]


def test_a_lone_event_log_is_imported_in_its_order_and_directory(tmp_path: Path) -> None:
    """The store reads messages by (time created, id): each assistant message is dated by its first event
    (not 0, which would put it before the prompt), and --cwd gives the session its directory."""
    lines = _lines("tools")
    native = session.parse(_alone(tmp_path, lines), _meta("tools")["task"]).native_as(session.Native)
    document = importable(native, copy.deepcopy(native.messages), "/work/repo")
    messages = document["messages"]
    assert sorted(messages, key=lambda m: (m["info"]["time"]["created"], m["info"]["id"])) == messages
    first_event = {}
    for event in map(orjson.loads, lines):
        if "part" in event:
            first_event.setdefault(event["part"]["messageID"], event["timestamp"])
    assert all(m["info"]["time"]["created"] == first_event[m["info"]["id"]] for m in messages[1:])
    assert document["info"]["directory"] == "/work/repo"
    assert {m["info"]["path"]["cwd"] for m in messages[1:]} == {"/work/repo"}


def test_two_appended_runs_take_their_prompts_from_the_export() -> None:
    traj = session.parse(FIXTURES / "two_runs" / "events.jsonl")
    native = traj.native_as(session.Native)
    users = [m for m in native.messages if m["info"]["role"] == "user"]
    assert (
        [u["parts"][0]["text"] for u in users]
        == _meta("two_runs")["prompts"]
        == ["Read calc.py.", "Now fix it."]
    )
    # run 2's prompt comes right after run 1's final answer, before run 2's first step
    second = native.messages.index(users[1])
    assert native.messages[second - 1]["info"]["finish"] == "stop"
    assert native.step_messages[0] < second < native.step_messages[1]
    assert len(traj.steps) == 3 and _steps(traj) == _expected_steps("two_runs")


def test_two_appended_runs_without_the_export_stand_in_for_the_later_prompt(tmp_path: Path) -> None:
    """Run 2's prompt is printed nowhere: a stand-in starts it in a rerun, and a continuation is refused."""
    path = _alone(tmp_path, _lines("two_runs"))
    traj = session.parse(path, _meta("two_runs")["task"])
    users = [m for m in traj.native_as(session.Native).messages if m["info"]["role"] == "user"]
    assert [u["parts"][0]["text"] for u in users] == [_meta("two_runs")["task"], session.STAND_IN_PROMPT]
    assert traj.native_as(session.Native).prompts_missing == [2] and _steps(traj) == _expected_steps(
        "two_runs"
    )
    assert session.parse(path).native_as(session.Native).prompts_missing == [1, 2]
    refusal = OpenCodeAdapter().continuation_refusal(traj, "openai/gpt-4o")
    assert refusal is not None and "run(s) 2" in refusal and "opencode export" in refusal
    # one run alone is fine with its task
    lines = _lines("two_runs")
    stop = next(i for i, line in enumerate(lines) if orjson.loads(line)["part"].get("reason") == "stop")
    first_run = session.parse(_alone(tmp_path, lines[: stop + 1], "run1.jsonl"), "Read calc.py.")
    assert [c.id for s in first_run.steps for c in s.calls] == ["call_two_runs_01"]


def test_a_damaged_line_is_named(tmp_path: Path) -> None:
    lines = _lines("tools")
    lines[4] = lines[4][:50]
    path = _alone(tmp_path, lines)
    with pytest.raises(BadInput, match="line 5 is not JSON"):
        session.parse(path, "task")
    _one_line_error(replayer("inspect", str(path), "--task", "task"), 3, "line 5 is not JSON")


def test_an_event_of_another_session_is_refused(tmp_path: Path) -> None:
    other = _lines("two_runs")[0]
    path = _alone(tmp_path, [*_lines("tools"), other])
    with pytest.raises(BadInput, match="belongs to session ses_dc873d531ffeqAN6wCBLnRDgHR"):
        session.parse(path, "task")


# the SQLite store --------------------------------------------------------------------------------
def _db_copy(tmp_path: Path, scenario: str = "tools") -> Path:
    path = tmp_path / "opencode.db"
    shutil.copyfile(FIXTURES / scenario / "opencode.db", path)
    return path


def _add_session(db_path: Path, new_id: str, parent: str | None) -> None:
    with sqlite3.connect(db_path) as db:
        db.execute("PRAGMA journal_mode=DELETE")
        columns = [r[1] for r in db.execute("PRAGMA table_info(session)")]
        row = list(db.execute("SELECT * FROM session").fetchone())
        row[columns.index("id")] = new_id
        row[columns.index("parent_id")] = parent
        db.execute(f"INSERT INTO session VALUES ({', '.join('?' * len(row))})", row)
    db.close()


def test_a_store_with_two_sessions_is_refused(tmp_path: Path) -> None:
    path = _db_copy(tmp_path)
    _add_session(path, "ses_00000000000000000000other", None)
    with pytest.raises(BadInput) as caught:
        session.parse(path)
    message = str(caught.value)
    assert "2 opencode sessions" in message and "opencode export <id>" in message
    assert "ses_00000000000000000000other" in message and _meta("tools")["session_id"] in message
    _one_line_error(replayer("inspect", str(path)), 3, "ses_00000000000000000000other")


def test_a_sub_agent_session_is_no_candidate(tmp_path: Path) -> None:
    path = _db_copy(tmp_path)
    _add_session(path, "ses_00000000000000000000child", _meta("tools")["session_id"])
    traj = session.parse(path)
    assert traj.session_id == _meta("tools")["session_id"] and _steps(traj) == _expected_steps("tools")


def test_the_store_is_read_without_writing_next_to_it() -> None:
    directory = FIXTURES / "tools"
    before = _listing(directory)
    session.parse(directory / "opencode.db")
    assert adapters.detect(directory / "opencode.db").name == "opencode"
    assert _listing(directory) == before  # no -wal or -shm appeared


def test_an_uncheckpointed_wal_is_read_and_left_alone(tmp_path: Path) -> None:
    (tmp_path / "work").mkdir()
    work = _db_copy(tmp_path / "work")
    marker = "EDITED_IN_THE_WAL_7f3a"
    live = sqlite3.connect(work)
    try:
        live.execute("PRAGMA wal_autocheckpoint=0")
        assert live.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        part_id, data = live.execute(
            "SELECT id, data FROM part WHERE data LIKE '%call_tools_01%' AND data LIKE '%\"tool\"%'"
        ).fetchone()
        part = orjson.loads(data)
        part["state"]["output"] = marker
        live.execute("UPDATE part SET data = ? WHERE id = ?", (orjson.dumps(part).decode(), part_id))
        live.commit()
        snapshot = tmp_path / "snapshot"
        snapshot.mkdir()
        for name in ("opencode.db", "opencode.db-wal"):  # as a user copies a live store
            shutil.copyfile(work.parent / name, snapshot / name)
    finally:
        live.close()
    path = snapshot / "opencode.db"
    before = _listing(snapshot)
    assert (snapshot / "opencode.db-wal").stat().st_size > 0
    traj = session.parse(path)
    assert traj.steps[0].calls[0].historical.content == marker
    assert _listing(snapshot) == before
    wal_digest = hashlib.sha256(path.read_bytes() + (snapshot / "opencode.db-wal").read_bytes()).hexdigest()
    assert traj.source_sha256 == wal_digest


def test_a_damaged_part_row_is_named(tmp_path: Path) -> None:
    path = _db_copy(tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA journal_mode=DELETE")
        part_id = db.execute("SELECT id FROM part ORDER BY id LIMIT 1").fetchone()[0]
        db.execute("UPDATE part SET data = '{\"type\":' WHERE id = ?", (part_id,))
    db.close()
    with pytest.raises(BadInput, match=f"part {part_id} has damaged JSON data"):
        session.parse(path)


# detection ----------------------------------------------------------------------------------------
def test_opencode_forms_are_detected_and_other_agents_are_not() -> None:
    for form in FORMS:
        assert adapters.adapter_class("opencode").detect(adapters.read_head(FIXTURES / "tools" / form)), form
        assert adapters.detect(FIXTURES / "tools" / form).name == "opencode"
    others = [
        ROOT / "tests/fixtures/claude_code/single/session.jsonl",
        ROOT / "tests/fixtures/codex/exec/rollout.jsonl",
        ROOT / "tests/fixtures/mini_swe_agent/toolcall/trajectory.traj.json",
        FIXTURES / "tools" / "meta.json",
        FIXTURES / "tools" / "upstream.jsonl",
    ]
    for path in others:
        assert not adapters.adapter_class("opencode").detect(adapters.read_head(path)), path
    for path in others[:3]:
        assert adapters.detect(path).name != "opencode"


def test_an_sqlite_file_of_another_program_is_not_detected(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (id TEXT)")
    db.close()
    assert adapters.read_head(path) == [adapters.SqliteFile(path)]
    assert not adapters.adapter_class("opencode").detect(adapters.read_head(path))
    with pytest.raises(BadInput, match="unknown format"):
        adapters.detect(path)


# the CLI -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("form", FORMS)
def test_inspect_lists_each_form(scenario: str, form: str) -> None:
    proc = replayer("inspect", str(FIXTURES / scenario / form), "--json", check=True)
    report = orjson.loads(proc.stdout)
    assert report["agent"] == "opencode" and report["agent_version"] == "1.18.33"
    assert report["session_id"] == _meta(scenario)["session_id"]
    expected = _expected_steps(scenario)
    assert [[c["id"] for c in s["calls"]] for s in report["steps"]] == [
        [c[0] for c in calls] for _, calls in expected
    ]
    assert all(c["has_observation"] for s in report["steps"] for c in s["calls"])


def test_inspect_takes_the_task_of_a_lone_event_log(tmp_path: Path) -> None:
    path = _alone(tmp_path, _lines("tools"))
    proc = replayer("inspect", str(path), "--task", _meta("tools")["task"], "--json", check=True)
    report = orjson.loads(proc.stdout)
    assert report["agent_version"] is None and len(report["steps"]) == len(_expected_steps("tools"))


def test_an_export_saved_with_the_clis_status_line_parses_and_says_so(tmp_path: Path) -> None:
    """Issue 45: `opencode export ID > f 2>&1` writes `Exporting session: ID` (stderr) before the JSON."""
    export = FIXTURES / "tools" / "export.json"
    saved = tmp_path / "export.json"
    session_id = _export("tools")["info"]["id"]
    saved.write_bytes(f"Exporting session: {session_id}\n".encode() + export.read_bytes())
    traj = adapters.detect(saved).parse(saved)
    plain = session.parse(export)
    assert [s.calls for s in traj.steps] == [s.calls for s in plain.steps] and traj.session_id == session_id
    assert traj.parse_notes == [
        f"the export begins with 1 line(s) the CLI printed to the same stream, skipped: 'Exporting session: {session_id}'"
    ]
    shown = orjson.loads(replayer("inspect", str(saved), "--json", check=True).stdout)
    assert shown["agent"] == "opencode" and len(shown["steps"]) == len(plain.steps)
    # text before anything but a pretty-printed document stays what it was: not a trajectory
    (tmp_path / "other.json").write_bytes(b"Exporting session: x\nnot json\n{\n}\n")
    proc = replayer("inspect", str(tmp_path / "other.json"))
    assert proc.returncode == 3 and len(proc.stderr.strip().splitlines()) == 1
