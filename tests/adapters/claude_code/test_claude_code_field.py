"""Claude Code's files of the field corpus (tests/support/field.py): rerun at their own version and continued
through the gate, against the scripted upstream and bare `mock`; a compacted session cut
before and after its compaction."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from replayer.adapters import by_name
from replayer.adapters.claude_code import reminders, wire
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


test_a_field_file_continues_against_the_mock_at_its_own_version = field.mock_run_test("claude_code")

BHAVANA = "claude_code/bhavana-2.1.177-task-nag-tool-reference.jsonl"
LOKAL = "claude_code/lokal-2.1.126-date-change-pat-redacted.jsonl"


def _prefix(name: str, boundary: int, tmp_path: Path, *options: str) -> list[dict]:
    out = tmp_path / "out"
    args = ("prepare", str(FIELD / name), "-n", str(boundary), "-o", str(out), "--allow-degraded", *options)
    replayer(*args, check=True)
    return orjson.loads((out / "expected_prefix.json").read_bytes())


def _result(prefix: list[dict], call_id: str) -> dict:
    return next(
        b
        for m in prefix
        for b in m["content"]
        if b.get("type") == "tool_result" and b["tool_use_id"] == call_id
    )


def test_a_2_1_177_prefix_is_what_its_resume_sends(tmp_path: Path) -> None:
    """A real 2.1.177 session, as the 2.1.177 CLI resumed it under -p (its continuation was refused at each
    of these before): the task tools are on by default from 2.1.142, so the recorded task nag is merged into
    the tool result before it, without the `NEVER mention` line (gone from 2.1.139); with tool search off
    the ToolSearch result's tool_reference blocks are taken out (left empty: one text); and the results of
    a split message's parallel calls come in the order the resume loads them: those off the leaf's path
    first, by timestamp, then the one on it (not the order of the tool_use blocks)."""
    prefix = _prefix(BHAVANA, 6, tmp_path)
    nagged = _result(prefix, "toolu_bdrk_01KvE1J6fGuSY8zKnvN7ERSc")["content"]
    assert nagged.count(reminders.TASK_NAG) == 1 and reminders.NEVER_MENTION_LINE not in nagged
    searched = _result(prefix, "toolu_bdrk_01LSyCCxhJ32UZ4jbeY1aqp5")["content"]
    assert searched == [{"type": "text", "text": wire.TOOL_REFERENCES_REMOVED}]
    results = [
        b["tool_use_id"][-6:]
        for m in prefix
        for b in m["content"]
        if b.get("type") == "tool_result" and b["tool_use_id"][-6:] in {"M7pjgv", "npAh8j", "Zch8rP"}
    ]
    assert results == ["npAh8j", "M7pjgv", "Zch8rP"]


def test_which_release_renders_which_nag_and_merges_it_inline() -> None:
    """Read in the bundles of 2.1.126 to 2.1.177 (bisected): the `NEVER mention` line up to 2.1.138, the
    task nag under -p from 2.1.142, a system message instead of the merge from 2.1.154 (for a model that
    takes one), the omitted-snippet wording from 2.1.126."""
    todo = {"type": "todo_reminder", "content": []}
    task = {"type": "task_reminder", "content": [], "itemCount": 0}
    assert reminders.NEVER_MENTION_LINE in (reminders.render(todo, "2.1.138") or [""])[0]
    assert reminders.NEVER_MENTION_LINE not in (reminders.render(todo, "2.1.139") or [""])[0]
    assert reminders.render(task, "2.1.141") == [] and reminders.render(task, "2.1.142")
    assert reminders.merged_inline("2.1.153", "claude-opus-4-8")
    assert not reminders.merged_inline("2.1.154", "claude-opus-4-8")
    assert reminders.merged_inline("2.1.177", "claude-opus-4-6")
    edited = {"type": "edited_text_file", "filename": "/w/a", "snippet": ""}
    assert "The diff was omitted" in (reminders.render(edited, "2.1.126") or [""])[0]
    assert "The diff was omitted" not in (reminders.render(edited, "2.1.121") or [""])[0]


def test_a_real_date_change_is_merged_into_the_tool_result_before_it(tmp_path: Path) -> None:
    """A 2.1.126 session that ran past midnight: its `date_change` record, after step 2, is in that step's
    tool result; the files @-mentioned in its first prompt (`file` attachments) and its hook contexts are
    whole `<system-reminder>` blocks the gate takes off, so they are not in the prefix."""
    prefix = _prefix(LOKAL, 3, tmp_path)
    steps = field.steps(FIELD / LOKAL)
    changed = _result(prefix, steps[1]["calls"][0]["id"])["content"]
    assert changed.endswith(reminders.wrapped(reminders.DATE_CHANGED.format("2026-05-02")))
    assert (
        b"[REDACTED_PAT]" in (FIELD / LOKAL).read_bytes() and b"eyJhbGci" not in (FIELD / LOKAL).read_bytes()
    )


def test_2_1_332_merges_for_the_models_before_opus_4_8_and_rewords_the_date_change(tmp_path: Path) -> None:
    """2.1.332 asks for system messages by model capabilities, except for claude-3-* and the models before
    claude-opus-4-8 in its list: the same line as 2.1.154 to 2.1.197 (its recording with claude-sonnet-4-5 merges:
    test_claude_code_versions.py). So the 2.1.126 session's claude-sonnet-4-6, continued by 2.1.332, gets the date
    change merged into the tool result, in 2.1.332's words (read in its bundle; no `-p` run crosses midnight)."""
    assert reminders.merged_inline("2.1.332", "claude-sonnet-4-5-20250929")
    assert not reminders.merged_inline("2.1.332", "claude-opus-4-8") and not reminders.merged_inline(
        "2.1.332", None
    )
    prefix = _prefix(LOKAL, 3, tmp_path, "--agent-version", "2.1.332")
    changed = _result(prefix, field.steps(FIELD / LOKAL)[1]["calls"][0]["id"])["content"]
    assert changed.endswith(reminders.wrapped(reminders.DATE_CHANGED_2_1_332.format("2026-05-02")))


