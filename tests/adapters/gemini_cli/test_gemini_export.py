"""Gemini CLI's `/export-session FILE` documents (issue 35 item 6): the session the CLI loads, written as one
document (`JSON.stringify(loadConversationRecord(log) ..., null, 2)`, with `messageCount`,
`firstUserMessage` ... beside the messages). It is read as the session it exports: the same steps, the
same prefix and rebuilt log at every boundary; and it reruns and continues in the sandbox. The export is
made by the pinned bundle's own code from the real CLI's recorded log (tests/recorder_gemini_export.py):
no public export was found."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replayer.adapters.gemini_cli import session
from tests.conftest import GEMINI, replayer

LOG = GEMINI.root / "tools" / "session.jsonl"
EXPORT = GEMINI.root / "export" / "session-export.json"


def test_the_export_holds_the_loaded_session_and_its_summary_fields() -> None:
    doc = orjson.loads(EXPORT.read_bytes())
    assert {"messageCount", "userMessageCount", "firstUserMessage", "hasResumableContent"} <= doc.keys()
    assert doc["messageCount"] == len(doc["messages"]) and EXPORT.read_bytes().startswith(b'{\n  "sessionId"')


def test_the_export_gives_the_steps_of_the_log() -> None:
    exported, logged = session.parse(EXPORT), session.parse(LOG)
    assert exported.steps == logged.steps and len(exported.steps) == 5
    assert (exported.session_id, exported.cwd) == (logged.session_id, logged.cwd)


@pytest.mark.parametrize("after_step", range(6))
def test_prepare_of_the_export_writes_what_the_log_does(after_step: int, tmp_path: Path) -> None:
    outs = []
    for source in (LOG, EXPORT):
        out = tmp_path / source.stem
        replayer("prepare", str(source), "-n", str(after_step), "-o", str(out), check=True)
        outs.append(out)
    assert (outs[0] / "expected_prefix.json").read_bytes() == (outs[1] / "expected_prefix.json").read_bytes()
    native = sorted(p.relative_to(outs[0]) for p in (outs[0] / "native").rglob("*") if p.is_file())
    assert native == sorted(p.relative_to(outs[1]) for p in (outs[1] / "native").rglob("*") if p.is_file())
    for rel in native:
        assert (outs[0] / rel).read_bytes() == (outs[1] / rel).read_bytes(), rel


@pytest.mark.agent
def test_the_export_reruns_and_continues(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["run", str(EXPORT), "-n", "5", "-w", str(GEMINI.root / "tools" / "workspace"), "-o", str(out)]
    proc = replayer(*args, "--continue", "--upstream", "mock", "--json")
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    assert {d["step"] for d in result["divergences"]} == {1, 2, 3, 4, 5}
    assert all(d["status"] in ("exact", "normalized_equal") for d in result["divergences"]), result[
        "divergences"
    ]
    assert result["continuation"]["gate"] == "accepted"
    assert result["continuation"]["agent_status"] == "completed"
