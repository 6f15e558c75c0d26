"""Fuzzing of OpenCode's parser: every mutated recording (the export JSON, the `run --format json` event
log alone and beside its export, the SQLite store damaged byte-wise) parses or is refused with a one-line
`BadInput`, never a crash; what a parse accepts also goes through the request conversion, and (for a
few) through the rebuild, whose import by the pinned CLI (on the host) must take it. Plain tests pin the
crash shapes the fuzzing found. No Docker."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from replayer import adapters
from replayer.adapters.opencode import OpenCodeAdapter, session
from replayer.adapters.opencode.wire import to_wire
from replayer.floor.errors import BadInput
from tests.conftest import ROOT
from tests.fuzzing import EXAMPLES, FUZZ_SETTINGS, expect_refusal_or_success, mutated_bytes, mutated_file

FIXTURES = ROOT / "tests" / "fixtures" / "opencode"
SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "events.jsonl").exists())
TASK = "the task"


def _parse_and_use(path: Path) -> None:
    traj = OpenCodeAdapter().parse(path, TASK)
    to_wire(traj.native_as(session.Native).messages)


def _check(path: Path) -> None:
    expect_refusal_or_success(lambda: _parse_and_use(path))
    expect_refusal_or_success(lambda: adapters.detect(path))


@pytest.mark.parametrize("scenario", SCENARIOS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_mutated_export(scenario: str, data: st.DataObject, tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    path.write_bytes(data.draw(mutated_file((FIXTURES / scenario / "export.json").read_bytes())))
    _check(path)


@pytest.mark.parametrize("scenario", SCENARIOS)
@pytest.mark.parametrize("beside", [None, "export.json", "opencode.db"])
@FUZZ_SETTINGS
@given(data=st.data())
def test_mutated_events(scenario: str, beside: str | None, data: st.DataObject, tmp_path: Path) -> None:
    """Alone (the prompt from --task) and beside the session's export or store (the prompt from it)."""
    if beside is not None:
        shutil.copyfile(FIXTURES / scenario / beside, tmp_path / beside)
    path = tmp_path / "events.jsonl"
    path.write_bytes(data.draw(mutated_file((FIXTURES / scenario / "events.jsonl").read_bytes())))
    _check(path)


