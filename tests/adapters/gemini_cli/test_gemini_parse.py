"""Gemini CLI session files (0.61 append log, 0.30 one document) parse into steps; the resume wire the
gate expects is the one the recorded CLI sent; malformed files are refused in one line. No Docker.

The inputs are recordings of the real CLIs against the scripted Gemini API (tests/recorder_gemini.py:
0.61.0 wrote tools/ and shell/, 0.30.0 wrote versions/0.30.0/tools/), or variants of them written to a
temporary directory, each test saying how it made them. The ground truth of the resume wire is each
recording's upstream log: the request the CLI sent after `--resume` for the second prompt.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from replayer.adapters.gemini_cli import session, wire
from replayer.adapters.gemini_cli.gate import GeminiResumeGate
from replayer.bridges.difference import first_difference
from replayer.floor.errors import BadInput
from tests.conftest import GEMINI, ROOT

FIXTURES = GEMINI.root
LOG = FIXTURES / "tools" / "session.jsonl"
DOCUMENT = FIXTURES / "versions" / "0.30.0" / "tools" / "session.json"
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"


def _meta(folder: Path) -> dict[str, Any]:
    return dict(orjson.loads((folder / "meta.json").read_bytes()))


def _main_requests(folder: Path) -> list[dict[str, Any]]:
    log = [orjson.loads(line) for line in (folder / "upstream.jsonl").read_bytes().splitlines()]
    return [r["body"] for r in log if r["main_thread"]]


def _script_calls(folder: Path) -> list[list[str]]:
    """The call ids of each model turn the scripted upstream answered, from the next request's contents."""
    last = _main_requests(folder)[-1]["contents"]
    return [
        [p["functionCall"]["id"] for p in c["parts"] if "functionCall" in p]
        for c in last
        if c["role"] == "model" and any("functionCall" in p for p in c["parts"])
    ]


def _prompt_at(messages: list[dict[str, Any]], prompt: str) -> int:
    return next(
        i for i, m in enumerate(messages) if m["type"] == "user" and wire.part_text(m["content"]) == prompt
    )


def test_log_steps_are_the_model_turns_with_their_results() -> None:
    traj = session.parse(LOG)
    outputs = [orjson.loads(line) for line in (FIXTURES / "tools" / "output.jsonl").read_bytes().splitlines()]
    assert traj.session_id == outputs[0]["session_id"] == outputs[1]["session_id"]
    assert traj.cwd == "/testbed"
    assert all(s.complete for s in traj.steps)
    # the CLI stores ids as <tool>__<id> and sends the id alone: the batches are the scripted turns
    sent = [[c.id.split("__", 1)[1] for c in s.calls] for s in traj.steps]
    assert sent == _script_calls(FIXTURES / "tools")
    by_id = {c.id: c for s in traj.steps for c in s.calls}
    missing = by_id["read_file__call_tools_04"].historical
    assert missing is not None and missing.is_error and "File not found" in str(missing.content)
    shell = by_id["run_shell_command__call_tools_02"].historical
    assert shell is not None and not shell.is_error and "Exit Code: 3" in str(shell.content)


def test_document_steps_are_one_prompt_each() -> None:
    """0.30 stores a prompt's tool turns merged into one gemini message: one step a prompt."""
    traj = session.parse(DOCUMENT)
    assert traj.cwd == "/testbed"
    assert [len(s.calls) for s in traj.steps] == [5, 2]
    flat = [c.id for s in traj.steps for c in s.calls]
    assert flat == [i for turn in _script_calls(DOCUMENT.parent) for i in turn]


def test_a_published_session_with_notices_and_a_cancelled_call_reads_as_the_cli_resumes_it() -> None:
    """A real 0.34-era session (tests/fixtures/field): it starts with an `error` notice, its two prompts
    begin with `/`, `info` notices follow them, and a subagent call was cancelled (`response.error`)."""
    path = ROOT / "tests" / "fixtures" / "field" / "gemini_cli" / "aim-session-2026-03-18T01-58-b26e4930.json"
    traj = session.parse(path)
    assert traj.cwd == "/home/kingb/aim" and [len(s.calls) for s in traj.steps] == [6, 2]
    cancelled = traj.steps[1].calls[1].historical
    assert cancelled is not None and cancelled.is_error and "Operation cancelled" in str(cancelled.content)
    for rules in (wire.LATEST, wire.DOCUMENT):
        sent = wire.resume_contents(traj.native_as(session.Native).messages, rules)
        texts = [wire.part_text(c["parts"]) for c in sent]
        assert sent[0]["role"] == "model", "the notices and the /-prompts are not sent"
        assert not any("Request cancelled" in t or t.startswith("/A.I.M.") for t in texts)


