"""A subagent's own transcript, held next to its parent (issue 35 item 2): detected, inspected with the
parent it belongs to, its calls rerun as any others, and a continuation refused before anything starts,
in one line naming the parent session. Real files (tests/fixtures/field/SOURCES.md). No Docker."""

from __future__ import annotations

from pathlib import Path

import orjson

from replayer.adapters.claude_code import session as claude_session
from replayer.adapters.gemini_cli import session as gemini_session
from tests.conftest import ROOT, replayer

FIELD = ROOT / "tests" / "fixtures" / "field"
PARENT_ID = "4d5611e5-241a-462a-8d15-5122611a9569"
SPOTTER = FIELD / "claude_code" / "spotter-2.1.39"
PARENT = SPOTTER / f"{PARENT_ID}.jsonl"
SUBAGENT = SPOTTER / PARENT_ID / "subagents" / "agent-a2898e3.jsonl"
GEMINI_PARENT = FIELD / "gemini_cli" / "aim-0.34.0-session-2026-03-18T01-56-3afe7bdc.json"
GEMINI_SUBAGENT = FIELD / "gemini_cli" / "aim-0.34.0-subagent-session-2026-03-18T01-57-3afe7bdc.json"


def test_a_claude_code_subagent_file_names_its_parent_and_call() -> None:
    traj = claude_session.parse(SUBAGENT)
    of = traj.subagent_of
    assert of is not None and of.agent_id == "a2898e3" and of.parent_session_id == PARENT_ID
    assert of.parent_file == str(PARENT)
    # the parent's Task call whose agent_progress records and result name agent a2898e3
    assert of.parent_call == "toolu_017pLRuPHYTX5t99EnLyV53m"
    assert claude_session.parse(PARENT).subagent_of is None


def test_a_subagent_thread_finds_its_split_messages_and_results() -> None:
    """Every record is a sidechain's: the file's own thread, whose parallel calls (one API message split
    over several lines) and their results are one complete step each, as in a main session."""
    traj = claude_session.parse(SUBAGENT)
    assert len(traj.steps) == 11 and all(s.complete for s in traj.steps)
    lines = [orjson.loads(line) for line in SUBAGENT.read_bytes().splitlines()]
    uses = [
        b["id"]
        for r in lines
        if r["type"] == "assistant"
        for b in r["message"]["content"]
        if b.get("type") == "tool_use"
    ]
    assert [c.id for s in traj.steps for c in s.calls] == uses
    assert any(len(s.calls) > 1 for s in traj.steps)


def test_the_rebuilt_prefix_lies_where_the_cli_keeps_a_subagent(tmp_path: Path) -> None:
    traj = claude_session.parse(SUBAGENT)
    items = claude_session.prefix_items(traj, 2)
    path = claude_session.write_prefix(traj, items, tmp_path)
    project = claude_session.project_dir_name(traj.cwd or "/")
    assert path == tmp_path / ".claude" / "projects" / project / PARENT_ID / "subagents" / SUBAGENT.name
    written = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert all(r.get("isSidechain") for r in written if r["type"] in ("user", "assistant"))


def test_inspect_shows_the_parent(tmp_path: Path) -> None:
    report = orjson.loads(replayer("inspect", str(SUBAGENT), "--json", check=True).stdout)
    assert report["subagent_of"]["parent_session_id"] == PARENT_ID
    assert report["subagent_of"]["agent_id"] == "a2898e3" and len(report["steps"]) == 11
    text = replayer("inspect", str(SUBAGENT), check=True).stdout
    assert f"subagent a2898e3 of session {PARENT_ID}" in " ".join(text.split())


def test_a_subagent_alone_still_names_its_parent_session(tmp_path: Path) -> None:
    alone = tmp_path / SUBAGENT.name
    alone.write_bytes(SUBAGENT.read_bytes())
    of = claude_session.parse(alone).subagent_of
    assert of is not None and of.parent_session_id == PARENT_ID and of.parent_file is None


def test_a_linked_parent_is_not_followed(tmp_path: Path) -> None:
    folder = tmp_path / PARENT_ID / "subagents"
    folder.mkdir(parents=True)
    (folder / SUBAGENT.name).write_bytes(SUBAGENT.read_bytes())
    (tmp_path / f"{PARENT_ID}.jsonl").symlink_to(PARENT)
    of = claude_session.parse(folder / SUBAGENT.name).subagent_of
    assert of is not None and of.parent_file is None and of.parent_call is None