@pytest.mark.parametrize("scenario", SCENARIOS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_events_beside_a_mutated_export(scenario: str, data: st.DataObject, tmp_path: Path) -> None:
    shutil.copyfile(FIXTURES / scenario / "events.jsonl", tmp_path / "events.jsonl")
    export = data.draw(mutated_file((FIXTURES / scenario / "export.json").read_bytes()))
    (tmp_path / "export.json").write_bytes(export)
    _check(tmp_path / "events.jsonl")


@pytest.mark.parametrize("scenario", SCENARIOS)
@FUZZ_SETTINGS
@given(data=st.data())
def test_damaged_store(scenario: str, data: st.DataObject, tmp_path: Path) -> None:
    path = tmp_path / "opencode.db"
    path.write_bytes(data.draw(mutated_bytes((FIXTURES / scenario / "opencode.db").read_bytes())))
    _check(path)


@pytest.mark.docker  # an OpenCode import runs in a sandbox
@settings(FUZZ_SETTINGS, max_examples=max(EXAMPLES // 8, 5))
@given(data=st.data())
def test_what_a_parse_accepts_the_pinned_cli_imports(data: st.DataObject, tmp_path: Path) -> None:
    """The fuzzing's `sandbox` errors (exit 6): exports the parse accepted and the rebuild's `opencode
    import` refused. The parse now checks the CLI's own schemas, so an accepted one is imported."""
    path = tmp_path / "export.json"
    path.write_bytes(data.draw(mutated_file((FIXTURES / "tools" / "export.json").read_bytes())))
    adapter = OpenCodeAdapter()
    try:
        traj = adapter.parse(path, TASK)
    except BadInput:
        return
    last = next((s.index - 1 for s in traj.steps if not s.complete), len(traj.steps))
    adapter.rebuild(traj, last, {}, Path(tempfile.mkdtemp(dir=tmp_path)))


# the crash shapes the fuzzing found ------------------------------------------------------------------
def _export(scenario: str = "tools") -> dict[str, Any]:
    return orjson.loads((FIXTURES / scenario / "export.json").read_bytes())


def _tool_part(doc: dict[str, Any]) -> tuple[int, int]:
    """(message index, part index) of the first tool part."""
    return next(
        (m, p)
        for m, message in enumerate(doc["messages"])
        for p, part in enumerate(message["parts"])
        if part["type"] == "tool"
    )


def _refusal(path: Path) -> str:
    with pytest.raises(BadInput) as caught:
        _parse_and_use(path)
    message = str(caught.value)
    assert caught.value.exit_code == 3 and "\n" not in message and len(message) < 400, message
    return message


@pytest.mark.parametrize(
    ("change", "field"),
    [
        # crashes: unhashable status (session.py), no tool name (KeyError in wire.py)
        (
            lambda p: p["state"].update(status=["completed"]),
            "state.status: should be 'pending', 'running', 'completed' or 'error' (got ['completed'])",
        ),
        (lambda p: p.pop("tool"), "tool: missing"),
        # what the pinned CLI's import refused (a `sandbox` error at the rebuild, exit 6)
        (
            lambda p: p["state"]["time"].update(start=1.5),
            "state.time.start: should be a non-negative integer",
        ),
        (lambda p: p["state"]["time"].update(end=None), "state.time.end: should be a non-negative integer"),
        (lambda p: p["state"].update(input=[]), "state.input: should be a valid dictionary"),
        (lambda p: p.update(id="x" * 100_000), "id: should be an id starting with 'prt'"),
        (lambda p: p.update(type="zzz"), "type: should be 'text', 'reasoning'"),
    ],
)
def test_a_part_the_cli_would_not_read_is_refused_naming_message_and_field(
    change: Any, field: str, tmp_path: Path
) -> None:
    doc = _export()
    m, p = _tool_part(doc)
    change(doc["messages"][m]["parts"][p])
    path = tmp_path / "export.json"
    path.write_bytes(orjson.dumps(doc))
    assert f"message {m}, field parts[{p}].{field}" in _refusal(path)


def test_a_message_or_session_info_the_cli_would_not_read_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "export.json"
    doc = _export()
    doc["messages"][1]["info"]["time"]["completed"] = None
    path.write_bytes(orjson.dumps(doc))
    assert "message 1, field info.time.completed: should be a non-negative integer" in _refusal(path)
    doc = _export()
    doc["messages"][0]["info"]["role"] = "x" * 100_000
    path.write_bytes(orjson.dumps(doc))
    assert "message 0 has an unknown role 'xxxx" in _refusal(path)
    doc = _export()
    doc["info"]["version"] = 5
    path.write_bytes(orjson.dumps(doc))
    assert "the session info, field version: should be a valid string (got 5)" in _refusal(path)


def test_an_event_part_of_the_wrong_shape_is_refused_naming_the_line(tmp_path: Path) -> None:
    lines = (FIXTURES / "tools" / "events.jsonl").read_bytes().splitlines()
    at = next(i for i, line in enumerate(lines) if b'"tool_use"' in line)
    event = orjson.loads(lines[at])
    event["part"]["state"]["output"] = {"text": "out"}
    lines[at] = orjson.dumps(event)
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert f"line {at + 1}, field part.state.output: should be a valid string" in _refusal(path)


def _store(tmp_path: Path, sql: str) -> Path:
    path = tmp_path / "opencode.db"
    shutil.copyfile(FIXTURES / "tools" / "opencode.db", path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode=DELETE")
        db.execute(sql)
        db.commit()
    return path


def test_a_damaged_store_row_is_refused_naming_the_row_and_field(tmp_path: Path) -> None:
    """Text that is no UTF-8 (what a byte flip in the file gives), a value of another type, a row whose
    data the CLI would not read."""
    path = _store(tmp_path, "UPDATE part SET data = CAST(X'7b22ff223a317d' AS TEXT) WHERE data LIKE '%tool%'")
    assert "cannot read the opencode database: 'Could not decode to UTF-8 column" in _refusal(path)
    path = _store(tmp_path, "UPDATE message SET data = X'00' WHERE data LIKE '%assistant%'")
    assert "has damaged JSON data" in _refusal(path)
    path = _store(tmp_path, "UPDATE session SET title = X'00ff'")
    assert "field title: should be a valid string (got b'\\x00\\xff')" in _refusal(path)
    path = _store(tmp_path, "UPDATE session SET time_created = 'soon'")
    assert "field time.created: should be a non-negative integer (got 'soon')" in _refusal(path)
    path = _store(
        tmp_path, "UPDATE part SET data = json_set(data, '$.state.status', 'done') WHERE data LIKE '%tool%'"
    )
    assert "field data.state.status: should be 'pending'" in _refusal(path)


def test_a_store_that_is_no_regular_file_is_refused_before_sqlite_opens_it(tmp_path: Path) -> None:
    fifo = tmp_path / "opencode.db"
    os.mkfifo(fifo)
    assert "is a FIFO" in _refusal(fifo)
    (tmp_path / "beside").mkdir()
    db = _store(tmp_path / "beside", "SELECT 1")
    os.mkfifo(db.with_name("opencode.db-wal"))  # a WAL that is no file: not read (it would block)
    assert OpenCodeAdapter().parse(db).session_id == _export()["info"]["id"]


def test_a_store_whose_schema_is_no_utf8_is_refused(tmp_path: Path) -> None:
    """SQLite's error names the damaged table, and that message is no UTF-8 either: it raised
    UnicodeDecodeError (a crash, in the parse and in the detection)."""
    data = bytearray((FIXTURES / "tools" / "opencode.db").read_bytes())
    data[data.find(b"tablesessionsession") + 5] = 0x83  # the name of the session table
    path = tmp_path / "opencode.db"
    path.write_bytes(bytes(data))
    assert "cannot read the opencode database" in _refusal(path)
    with pytest.raises(BadInput, match="unknown format"):
        adapters.detect(path)


def test_a_damaged_store_file_is_refused(tmp_path: Path) -> None:
    data = (FIXTURES / "tools" / "opencode.db").read_bytes()
    path = tmp_path / "opencode.db"
    for damaged in (data[:5000], data[:100] + b"\xff\xfe\xc3" + data[100:], data[: len(data) // 2]):
        path.write_bytes(damaged)
        message = _refusal(path)
        assert (
            message.startswith(f"{path}: cannot read the opencode database")
            or "no opencode session" in message
        )