def test_a_nag_after_a_skill_prompt_is_merged_into_the_skill_result(tmp_path: Path) -> None:
    """The CLI moves attachment records up to just after the tool result before them, past the Skill's
    expanded prompt (an isMeta user text) written between: 2.1.177 merged the task nag after step 8 into the
    Skill's result `Launching skill: ...` (its continuation from boundary 81 was refused there before)."""
    prefix = _prefix(BHAVANA, 9, tmp_path)
    launched = _result(prefix, "toolu_bdrk_01Ffg7UacPf2NnykdH2Yxdjf")["content"]
    assert launched.startswith(
        "Launching skill: roast-my-product\n\n<system-reminder>\n" + reminders.TASK_NAG
    )
    message = next(m for m in prefix if any(b.get("content") is launched for b in m["content"]))
    assert message["content"][-1]["text"].startswith("Base directory for this skill:")


POSTHOG = "claude_code/posthog-2.1.112-auto-compacted.jsonl"  # 80 steps, an auto compaction, 19 steps


def test_a_2_1_112_resume_recovers_a_split_call_off_the_leafs_path(tmp_path: Path) -> None:
    """After its compaction, step 97's WebFetch and TaskUpdate were one API message split over two lines,
    the WebFetch result on the leaf's path and the TaskUpdate's on a sibling branch: 2.1.112 sent both calls
    (its continuation from boundary 98 was refused there before: recovery is 2.1.80's, not 2.1.121's)."""
    prefix = _prefix(POSTHOG, 98, tmp_path)
    calls = [
        b["id"] for m in prefix if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"
    ]
    assert {"toolu_01YCbspje1LQ5zoMiExAUZGr", "toolu_01JWKupTYGmEHmdbtTexQRUK"} <= set(calls)
    assert _result(prefix, "toolu_01YCbspje1LQ5zoMiExAUZGr")


SPLIT = "claude_code/entire-2.1.12-split-calls.jsonl"  # steps 2 and 3: one API message's two calls a step
SLICE = (
    "claude_code/entire-2.1.12-slice-lines-1-41.jsonl"  # begins with the result of a call cut off before it
)


def _calls(prefix: list[dict]) -> list[str]:
    return [
        b["id"] for m in prefix if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"
    ]


def test_before_2_1_80_a_resume_leaves_out_a_split_call_whose_result_is_off_the_leafs_path(
    tmp_path: Path,
) -> None:
    """2.1.12 wrote step 2's second Read under its first, each result under its own call: the leaf's path runs
    through the second call's result, so 2.1.12 (no recovery before 2.1.80) sends the second call and its result
    only (its continuation from boundary 4 passes the gate; refused before at the first call); 2.1.121 sends both."""
    first, second = "toolu_012nuPqfEidhQ9wCkrnMsT3w", "toolu_017PQ7JuQt9J2HZNYZcGLUFb"
    old = _prefix(SPLIT, 4, tmp_path / "old")
    assert second in _calls(old) and first not in _calls(old) and _result(old, second)
    assert not any(b.get("tool_use_id") == first for m in old for b in m["content"])
    new = _prefix(SPLIT, 4, tmp_path / "new", "--agent-version", "2.1.121")
    assert {first, second} <= set(_calls(new)) and _result(new, first) and _result(new, second)


