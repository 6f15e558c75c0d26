"""Claude Code past its compaction: sessions the real CLI compacted, recorded by `python -m tests.recorder_claude_code
--compacted VERSION [--auto]` (a `/compact` between two prompts with 2.1.197 and 1.0.128, an auto compaction
mid-turn with 1.0.128), are rebuilt at every boundary as the CLI sends them after the compaction (its summary,
the segment it kept, the turns after it), rerun through the compaction by the CLI itself, and continue from a
boundary after it through the gate."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from replayer.adapters.claude_code import envelope, session, wire
from replayer.floor.pins import running_version
from replayer.pipeline.engine import load
from tests.conftest import CLAUDE
from tests.support.continuing import continue_run

RECORDED = {
    # steps 1-2 (Bash, Read), the closing text "It says one.", `/compact` (2.1.197 keeps that text verbatim:
    # its `preservedSegment`), then a prompt and steps 3-5 (Read of the file read before, Edit, Bash)
    ("2.1.197", "compacted"): "manual",
    ("1.0.128", "compacted"): "manual",
    # steps 1-2 (Bash, Read), the second answer reporting a full context: the CLI compacts before its next
    # request and goes on with steps 3-4 (Edit, Bash) in the same run
    ("1.0.128", "auto_compacted"): "auto",
}
CASES = sorted(RECORDED)
SUMMARY = "This session is being continued from a previous conversation"


def _fixture(version: str, name: str) -> str:
    return f"compaction/{version}/{name}"


def _requests(case: tuple[str, str]) -> list[list[dict]]:
    """The main-thread requests, without the `<system-reminder>` blocks 1.0.x puts before a prompt (the gate
    compares without them too) and the user messages they alone make (1.0.128's auto compaction sends the
    files it read as such, before the summary, in the run it compacted; the session stores none of them)."""
    out = []
    for request in CLAUDE.requests(_fixture(*case)):
        messages = []
        for m in wire.normalize_request(request["body"]["messages"]):
            if m["role"] == "user":
                m = {**m, "content": [b for b in m["content"] if not envelope.is_system_reminder(b)]}
            if m["content"]:
                messages.append(m)
        out.append(messages)
    return out


def _sent_after(case: tuple[str, str], boundary: int, call_ids: list[str]) -> list[dict]:
    """The request the CLI sent right after step `boundary`'s results; for step 2, the last before the
    compaction, the first request after it (the one right after the results asked for the summary)."""
    requests = _requests(case)
    if boundary == 0:
        return requests[0]
    if boundary == 2:
        return next(m for m in requests if m[0]["content"][0].get("text", "").startswith(SUMMARY))
    return next(
        m
        for m in requests
        if [b.get("tool_use_id") for b in m[-1]["content"] if b.get("type") == "tool_result"] == call_ids
    )


@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_the_prefix_at_every_boundary_is_what_the_cli_sent_after_the_compaction(
    case: tuple[str, str], tmp_path: Path
) -> None:
    version = case[0]
    adapter, traj = load(CLAUDE.fixture(_fixture(*case)) / "session.jsonl")
    assert [s.before_compaction for s in traj.steps[:3]] == [True, True, False]
    note = next(n for n in traj.parse_notes if n.startswith(f"compacted after step 2 ({RECORDED[case]})"))
    assert ("1 record(s) the compaction kept verbatim" in note) == (version == "2.1.197")
    with running_version("claude_code", version):
        for boundary in range(len(traj.steps) + 1):
            rebuild = adapter.rebuild(traj, boundary, {}, tmp_path / str(boundary))
            calls = [c.id for c in traj.steps[boundary - 1].calls] if boundary else []
            assert rebuild.expected_prefix == _sent_after(case, boundary, calls), boundary
        after = adapter.rebuild(traj, 3, {}, tmp_path / "after").expected_prefix
    kept = after[1] == {"role": "assistant", "content": [{"type": "text", "text": "It says one."}]}
    assert kept == (version == "2.1.197"), "the segment 2.1.197 kept follows the summary"


@pytest.mark.agent
@pytest.mark.docker
@pytest.mark.parametrize("case", CASES, ids="-".join)
def test_a_compacted_session_reruns_past_its_compaction_and_continues(
    case: tuple[str, str], tmp_path: Path
) -> None:
    """The CLI of the recorded version is driven through the compaction (not fed: the history it summarized
    goes on uncompacted), every call reruns exact, the Read after the compaction included; the continuation
    from step 3 resumes the rebuilt session, which keeps the recorded summary, and its first request is what
    the CLI sends after a compaction."""
    version, name = case
    workspace = tmp_path / "ws"
    shutil.copytree(CLAUDE.fixture(_fixture(*case)) / "workspace", workspace)
    code, result, log, err = continue_run(_fixture(*case), 3, tmp_path / "out", workspace)
    assert code == 0, err
    assert result["version"]["reruns"] == f"claude_code {version}, its own code"
    assert [(d["call_id"], d["status"]) for d in result["divergences"]] == [
        (f"toolu_{name}_0{n}", "exact") for n in range(1, 4)
    ]
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1)
    main = [r for r in log if r.main_thread]
    body = orjson.dumps(main[0].body)
    assert SUMMARY.encode() in body and (b"It says one." in body) == (version == "2.1.197")
    assert f"toolu_{name}_03".encode() in body
    summarized = [f"toolu_{name}_0{n}".encode() for n in (1, 2)]
    assert not any(call in body for call in summarized), "the calls the compaction summarized"


AUTO = (
    Path(__file__).resolve().parents[2] / "fixtures" / "field" / "claude_code" / "erk-2.0.67-compacted.jsonl"
)
"""A real 2.0.67 session compacted automatically, mid-turn, after step 73 (tests/fixtures/field/SOURCES.md)."""


def test_the_cli_is_fed_through_the_compaction_in_the_run_it_fell_in() -> None:
    """An auto compaction (mid-turn) goes on in the same run: the step after it is fed to the CLI that ran
    the step before it, not started with the summary as its prompt; after a manual one, the prompt after
    `/compact` starts the next run (not the summary, the `/compact` command or its output)."""
    from replayer.adapters.claude_code import rerun

    def prompts(path: Path) -> dict[int, str | None]:
        _, traj = load(path)
        items, spans = rerun.driven_history(traj.native_as(session.Native))
        return {step: rerun._prompt_text(items[at]) for step, at in rerun.run_prompts(items, spans).items()}

    field = prompts(AUTO)
    assert len(field) == 74 and field[74] == field[73]
    assert not any(SUMMARY in (text or "") for text in field.values())
    auto = prompts(CLAUDE.fixture(_fixture("1.0.128", "auto_compacted")) / "session.jsonl")
    assert auto == dict.fromkeys(range(1, 5), "Change one to two in a.txt.")
    manual = prompts(CLAUDE.fixture(_fixture("2.1.197", "compacted")) / "session.jsonl")
    assert manual == {
        1: "Show a.txt.",
        2: "Show a.txt.",
        **dict.fromkeys((3, 4, 5), "Now change one to two in a.txt."),
    }
