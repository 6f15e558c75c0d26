"""Fuzzing of Gemini CLI's parser: every mutated recording (0.61 logs, the 0.30 document) parses or is
refused with a one-line `BadInput`, never a crash; what a parse accepts also goes through the resume
wire, the chat form and the rebuild. No Docker."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replayer import adapters
from replayer.adapters.gemini_cli import GeminiCliAdapter, session, wire
from replayer.bridges.gemini import to_chat
from replayer.floor.errors import BadInput
from tests.conftest import GEMINI
from tests.fuzzing import FUZZ_SETTINGS, expect_refusal_or_success, mutated_file

FIXTURES = GEMINI.root
FILES = sorted(p for p in FIXTURES.rglob("session.json*"))


def _parse_and_use(path: Path, out: Path) -> None:
    adapter = GeminiCliAdapter()
    traj = adapter.parse(path)
    to_chat(wire.resume_contents(traj.native_as(session.Native).messages))
    last = next((s.index - 1 for s in traj.steps if not s.complete), len(traj.steps))
    if traj.cwd is not None:
        adapter.rebuild(traj, last, {}, out)


@pytest.mark.parametrize("fixture", FILES, ids=lambda p: str(p.relative_to(FIXTURES)))
@FUZZ_SETTINGS
@given(data=st.data())
def test_mutated_file_parses_or_is_refused(fixture: Path, data: st.DataObject, tmp_path: Path) -> None:
    path = tmp_path / fixture.name
    path.write_bytes(data.draw(mutated_file(fixture.read_bytes())))
    expect_refusal_or_success(lambda: _parse_and_use(path, tmp_path / "out"))
    expect_refusal_or_success(lambda: adapters.detect(path))


# the crash shapes the fuzzing found ------------------------------------------------------------------
SESSION = FIXTURES / "shell" / "session.jsonl"


def _refusal(tmp_path: Path, change: Callable[[list[dict[str, Any]]], None]) -> str:
    records = [orjson.loads(line) for line in SESSION.read_bytes().splitlines() if line.strip()]
    change(records)
    path = tmp_path / "session.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    with pytest.raises(BadInput) as caught:
        _parse_and_use(path, tmp_path / "out")
    message = str(caught.value)
    assert "\n" not in message and len(message) < 400, message
    return message


def _last_gemini(records: list[dict[str, Any]]) -> dict[str, Any]:
    return next(r for r in reversed(records) if r.get("type") == "gemini")


def test_a_message_field_of_the_wrong_shape_is_refused_naming_it(tmp_path: Path) -> None:
    """`thoughts: true` crashed the resume wire (a bool is not iterable)."""
    message = _refusal(tmp_path, lambda rs: _last_gemini(rs).update(thoughts=True))
    assert "field thoughts: should be a valid list" in message


def test_a_session_id_the_cli_could_not_have_written_is_refused(tmp_path: Path) -> None:
    """The rebuild names the session file after the id: a path in it would write outside its folder."""
    message = _refusal(tmp_path, lambda rs: rs[0].update(sessionId="../../escape"))
    assert "the session metadata, field sessionId: String should match pattern" in message
