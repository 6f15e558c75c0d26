"""Mutated real Codex rollouts: the parser and `detect` refuse (BadInput naming line and field) or succeed."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replayer import adapters
from replayer.adapters.codex import CodexAdapter
from replayer.adapters.codex import session as rollout
from replayer.floor.errors import BadInput
from tests.conftest import CODEX
from tests.fuzzing import FUZZ_SETTINGS, expect_refusal_or_success, mutated_file


@pytest.mark.parametrize("name", CODEX.scenarios)
@FUZZ_SETTINGS
@given(data=st.data())
def test_mutated_rollout(name: str, data: st.DataObject, tmp_path: Path) -> None:
    original = (CODEX.root / name / "rollout.jsonl").read_bytes()
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(data.draw(mutated_file(original)))
    expect_refusal_or_success(lambda: CodexAdapter().parse(path, None))
    expect_refusal_or_success(lambda: adapters.detect(path))


def _records() -> list[dict]:
    lines = (CODEX.root / "exec" / "rollout.jsonl").read_bytes().splitlines()
    return [orjson.loads(line) for line in lines]


def _write(tmp_path: Path, records: list) -> Path:
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(BadInput) as info:
        CodexAdapter().parse(path, None)
    message = str(info.value)
    assert len(message) < 600 and "\n" not in message
    return message


def _first(records: list[dict], item_type: str) -> int:
    return next(i for i, r in enumerate(records) if r["payload"].get("type") == item_type)


@pytest.mark.parametrize(
    ("item_type", "field", "value"),
    [
        ("function_call", "call_id", None),
        ("function_call", "call_id", 7),
        ("function_call", "name", ["exec_command"]),
        ("function_call", "arguments", {"cmd": "ls"}),
        ("function_call", "type", ["function_call"]),
        ("function_call_output", "call_id", {"id": 1}),
        ("function_call_output", "output", [1, "a", None]),
    ],
)
def test_a_wrongly_typed_item_field_is_named(
    item_type: str, field: str, value: object, tmp_path: Path
) -> None:
    records = _records()
    i = _first(records, item_type)
    if value is None:
        del records[i]["payload"][field]
    else:
        records[i]["payload"][field] = value
    assert f"line {i + 1}, field payload.{field}:" in _refusal(_write(tmp_path, records))


@pytest.mark.parametrize(("field", "value"), [("cli_version", True), ("id", "../../x"), ("cwd", 3)])
def test_a_wrongly_typed_session_meta_field_is_named(field: str, value: object, tmp_path: Path) -> None:
    records = _records()
    records[0]["payload"][field] = value
    assert f"line 1, field payload.{field}:" in _refusal(_write(tmp_path, records))


def test_a_record_type_that_is_not_a_string(tmp_path: Path) -> None:
    records = _records()
    records[3]["type"] = ["response_item"]
    assert "line 4, field type: not a string" in _refusal(_write(tmp_path, records))


def test_a_huge_call_id_is_excerpted(tmp_path: Path) -> None:
    records = _records()
    i = _first(records, "function_call_output")
    call = next(
        j for j, r in enumerate(records) if r["payload"].get("call_id") == records[i]["payload"]["call_id"]
    )
    del records[call]
    records[i - 1]["payload"]["call_id"] = "c" * 100_000
    assert "which has no call" in _refusal(_write(tmp_path, records))


def test_a_damaged_timestamp_never_names_a_path(tmp_path: Path) -> None:
    records = _records()
    records[0]["payload"]["timestamp"] = "../../../../etc/passwd"
    traj = CodexAdapter().parse(_write(tmp_path, records), None)
    assert "/" not in traj.native_as(rollout.Native).file_name


def test_unknown_fields_and_records_pass(tmp_path: Path) -> None:
    records = [{**r, "future": {"x": [1]}} for r in _records()]
    records.insert(2, {"type": "future_record", "payload": {"anything": 1}})
    original = CodexAdapter().parse(CODEX.root / "exec" / "rollout.jsonl", None)
    assert CodexAdapter().parse(_write(tmp_path, records), None).steps == original.steps
