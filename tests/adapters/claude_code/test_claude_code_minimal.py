"""A minimal Claude Code session, whose lines name no sessionId and no cwd (the real `claude --resume`
loads one): `inspect` and `prepare` read it, `run` refuses it in one line for want of a cwd. No Docker.

The minimal files are built here from the recorded `single` session (tests/fixtures/claude_code/single/,
written by the pinned CLI) by deleting the `sessionId` and `cwd` fields from every line; nothing else
changes, so the prefix on the wire must be the recording's.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson

from replayer.adapters.claude_code import session
from tests.conftest import CLAUDE, replayer

RECORDED = CLAUDE.fixture("single") / "session.jsonl"
RECORDED_ID = "df04a3bb-08cf-50e0-8e89-ad8ecf7e8717"
"""The recording's sessionId, which is also the name Claude Code gave its file."""


def _stripped(path: Path) -> Path:
    """The recording without `sessionId` and `cwd` on any line."""
    lines = []
    for line in RECORDED.read_bytes().splitlines():
        record = orjson.loads(line)
        record.pop("sessionId", None)
        record.pop("cwd", None)
        lines.append(orjson.dumps(record))
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _inspect(path: Path) -> dict:
    return orjson.loads(replayer("inspect", str(path), "--json", check=True).stdout)


def test_the_session_id_is_the_file_name_when_it_is_one(tmp_path: Path) -> None:
    path = _stripped(tmp_path / f"{RECORDED_ID}.jsonl")
    report = _inspect(path)
    recorded = _inspect(RECORDED)
    assert (report["session_id"], report["cwd"]) == (RECORDED_ID, None)
    assert report["steps"] == recorded["steps"]
    assert report["parse_notes"] == [
        f"no record names a sessionId: the session id is the file name's, {RECORDED_ID}"
    ]
    assert recorded["parse_notes"] == []


def test_otherwise_the_session_id_is_derived_from_the_content(tmp_path: Path) -> None:
    path = _stripped(tmp_path / "minimal.jsonl")
    traj = session.parse(path)
    assert traj.session_id == str(uuid.uuid5(uuid.NAMESPACE_OID, traj.source_sha256))
    assert session.UUID.fullmatch(traj.session_id), "claude --resume takes only a UUID"
    again = _stripped(tmp_path / "again.jsonl")
    assert session.parse(again).session_id == traj.session_id, "the same content, the same id"
    assert "derived from the file's content" in traj.parse_notes[0]
    assert _inspect(path)["parse_notes"] == traj.parse_notes


def test_prepare_rebuilds_it_with_the_recorded_prefix(tmp_path: Path) -> None:
    path = _stripped(tmp_path / "minimal.jsonl")
    traj = session.parse(path)
    out, recorded_out = tmp_path / "out", tmp_path / "recorded"
    replayer("prepare", str(path), "-n", "2", "-o", str(out), check=True)
    replayer("prepare", str(RECORDED), "-n", "2", "-o", str(recorded_out), check=True)
    assert (out / "expected_prefix.json").read_bytes() == (recorded_out / "expected_prefix.json").read_bytes()
    result = orjson.loads((out / "result.json").read_bytes())
    assert (result["session_id"], result["cwd"]) == (traj.session_id, None)
    assert result["parse_notes"] == traj.parse_notes
    # no cwd: the project directory of "/"; the records stay as read, the last-prompt names the id
    assert result["native_files"] == [f"native/home/.claude/projects/-/{traj.session_id}.jsonl"]
    rebuilt = [orjson.loads(line) for line in (out / result["native_files"][0]).read_bytes().splitlines()]
    assert rebuilt[-1]["type"] == "last-prompt" and rebuilt[-1]["sessionId"] == traj.session_id
    assert not any("sessionId" in r or "cwd" in r for r in rebuilt[:-1])


def test_run_refuses_it_in_one_line_for_want_of_a_cwd(tmp_path: Path) -> None:
    path = _stripped(tmp_path / f"{RECORDED_ID}.jsonl")
    out = tmp_path / "out"
    workspace = CLAUDE.fixture("single") / "workspace"
    proc = replayer("run", str(path), "-n", "2", "-w", str(workspace), "-o", str(out))
    assert proc.returncode == 4, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "replayer: plan_refused: the trajectory records no working directory, and its calls name "
        "'/testbed/hello.py', which a default directory would not hold: pass --cwd DIR, the directory it ran in"
    ]
    assert not out.exists()
