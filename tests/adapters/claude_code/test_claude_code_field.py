"""Claude Code's files of the field corpus (tests/support/field.py): rerun at their own version and continued
through the gate, against the scripted upstream and bare `mock`; a compacted session cut
before and after its compaction."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replayer.adapters import by_name
from tests.conftest import replayer
from tests.support import field
from tests.support.field import FIELD

test_a_field_trajectory_runs_at_its_own_version, test_a_field_continuation_ends_when_the_bare_mock_ends_it = (
    field.own_version_tests("claude_code")
)


COMPACTED = "claude_code/erk-2.0.67-compacted.jsonl"  # 73 steps, a compaction, 1 step
SUMMARY = b"This session is being continued from a previous conversation"


def test_a_boundary_before_the_last_compaction_cuts_the_history_there(tmp_path: Path) -> None:
    """Claude Code: the cut drops the compaction and everything after it; the prefix is the history the
    compaction summarized, up to the cut (Codex: tests/adapters/codex/test_codex_refusals.py)."""
    report = orjson.loads(replayer("inspect", str(FIELD / COMPACTED), "--json", check=True).stdout)
    assert [s["before_compaction"] for s in report["steps"]] == [True] * 73 + [False]
    for boundary, summarized in ((5, False), (73, True)):
        out = tmp_path / str(boundary)
        replayer("prepare", str(FIELD / COMPACTED), "-n", str(boundary), "-o", str(out), check=True)
        expected = (out / "expected_prefix.json").read_bytes()
        assert (SUMMARY in expected) == summarized
    steps = orjson.loads((tmp_path / "5" / "result.json").read_bytes())["boundary_call_ids"]
    assert steps == [c["id"] for c in report["steps"][4]["calls"]]
    assert orjson.loads((tmp_path / "5" / "expected_prefix.json").read_bytes())[-1]["role"] == "user"


@pytest.mark.agent
@pytest.mark.docker
def test_the_cli_resumes_the_whole_history_up_to_a_cut_before_the_compaction(tmp_path: Path) -> None:
    """The pinned CLI resumes the rebuilt session cut at step 1 of a compacted one: its first continuation
    request carries that history whole (the gate holds it to the prefix), not the summary. The file's own
    2.0.67 sends its stored tool_use blocks without `caller` (not modelled yet), so the pin runs it."""
    pin = by_name("claude_code").version()
    proc, out, sent = field.continue_field(COMPACTED, 1, "claude_code", ("--agent-version", pin), tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1)
    assert len(sent) == 1, "the gate held the first request to the prefix cut at step 1"
    body = orjson.dumps(sent[0].body)
    assert result["boundary_call_ids"][0].encode() in body and b"<command-args>8511</command-args>" in body
    assert SUMMARY not in body
    steps = field.steps(FIELD / COMPACTED)
    assert not any(c["id"].encode() in body for s in steps[1:] for c in s["calls"])


@pytest.mark.agent
@pytest.mark.docker
def test_the_cli_reruns_an_auto_compaction_and_resumes_the_session_compacted(tmp_path: Path) -> None:
    """The session compacted itself mid-turn after step 73: the CLI reruns steps 1-74 in one run, fed through
    the compaction (tests/adapters/claude_code/test_compaction.py: the manual one), and the continuation from
    74 resumes the rebuilt session compacted: its first request carries the recorded summary and step 74,
    none of the calls it summarized."""
    pin = by_name("claude_code").version()
    options = ("--agent-version", pin, "--allow-degraded")
    proc, out, sent = field.continue_field(COMPACTED, 74, "claude_code", options, tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1)
    steps = field.steps(FIELD / COMPACTED)
    rerun = {d["call_id"] for d in result["divergences"] if d["kind"] == "rerun"}
    assert {c["id"] for c in steps[73]["calls"]} <= rerun, (
        "the step after the compaction was rerun by the CLI"
    )
    body = orjson.dumps(sent[0].body)
    assert SUMMARY in body and steps[73]["calls"][0]["id"].encode() in body
    assert not any(c["id"].encode() in body for s in steps[:73] for c in s["calls"])