def test_a_transcript_that_begins_with_a_result_is_sent_as_each_version_sends_it(tmp_path: Path) -> None:
    """Entire's checkpoint kept a slice of a 2.1.12 session whose root is the result of a call before the slice
    (derived here: its first 41 lines): 2.1.12 sends it as stored (its continuation from boundary 16 of the whole
    slice passes the gate; refused before, the prefix had `(no content)`), 2.1.79 on take it out of the first
    message, which keeps only the CLI's own context block (2.1.121's continuation passes the gate too)."""
    head = orjson.loads((FIELD / SLICE).read_bytes().splitlines()[0])["message"]["content"][0]
    recorded = _prefix(SLICE, 3, tmp_path / "recorded")
    assert recorded[0]["content"] == [head] and recorded[1]["role"] == "assistant"
    removed = _prefix(SLICE, 3, tmp_path / "removed", "--agent-version", "2.1.121")
    assert removed[0] == {"role": "user", "content": []} and removed[1] == recorded[1]


def test_a_queued_task_notification_is_merged_into_the_tool_result_before_it(tmp_path: Path) -> None:
    """2.1.112 sends a background task's notification queued during a turn (a `queued_command` record, 170 in
    this session) in the tool result before it, worded as a system notification (its continuation from
    boundary 14 was refused there before)."""
    prefix = _prefix(POSTHOG, 14, tmp_path)
    notified = _result(prefix, "toolu_01J3hz1ocUyZZ5mpBfmYeHo2")["content"]
    lines = (FIELD / POSTHOG).read_bytes().splitlines()
    queued = next(orjson.loads(x) for x in lines if b'"uuid":"29ec17af' in x.replace(b" ", b""))
    notice = reminders.wrapped(reminders.TASK_NOTIFICATION.format(queued["attachment"]["prompt"]))
    assert notified.startswith("Window: 2026-01-26T22:16:12Z") and notified.endswith("\n\n" + notice)


def test_which_release_words_a_queued_prompt_and_a_selection_how() -> None:
    """Read in the bundles: one wording for every queued prompt up to 2.0.67 and another from 2.1.50; by origin
    from 2.1.79 (a task's notification reworded from 2.1.112, again in 2.1.332). An IDE selection is cut at 2000
    UTF-16 units, as JavaScript's substring cuts it."""
    task = {"type": "queued_command", "prompt": "<task-notification>x</task-notification>"}
    task["commandMode"] = "task-notification"
    words = {
        v: (reminders.render(task, v) or [""])[0]
        for v in ("1.0.108", "2.0.67", "2.1.50", "2.1.79", "2.1.197")
    }
    assert "The user sent the following message:" in words["1.0.108"] and words["1.0.108"] == words["2.0.67"]
    assert "while you were working" in words["2.1.50"]
    assert "A background agent completed a task:" in words["2.1.79"]
    assert "[SYSTEM NOTIFICATION - NOT USER INPUT]" in words["2.1.197"]
    assert reminders.render(task, "1.0.51") is None
    assert (reminders.render(task, "2.1.332") or [""])[0].startswith(
        "<system-reminder>\n" + reminders.NOTIFIED
    )
    assert reminders.render({**task, "origin": {"kind": "peer"}}, "2.1.197") is None
    selected = {"type": "selected_lines_in_ide", "filename": "/w/a", "lineStart": 1, "lineEnd": 2}
    cut = (reminders.render({**selected, "content": "\U0001f600" * 1000 + "a"}, "2.1.112") or [""])[0]
    assert "\U0001f600" * 1000 + "\n... (truncated)\n\nThis may" in cut
    assert reminders.render({**selected, "content": "a" + "\U0001f600" * 1000}, "2.1.112") is None