def test_detect_takes_both_forms_and_nothing_else() -> None:
    from replayer import adapters

    assert adapters.adapter_class("gemini_cli").detect(adapters.read_head(LOG))
    assert adapters.adapter_class("gemini_cli").detect(adapters.read_head(DOCUMENT))
    assert not adapters.adapter_class("gemini_cli").detect(
        adapters.read_head(FIXTURES / "tools" / "output.jsonl")
    )
    assert not adapters.adapter_class("gemini_cli").detect(
        adapters.read_head(FIXTURES / "tools" / "upstream.jsonl")
    )


@pytest.mark.parametrize("folder", [FIXTURES / "tools", DOCUMENT.parent], ids=["0.61.0", "0.30.0"])
def test_resume_wire_is_what_the_cli_sent(folder: Path) -> None:
    """The request after `--resume` (second prompt): its contents, without the fresh session context, are
    `resume_contents` of the messages before that prompt (as a document release resumes, for 0.30.0),
    then the prompt."""
    meta = _meta(folder)
    path = folder / ("session.jsonl" if (folder / "session.jsonl").exists() else "session.json")
    messages = session.parse(path).native_as(session.Native).messages
    prompt = meta["prompts"][1]
    cut = _prompt_at(messages, prompt)
    resumed = next(
        body
        for body in _main_requests(folder)
        if any(p.get("text") == prompt for c in body["contents"] for p in c["parts"])
    )
    sent, context = wire.without_context(resumed["contents"])
    assert context is not None
    expected = wire.resume_contents(messages[:cut], wire.DOCUMENT if path.suffix == ".json" else wire.LATEST)
    assert first_difference([*expected, {"role": "user", "parts": [{"text": prompt}]}], sent) is None


def test_live_log_and_resumed_log_resume_alike() -> None:
    """The file as the first run left it (calls in toolCalls) and as the resume re-set it (calls in the
    content, `_response` messages) give the same wire."""
    lines = LOG.read_bytes().splitlines(keepends=True)
    second = [i for i, line in enumerate(lines) if session.is_metadata(orjson.loads(line))][1]
    live = session.load(b"".join(lines[:second]), LOG)
    final = session.parse(LOG).native_as(session.Native).messages
    cut = _prompt_at(final, _meta(FIXTURES / "tools")["prompts"][1])
    assert first_difference(wire.resume_contents(live.messages), wire.resume_contents(final[:cut])) is None


def test_gate_passes_the_recorded_resume_and_refuses_a_changed_observation() -> None:
    folder = FIXTURES / "tools"
    messages = session.parse(LOG).native_as(session.Native).messages
    prompt = _meta(folder)["prompts"][1]
    cut = _prompt_at(messages, prompt)
    bodies = [
        b
        for b in _main_requests(folder)
        if any(p.get("text") == prompt for c in b["contents"] for p in c["parts"])
    ]
    gate = GeminiResumeGate(wire.resume_contents(messages[:cut]), prompt)
    assert gate.route("POST", "/v1beta/models/m:generateContent", {}).kind == "side"
    assert [gate.route("POST", STREAM, b).kind for b in bodies] == ["main"] * len(bodies)
    assert gate.notes and "session context" in gate.notes[0]

    changed = orjson.loads(orjson.dumps(bodies[0]))
    response = next(p for c in changed["contents"] for p in c["parts"] if "functionResponse" in p)
    response["functionResponse"]["response"] = {"output": "something else"}
    fresh = GeminiResumeGate(wire.resume_contents(messages[:cut]), prompt)
    decision = fresh.route("POST", STREAM, changed)
    assert decision.kind == "refuse" and decision.mismatch is not None
    assert "functionResponse" in decision.mismatch.path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "is empty"),
        (b'{"sessionId":"s","projectHash":"h","kind":"main"}\nnot json\n', "line 2 is not JSON"),
        (
            b'{"sessionId":"s","projectHash":"h"}\n{"type":"user"}\n',
            "line 2 is not a Gemini CLI session record",
        ),
        (b'{"sessionId":"s","projectHash":"h"}\n{"id":"m","content":"x"}\n', "without a type"),
        (b'{"messages":[]}', "no sessionId and projectHash"),
        (
            b'{"sessionId":"s","projectHash":"h"}\n{"id":"m","type":"gemini","toolCalls":[{"id":"c","name":"x","args":[]}]}\n',
            "field toolCalls[0].args: should be a valid dictionary",
        ),
    ],
)
def test_malformed_files_are_refused_in_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "session.jsonl"
    path.write_bytes(content)
    with pytest.raises(BadInput) as info:
        session.parse(path)
    assert message in str(info.value) and "\n" not in str(info.value)