def test_a_continuation_of_a_subagent_is_refused_naming_the_parent(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = replayer(
        "run",
        str(SUBAGENT),
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
    assert len(lines) == 1 and PARENT_ID in lines[0] and str(PARENT) in lines[0]
    assert "subagent a2898e3" in lines[0] and "Traceback" not in proc.stderr
    assert not out.exists()


def test_a_gemini_subagent_session_names_its_main_session() -> None:
    traj = gemini_session.parse(GEMINI_SUBAGENT)
    of = traj.subagent_of
    assert of is not None and of.parent_session_id == "3afe7bdc-b33d-4f82-a1e5-5e2a4deaac9d"
    assert of.parent_file == str(GEMINI_PARENT)
    # the main session's cli_help call whose question the subagent's prompt quotes
    assert of.parent_call == "cli_help_1773799053892_0" and of.parent_step == 2
    assert traj.steps == [] and any("not its own tool calls" in n for n in traj.parse_notes)
    assert gemini_session.parse(GEMINI_PARENT).subagent_of is None


def test_a_gemini_subagent_continuation_is_refused(tmp_path: Path) -> None:
    proc = replayer(
        "run",
        str(GEMINI_SUBAGENT),
        "-n",
        "0",
        "--cwd",
        "/home/kingb/aim",
        "-w",
        str(tmp_path),
        "-o",
        str(tmp_path / "out"),
        "--continue",
        "--upstream",
        "mock",
    )
    assert proc.returncode == 4, proc.stderr
    assert (
        "3afe7bdc-b33d-4f82-a1e5-5e2a4deaac9d" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    )


def test_a_subagent_file_beside_its_parent_finds_it(tmp_path: Path) -> None:
    """Before 2.1 the CLI wrote `agent-<id>.jsonl` beside `<session>.jsonl`, not under `<session>/subagents/`."""
    (tmp_path / SUBAGENT.name).write_bytes(SUBAGENT.read_bytes())
    (tmp_path / PARENT.name).write_bytes(PARENT.read_bytes())
    of = claude_session.parse(tmp_path / SUBAGENT.name).subagent_of
    assert of is not None and of.parent_file == str(tmp_path / PARENT.name)
    assert of.parent_call == "toolu_017pLRuPHYTX5t99EnLyV53m"


def test_inspect_of_a_session_lists_its_subagent_files() -> None:
    """The parent's inspect names each subagent's own transcript where the CLI keeps it (2.1: in
    `<sessionId>/subagents/`) and the call that started it; a subagent's file lists none."""
    report = orjson.loads(replayer("inspect", str(PARENT), "--json", check=True).stdout)
    assert report["subagents"] == [
        {
            "file": str(SUBAGENT),
            "agent_id": "a2898e3",
            "parent_call": "toolu_017pLRuPHYTX5t99EnLyV53m",
            "parent_step": None,  # the call lies before a compaction whose summarized chain is not published
        }
    ]
    text = replayer("inspect", str(PARENT), check=True).stdout
    assert f"subagent a2898e3: {SUBAGENT} (started by call toolu_017pLRuPHYTX5t99EnLyV53m)" in text
    assert claude_session.parse(SUBAGENT).subagents == []


def test_subagent_files_are_listed_without_following_links(tmp_path: Path) -> None:
    """The older layout keeps every session's agent files beside the sessions: only those the session names
    are its own. A link, or a folder so named, is no subagent file; a linked `subagents` folder is not
    entered."""
    parent = tmp_path / PARENT.name
    parent.write_bytes(PARENT.read_bytes())
    (tmp_path / "agent-a2898e3.jsonl").write_bytes(SUBAGENT.read_bytes())
    (tmp_path / "agent-b1111111.jsonl").write_bytes(b"")  # another session's
    assert [(s.agent_id, s.file) for s in claude_session.parse(parent).subagents] == [
        ("a2898e3", str(tmp_path / "agent-a2898e3.jsonl"))
    ]
    (tmp_path / "agent-a2898e3.jsonl").unlink()
    (tmp_path / "agent-a2898e3.jsonl").symlink_to(SUBAGENT)
    assert claude_session.parse(parent).subagents == []
    folder = tmp_path / PARENT_ID / "subagents"
    folder.mkdir(parents=True)
    (folder / "agent-c2222222.jsonl").symlink_to(SUBAGENT)
    (folder / "agent-d3333333.jsonl").mkdir()
    (folder / "agent-e4444444.jsonl").write_bytes(b"")
    assert [s.agent_id for s in claude_session.parse(parent).subagents] == ["e4444444"]
    (tmp_path / PARENT_ID).rename(tmp_path / "elsewhere")
    (tmp_path / PARENT_ID).symlink_to(tmp_path / "elsewhere")
    assert claude_session.parse(parent).subagents == []
