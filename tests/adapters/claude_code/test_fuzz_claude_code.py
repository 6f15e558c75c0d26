"""Mutated real Claude Code sessions: the parser and `detect` refuse (BadInput naming line and field) or succeed."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replayer import adapters
from replayer.adapters.claude_code import ClaudeCodeAdapter
from replayer.floor.errors import BadInput
from tests.conftest import CLAUDE
from tests.fuzzing import FUZZ_SETTINGS, expect_refusal_or_success, mutated_file


@pytest.mark.parametrize("name", CLAUDE.scenarios)
@FUZZ_SETTINGS
@given(data=st.data())
def test_mutated_session(name: str, data: st.DataObject, tmp_path: Path) -> None:
    original = (CLAUDE.root / name / "session.jsonl").read_bytes()
    path = tmp_path / "session.jsonl"
    path.write_bytes(data.draw(mutated_file(original)))
    expect_refusal_or_success(lambda: ClaudeCodeAdapter().parse(path, None))
    expect_refusal_or_success(lambda: adapters.detect(path))


def _records() -> list[dict]:
    return [
        orjson.loads(line) for line in (CLAUDE.root / "parallel" / "session.jsonl").read_bytes().splitlines()
    ]


def _write(tmp_path: Path, records: list) -> Path:
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def _line_of(records: list[dict], kind: str, block_type: str | None = None) -> int:
    """0-based index of the first record of `kind` (holding a content block of `block_type`)."""
    for i, r in enumerate(records):
        content = r.get("message", {}).get("content") if r.get("type") == kind else None
        if content is not None and (
            block_type is None
            or (isinstance(content, list) and any(b.get("type") == block_type for b in content))
        ):
            return i
    raise AssertionError(f"no {kind} record with a {block_type} block")


def _refusal(path: Path) -> str:
    with pytest.raises(BadInput) as info:
        ClaudeCodeAdapter().parse(path, None)
    message = str(info.value)
    assert len(message) < 600 and "\n" not in message
    return message


def _block(record: dict, block_type: str) -> dict:
    return next(b for b in record["message"]["content"] if b.get("type") == block_type)


@pytest.mark.parametrize("value", [7, None, "text", [1]])
def test_message_that_is_not_an_object(value: object, tmp_path: Path) -> None:
    records = _records()
    i = _line_of(records, "assistant", "tool_use")
    records[i]["message"] = value
    assert f"line {i + 1}, field message:" in _refusal(_write(tmp_path, records))


def test_tool_use_without_id(tmp_path: Path) -> None:
    records = _records()
    i = _line_of(records, "assistant", "tool_use")
    del _block(records[i], "tool_use")["id"]
    assert f"line {i + 1}, field message.content[" in _refusal(_write(tmp_path, records))


def test_tool_use_input_that_is_not_an_object(tmp_path: Path) -> None:
    records = _records()
    i = _line_of(records, "assistant", "tool_use")
    _block(records[i], "tool_use")["input"] = "ls"
    message = _refusal(_write(tmp_path, records))
    assert f"line {i + 1}, field message.content[" in message and "].input" in message


def test_tool_result_without_tool_use_id(tmp_path: Path) -> None:
    records = _records()
    i = _line_of(records, "user", "tool_result")
    del _block(records[i], "tool_result")["tool_use_id"]
    assert f"line {i + 1}, field message.content[0].tool_use_id:" in _refusal(_write(tmp_path, records))


def test_content_block_that_is_not_an_object(tmp_path: Path) -> None:
    records = _records()
    i = _line_of(records, "user", "tool_result")
    records[i]["message"]["content"].append(3)
    assert f"line {i + 1}, field message.content[" in _refusal(_write(tmp_path, records))


def test_text_block_without_text(tmp_path: Path) -> None:
    records = _records()
    i = _line_of(records, "assistant", "text")
    del _block(records[i], "text")["text"]
    assert f"line {i + 1}, field message.content[" in _refusal(_write(tmp_path, records))


def test_parent_uuid_that_is_not_a_string(tmp_path: Path) -> None:
    records = _records()
    records[3]["parentUuid"] = ["a"]
    assert "line 4, field parentUuid:" in _refusal(_write(tmp_path, records))


def test_huge_value_is_excerpted(tmp_path: Path) -> None:
    records = _records()
    i = _line_of(records, "assistant", "tool_use")
    records[i]["message"]["content"] = {"x": "y" * 100_000}
    message = _refusal(_write(tmp_path, records))
    assert f"line {i + 1}, field message.content:" in message and len(message) < 400


def test_session_id_that_names_a_path(tmp_path: Path) -> None:
    records = [{**r, "sessionId": "../../escape"} if "sessionId" in r else r for r in _records()]
    assert "field sessionId:" in _refusal(_write(tmp_path, records))


def test_unknown_fields_and_records_pass(tmp_path: Path) -> None:
    records = _records()
    records = [{**r, "someFutureField": {"nested": [1, 2]}} for r in records]
    records.insert(1, {"type": "future-record", "payload": 3})
    traj = ClaudeCodeAdapter().parse(_write(tmp_path, records), None)
    assert len(traj.steps) == 2
