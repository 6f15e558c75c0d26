"""Fuzzing of Pi's parser: every mutated recording (session files of each format version, `--mode json`
events, `--mode rpc` output) parses or is refused with a one-line `BadInput`, never a crash; what a parse
accepts also goes through the request conversion and the rebuild. Plain tests pin the crash shapes the
fuzzing found: each is refused naming its line and field, or read as Pi reads it. No Docker."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replayer import adapters
from replayer.adapters.pi import PiAdapter, session
from replayer.adapters.pi.wire import to_wire
from replayer.floor.errors import BadInput
from tests.conftest import ROOT
from tests.fuzzing import FUZZ_SETTINGS, expect_refusal_or_success, mutated_file

FIXTURES = ROOT / "tests" / "fixtures" / "pi"
FILES = sorted(p for p in FIXTURES.rglob("*.jsonl") if p.name != "upstream.jsonl")
"""Every native Pi file recorded: session.jsonl, events.jsonl and rpc.jsonl of each scenario."""


def _name(path: Path) -> str:
    return str(path.relative_to(FIXTURES))


def _parse_and_use(path: Path, out: Path) -> None:
    """Parse, then what a parsed trajectory is used for without Docker: the request conversion, and the
    rebuild at the last boundary a plan accepts (the longest prefix)."""
    adapter = PiAdapter()
    traj = adapter.parse(path)
    to_wire(traj.native_as(session.Native).messages)
    last = next((s.index - 1 for s in traj.steps if not s.complete), len(traj.steps))
    adapter.rebuild(traj, last, {}, out)


@pytest.mark.parametrize("fixture", FILES, ids=_name)
@FUZZ_SETTINGS
@given(data=st.data())
def test_mutated_file_parses_or_is_refused(fixture: Path, data: st.DataObject, tmp_path: Path) -> None:
    path = tmp_path / fixture.name
    path.write_bytes(data.draw(mutated_file(fixture.read_bytes())))
    expect_refusal_or_success(lambda: _parse_and_use(path, tmp_path / "out"))
    expect_refusal_or_success(lambda: adapters.detect(path))


# the crash shapes the fuzzing found ------------------------------------------------------------------
SESSION = FIXTURES / "tools" / "session.jsonl"


def _records(path: Path = SESSION) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _line_of(records: list[dict[str, Any]], role: str, nth: int = 0) -> int:
    """The index of the nth message entry (or message_end event) of `role`."""
    at = [i for i, r in enumerate(records) if (r.get("message") or {}).get("role") == role]
    return at[nth]


def _refusal(tmp_path: Path, records: list[Any], name: str = "session.jsonl") -> str:
    path = tmp_path / name
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    with pytest.raises(BadInput) as caught:
        _parse_and_use(path, tmp_path / "out")
    message = str(caught.value)
    assert caught.value.exit_code == 3 and "\n" not in message and len(message) < 400, message
    return message


@pytest.mark.parametrize(
    ("role", "block", "change", "field"),
    [
        ("user", 0, lambda b: b.pop("text"), "message.content[0].text: missing"),
        (
            "toolResult",
            0,
            lambda b: b.update(text=["a"]),
            "message.content[0].text: should be a valid string",
        ),
        ("assistant", 1, lambda b: b.pop("name"), "message.content[1].name: missing"),
        ("assistant", 1, lambda b: b.update(arguments="x"), "message.content[1].arguments: should be"),
        ("assistant", 0, lambda b: b.update(text=1.5), "message.content[0].text: should be a valid string"),
    ],
)
def test_a_content_block_of_the_wrong_shape_is_refused_naming_line_and_field(
    role: str, block: int, change: Any, field: str, tmp_path: Path
) -> None:
    """A text block without text crashed the request conversion (KeyError in wire.py), a call without a
    name too; each is refused where the line is read."""
    records = _records()
    at = _line_of(records, role)
    change(records[at]["message"]["content"][block])
    assert f"line {at + 1}, field {field}" in _refusal(tmp_path, records)


def test_a_message_field_of_the_wrong_type_is_refused(tmp_path: Path) -> None:
    """A stopReason that is an object crashed the step reader (unhashable dict)."""
    records = _records()
    at = _line_of(records, "assistant")
    records[at]["message"]["stopReason"] = {"x": 1}
    message = _refusal(tmp_path, records)
    assert f"line {at + 1}, field message.stopReason: should be a valid string (got {{'x': 1}})" in message


def test_a_huge_value_is_refused_with_a_short_excerpt(tmp_path: Path) -> None:
    records = _records()
    at = _line_of(records, "toolResult")
    records[at]["message"]["toolCallId"] = ["x" * 100_000]
    message = _refusal(tmp_path, records)
    assert f"line {at + 1}, field message.toolCallId: should be a valid string" in message


def test_a_header_pi_could_not_have_written_is_refused(tmp_path: Path) -> None:
    """The rebuild names the session file after the header's id and timestamp, and its folder after cwd."""
    for field, value in (("id", "../../escape"), ("timestamp", "\x00"), ("cwd", "/" + "d" * 300)):
        records = _records()
        records[0][field] = value
        assert f"line 1, field {field}: should be" in _refusal(tmp_path, records)


