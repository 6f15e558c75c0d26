"""OpenCode `run --format json` logs (issue 35 item 6): a log stores no user prompt, which only a
continuation needs: `inspect` and a rerun take it without --task (a stand-in starts the CLI), a
continuation is refused in one line naming --task; several runs' logs appended in one file are listed
as sessions, `--session` picks one, with or without --task. Real logs (SOURCES.md). No Docker."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.conftest import ROOT, replayer

SANDCASTLE = ROOT / "tests" / "fixtures" / "field" / "opencode" / "sandcastle-run-format-json-stdout.jsonl"
RECORDED = ROOT / "tests" / "fixtures" / "opencode" / "tools" / "events.jsonl"
SANDCASTLE_ID = "ses_19cb8236effe4lu1aSmQyzbeP2"


def _appended(tmp_path: Path) -> Path:
    """Two runs' stdout appended to one file, as `opencode run --format json ... >> runs.jsonl` leaves it
    (the published log lacks its last newline, which the CLI prints)."""
    path = tmp_path / "runs.jsonl"
    path.write_bytes(SANDCASTLE.read_bytes().rstrip(b"\n") + b"\n" + RECORDED.read_bytes())
    return path


def test_a_log_is_inspected_without_task() -> None:
    report = orjson.loads(replayer("inspect", str(SANDCASTLE), "--json", check=True).stdout)
    assert report["session_id"] == SANDCASTLE_ID and len(report["steps"]) == 3
    assert all(c["kind"] == "rerun" for s in report["steps"] for c in s["calls"])
    assert any("continuation needs --task" in n for n in report["parse_notes"])


def test_a_continuation_without_the_prompt_is_refused_naming_task(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = replayer(
        "run",
        str(SANDCASTLE),
        "-n",
        "1",
        "-w",
        str(tmp_path),
        "-o",
        str(out),
        "--continue",
        "--upstream",
        "mock",
    )
    assert proc.returncode == 4, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--task" in lines[0] and not out.exists()


def test_appended_runs_are_listed_as_sessions(tmp_path: Path) -> None:
    path = _appended(tmp_path)
    recorded_id = orjson.loads(RECORDED.read_bytes().splitlines()[0])["sessionID"]
    for task in ([], ["--task", "Fix add() in calc.py."]):
        report = orjson.loads(replayer("inspect", str(path), *task, "--json", check=True).stdout)
        assert [(s["id"], s["steps"]) for s in report["sessions"]] == [(SANDCASTLE_ID, 3), (recorded_id, 6)]
    one = orjson.loads(replayer("inspect", str(path), "--session", recorded_id, "--json", check=True).stdout)
    assert one["session_id"] == recorded_id and len(one["steps"]) == 6
    proc = replayer("run", str(path), "-n", "1", "-w", str(tmp_path), "-o", str(tmp_path / "o"))
    assert proc.returncode == 3 and "pass --session ID" in proc.stderr