def test_a_compacted_sessions_file_note_comes_first_and_the_seam_goes_after_its_files(tmp_path: Path) -> None:
    """After 2.1.112's auto compaction, the note on a file too large to keep (`compact_file_reference`) opens
    the first message, before the summary: the CLI moves the attachments up past it. The `file` attachments
    after the note (restored files, not rendered here) end that run, so the newline the CLI adds where the
    summary joins goes on the last of them, which the gate takes off whole, not on the note (the
    continuation from boundary 81 was refused there before)."""
    first = _prefix(POSTHOG, 81, tmp_path)[0]["content"]
    note = reminders.COMPACT_FILE.format("/Users/linhungfan/personal_project/weave/src/analyze.py")
    assert first[0] == {"type": "text", "text": reminders.wrapped(note)}
    assert first[1]["text"].startswith(SUMMARY.decode())


def test_2_1_332_words_a_changed_file_and_a_compacted_files_note_and_keeps_tool_references(
    tmp_path: Path,
) -> None:
    """Re-stamped at 2.1.332 (its renderer table, read): the 2.1.177 session's changed `package.json`
    (`edited_text_file`, before the prompt of step 81) is worded anew, and the 2.1.112 session's note on a file
    too large to keep over its compaction (`compact_file_reference`) opens the first message as before, each
    path through 2.1.332's markup filter (both were unrendered there, so the gate refused the session). 2.1.332
    searches tools in the sandbox: the ToolSearch result keeps its `tool_reference` blocks, with `Tool loaded.`
    after it. The real 2.1.332 CLI resuming the first at boundary 81 sends exactly this prefix (the gate accepts,
    25 s by hand; refused before at the ToolSearch result, then at the changed file)."""
    lines = (FIELD / BHAVANA).read_bytes().splitlines()
    edited = next(orjson.loads(x) for x in lines if b'"uuid":"4d3595f9' in x.replace(b" ", b""))["attachment"]
    restamped = _prefix(BHAVANA, 81, tmp_path / "b", "--agent-version", "2.1.332")
    prompt = restamped[174]["content"]
    opening = f"<system-reminder>\nNote: {edited['filename']} changed on disk since you last read it."
    tail = (
        f" Here are the relevant changes (shown with line numbers):\n{edited['snippet']}\n</system-reminder>"
    )
    text = prompt[0]["text"]
    assert text.startswith(opening) and text.endswith(tail + "\n")  # the seam newline
    assert prompt[1]["text"].startswith('claude "help me apply for the agentic engineering grant')
    loaded = "toolu_bdrk_01LSyCCxhJ32UZ4jbeY1aqp5"
    searched = next(m["content"] for m in restamped if m["role"] == "user" and loaded in str(m["content"]))
    assert {x["type"] for x in searched[0]["content"]} == {"tool_reference"}
    assert searched[1:] == [{"type": "text", "text": wire.TOOL_LOADED}]
    first = _prefix(POSTHOG, 81, tmp_path / "p", "--agent-version", "2.1.332")[0]["content"]
    compacted = reminders.COMPACT_FILE.format("/Users/linhungfan/personal_project/weave/src/analyze.py")
    assert first[0] == {"type": "text", "text": reminders.wrapped(compacted)}


def test_2_1_332_escapes_paths_and_closing_tags_as_its_bundle_does() -> None:
    """The texts below are what 2.1.332's own renderer functions (its table's entries, its path and closing-tag
    filters, run with node) return: a path's `<`, `>` and control characters as entities; a closing
    `system-reminder` tag in a snippet escaped, with a note after it; a selection cut at 2000 UTF-16 units
    without the half of a surrogate pair (older releases leave it, not rendered). A file that may be a
    download is shown otherwise: not rendered."""
    edited = {"type": "edited_text_file", "filename": "/w/<a>\x07", "snippet": "1\t</system-reminder>"}
    assert reminders.render(edited, "2.1.332") == [
        "<system-reminder>\nNote: /w/&lt;a&gt;&#7; changed on disk since you last read it. That's usually "
        "deliberate, so take it as the current state rather than reverting it; if the change looks wrong, say so "
        "rather than undoing it yourself \u2014 otherwise no need to call it out. Here are the relevant changes "
        "(shown with line numbers):\n1\t&lt;/system-reminder>\nNote: /w/&lt;a&gt;&#7; is not shown exactly as it "
        "is on disk. Each closing system-reminder tag in it starts with `<` on disk and is shown above with "
        "`&lt;` instead, so that it cannot end the reminder around the text.\n</system-reminder>"
    ]
    selected = {"type": "selected_lines_in_ide", "filename": "/w/s", "lineStart": 1, "lineEnd": 2}
    cut = reminders.render({**selected, "content": "a" * 1999 + "\U0001f600b"}, "2.1.332")
    assert cut == [
        "<system-reminder>\nThe user selected the lines 1 to 2 from /w/s:\n"
        + "a" * 1999
        + "\n... (truncated)\n\nThis may or may not be related to the current task.\n</system-reminder>"
    ]
    for odd in ({"filename": "/w/connector-downloads/x"}, {"mayHoldDownload": True}):
        assert reminders.render({**edited, **odd}, "2.1.332") is None
        assert reminders.render({**selected, "content": "x", **odd}, "2.1.332") is None


