"""A Claude Code subagent's own transcript (`agent-*.jsonl`) reruns as any session (issue 35 item 2): the
driven CLI starts from the subagent's prompt, executes the subagent's calls with its own tools, and the
rebuilt prefix lies where the CLI keeps a subagent's file. The real file of marot/spotter (SOURCES.md),
rerun by the pinned CLI (its Read renders lines as that version does)."""

from __future__ import annotations

import re
from pathlib import Path

import orjson
import pytest

from replayer.adapters.claude_code import session
from tests.conftest import ROOT, replayer

pytestmark = [pytest.mark.docker, pytest.mark.agent]

PARENT_ID = "4d5611e5-241a-462a-8d15-5122611a9569"
SUBAGENT = (
    ROOT / "tests/fixtures/field/claude_code/spotter-2.1.39" / PARENT_ID / "subagents" / "agent-a2898e3.jsonl"
)
FIRST_READ = "lib/spotter_web/live/session_live.ex"


def _workspace(tmp_path: Path) -> Path:
    """The file the subagent's first call reads, with the lines its recorded observation shows."""
    traj = session.parse(SUBAGENT)
    shown = traj.steps[0].calls[0].historical
    assert shown is not None and isinstance(shown.content, str)
    text = "".join(re.sub(r"^ *\d+→", "", line, count=1) + "\n" for line in shown.content.splitlines())
    path = tmp_path / "ws" / FIRST_READ
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return tmp_path / "ws"


def test_a_subagent_transcript_reruns_by_the_cli(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["run", str(SUBAGENT), "-n", "2", "-w", str(_workspace(tmp_path)), "-o", str(out)]
    replayer(*args, "--agent-version", "2.1.197", "--json", check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    calls = [c.id for s in session.parse(SUBAGENT).steps[:2] for c in s.calls]
    assert [d["call_id"] for d in result["divergences"]] == calls
    first = result["divergences"][0]
    assert first["fresh_excerpt"].startswith("1\tdefmodule SpotterWeb.SessionLive do\n")
    rebuilt = [Path(p) for p in result["native_files"]]
    assert any(p.parts[-3:] == (PARENT_ID, "subagents", SUBAGENT.name) for p in rebuilt)