def test_an_rpc_answer_of_the_wrong_shape_is_refused(tmp_path: Path) -> None:
    records = _records(FIXTURES / "rpc" / "rpc.jsonl")
    at = next(i for i, r in enumerate(records) if r["type"] == "response")
    records[at]["command"] = ["get_state"]
    assert f"line {at + 1}, field command: should be a valid string" in _refusal(
        tmp_path, records, "rpc.jsonl"
    )


def test_a_huge_integer_is_read_as_pi_reads_it(tmp_path: Path) -> None:
    """A line with a lone surrogate is read by the standard library, which kept a 70-bit integer that the
    rebuild could not write (TypeError: Integer exceeds 64-bit range); it is read as a double, as by
    JSON.parse (and orjson on any other line)."""
    records = _records()
    at = _line_of(records, "assistant")
    records[at]["message"]["content"][1]["arguments"]["offset"] = 2**70
    records[at]["message"]["content"][0]["text"] = "cut \ud83d"
    path = tmp_path / "session.jsonl"
    path.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    _parse_and_use(path, tmp_path / "out")
    call = PiAdapter().parse(path).steps[0].calls[0]
    assert call.input["offset"] == float(2**70)


@pytest.mark.parametrize("levels", [150, 600])
def test_deep_nesting_is_refused_naming_the_line(levels: int, tmp_path: Path) -> None:
    """Read by orjson (up to 1024 levels) or by the standard library, then refused: the rebuild could not
    write it (orjson writes 254 levels at most)."""
    records = _records()
    at = _line_of(records, "assistant")
    deep: Any = "x"
    for _ in range(levels):
        deep = [deep]
    records[at]["message"]["content"][1]["arguments"]["deep"] = deep
    assert f"line {at + 1}: nests deeper than" in _refusal(tmp_path, records)


def test_bad_utf8_is_refused_and_a_nul_byte_skips_the_line_naming_it(tmp_path: Path) -> None:
    """Node reads bytes that are not UTF-8 as U+FFFD (refused: the replayer does not rewrite text); a raw
    NUL makes JSON.parse throw, and Pi's loader skips that line (so does the parse, saying so)."""
    lines = SESSION.read_bytes().splitlines(keepends=True)
    path = tmp_path / "session.jsonl"

    def damaged(damage: bytes) -> Path:
        path.write_bytes(b"".join(lines[:3]) + lines[3][:20] + damage + lines[3][20:] + b"".join(lines[4:]))
        return path

    with pytest.raises(BadInput, match="line 4 is not UTF-8 text"):
        PiAdapter().parse(damaged(b"\xff\xfe\xc3"))
    notes = PiAdapter().parse(damaged(b"\x00")).parse_notes
    assert len(notes) == 1 and notes[0].startswith("line 4 skipped")