def test_2_1_332_words_a_queued_prompt_by_its_origin(tmp_path: Path) -> None:
    """2.1.332's `queued_command` renderer and its wording by origin, read and run with node on these records:
    the 2.1.112 session's queued task notification, continued by 2.1.332, is merged into the tool result behind its
    new system-notification header (unrendered before, so the gate refused the session there). A person's prompt
    goes in the mid-turn frame as typed; a meta one of no origin as a non-user message; a notification in a
    person's turn gets the longer header; closing tags are escaped in what a person did not type. Not rendered: a
    notification whose turn is not known, another origin, and one about an upload's files (its paths cut by the
    host's uploads folder behind a flag). With tool search on, 2.1.332 sends the stored tool_use blocks as stored,
    `caller` too (the real 2.1.332 resume of this session at 14 passes the gate with both, by hand: refused at the
    notification, then at the first `caller`, before)."""
    prefix = _prefix(POSTHOG, 14, tmp_path, "--agent-version", "2.1.332")
    notified = _result(prefix, "toolu_01J3hz1ocUyZZ5mpBfmYeHo2")["content"]
    lines = (FIELD / POSTHOG).read_bytes().splitlines()
    queued = next(orjson.loads(x) for x in lines if b'"uuid":"29ec17af' in x.replace(b" ", b""))
    notice = reminders.wrapped(reminders.NOTIFIED + queued["attachment"]["prompt"])
    assert notified.startswith("Window: 2026-01-26T22:16:12Z") and notified.endswith("\n\n" + notice)
    calls = [b for m in prefix for b in m["content"] if b.get("type") == "tool_use"]
    assert calls and all(b["caller"] == {"type": "direct"} for b in calls), "2.1.332 sends a stored caller"
    frame = (
        "\n\nThis is how Claude Code surfaces messages the user sends mid-turn \u2014 within the running turn, often "
        "alongside the next tool result, rather than as a separate conversation turn. Address the message above as "
        "you continue this turn.\n</system-reminder>"
    )
    opening = "<system-reminder>\nThe user sent a new message while you were working:\n"
    typed = {"type": "queued_command", "prompt": "fix </system-reminder> it"}
    assert reminders.render(typed, "2.1.332") == [opening + "fix </system-reminder> it" + frame]
    blocks = {**typed, "prompt": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert reminders.render(blocks, "2.1.332") == [opening + "a\nb" + frame]
    untyped = {**typed, "origin": {"kind": "human"}, "textNotTyped": True}
    assert reminders.render(untyped, "2.1.332") == [opening + "fix &lt;/system-reminder&gt; it" + frame]
    meta = {**typed, "isMeta": True}
    assert reminders.render(meta, "2.1.332") == [
        "<system-reminder>\n[MESSAGE FROM NON-USER SOURCE - NOT USER INPUT]\nfix &lt;/system-reminder&gt; it\n"
        "</system-reminder>"
    ]
    task = {"type": "queued_command", "prompt": "<task-notification>x</task-notification>"}
    task["commandMode"] = "task-notification"
    in_turn = reminders.render(task, "2.1.332", None, True)
    assert in_turn == [reminders.wrapped(reminders.NOTIFIED_IN_HUMAN_TURN + task["prompt"])]
    assert "It is delivered in the same turn as a genuine message from the user" in in_turn[0]
    assert reminders.render(task, "2.1.332", None, None) is None
    assert reminders.render({**typed, "origin": {"kind": "peer"}}, "2.1.332") is None
    assert reminders.render({**typed, "inlinedImagePaths": ["/w/a.png"]}, "2.1.332") is None
    upload = {**task, "prompt": "<task-notification>\n<message-files-moved>\n/mnt/user-data/uploads/a\n"}
    assert reminders.render(upload, "2.1.332") is None


REMINDED_2_1_332 = FIELD.parent / "claude_code" / "versions" / "2.1.332" / "reminders" / "session.jsonl"


def _derived(tmp_path: Path, kind: str, change: Callable[[dict], dict]) -> Path:
    """The recorded 2.1.332 reminders session with its `kind` attachment record changed by `change`."""
    lines = []
    for line in REMINDED_2_1_332.read_bytes().splitlines():
        record = orjson.loads(line)
        if record.get("type") == "attachment" and record["attachment"]["type"] == kind:
            record = change(record)
        lines.append(orjson.dumps(record))
    path = tmp_path / "derived.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def _prepared(path: Path, boundary: int, out: Path) -> list[dict]:
    replayer("prepare", str(path), "-n", str(boundary), "-o", str(out), check=True)
    return orjson.loads((out / "expected_prefix.json").read_bytes())


def test_2_1_332_words_a_task_reminder_by_its_status_keeper_and_sends_a_recorded_rendering(
    tmp_path: Path,
) -> None:
    """2.1.332's `task_reminder` renderer (run with node on 8 records: alike) words the nag by the record's
    `statusKeeper`: `app` (the app checks the items off) and `claude` (the app cannot); another keeper or none gets
    the nag as before. Its resume sends a record's own `rendered` text where it fits its schema, else renders anew:
    the recorded reminders session with the nag after step 10 given a keeper (derived) has the keeper's wording in
    step 10's tool result when its rendering is dropped, and the recorded nag when it is kept (before, a keeper was
    not rendered: the gate refused the session there)."""
    items = [{"id": "1", "status": "pending", "subject": "Log"}]
    app = reminders.render({"type": "task_reminder", "content": items, "statusKeeper": "app"}, "2.1.332")
    assert app == [
        "<system-reminder>\nIf new work would benefit from tracking progress, add it with TaskCreate. The app marks these "
        "items in progress and checks them off by itself as the work gets done, so you don't need to call TaskUpdate "
        "to change their status. Use it to rename or delete an item.\n\n\nHere are the existing tasks:\n\n#1. [pending] "
        "Log\n</system-reminder>"
    ]
    other = reminders.render({"type": "task_reminder", "content": [], "statusKeeper": "x"}, "2.1.332")
    assert other == [reminders.wrapped(reminders.TASK_NAG + "\n")]

    def kept_by_claude(record: dict) -> dict:
        return {**record, "attachment": {**record["attachment"], "statusKeeper": "claude"}}

    def unrendered(record: dict) -> dict:
        return {k: v for k, v in kept_by_claude(record).items() if k != "rendered"}

    fresh = _prepared(_derived(tmp_path, "task_reminder", unrendered), 12, tmp_path / "fresh")
    nagged = _result(fresh, "toolu_reminders_10")["content"]
    assert nagged.count(reminders.wrapped(reminders.KEPT_BY["claude"] + "\n")) == 1
    recorded = _prepared(_derived(tmp_path, "task_reminder", kept_by_claude), 12, tmp_path / "recorded")
    nagged = _result(recorded, "toolu_reminders_10")["content"]
    assert nagged.count(reminders.wrapped(reminders.TASK_NAG + "\n")) == 1
    assert reminders.KEPT_BY["claude"] not in nagged


def test_2_1_332_sends_a_download_notice_as_recorded_and_refuses_one_it_would_render_anew() -> None:
    """2.1.332 words a notice on a file that may be a download otherwise (its path through its download filter, the
    text neutralized: `eO`, `A_`, which read the host's downloads and markup rules): not rendered anew. A 2.1.332
    record carries its own rendering, which the CLI sends (derived records: a `rendered` of one text; one that does
    not fit its schema, an extra key, is rendered anew and so refused; a rendering of text blocks is not modelled)."""
    edited = {
        "type": "edited_text_file",
        "filename": "/w/Downloads/a.txt",
        "snippet": "1\tx",
        "mayHoldDownload": True,
    }
    text = "<system-reminder>\nNote: /w/Downloads/(a file that a connector named) changed on disk.\n</system-reminder>"
    assert reminders.render(edited, "2.1.332", {"rendered": [{"content": text}]}) == [text]
    assert reminders.render(edited, "2.1.332", {"rendered": [{"content": text, "x": 1}]}) is None
    assert reminders.render(edited, "2.1.332", {}) is None
    blocks = {"rendered": [{"content": [{"type": "text", "text": text}]}]}
    assert reminders.render(edited, "2.1.332", blocks) is None
    assert reminders.render(edited, "2.1.197", {"rendered": [{"content": text}]}) != [text]
