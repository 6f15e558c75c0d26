"""Gemini CLI rebuild and continuation logic without Docker: the rebuilt log resumes to the expected
prefix, the gate expects the CLI's closing turn after a tool batch and strips it with the nonce, the
continued log loses the nonce, shell process ids normalize, and the tool definitions export as chat
functions.

The inputs are the recordings of the real CLI 0.61.0 (tests/recorder_gemini.py: tools/ and shell/) and
what the adapter rebuilds from them in a temporary directory.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters import recorded_tools
from replayer.adapters.base import Ended, Launch
from replayer.adapters.gemini_cli import GeminiCliAdapter, boundary, session, wire
from replayer.adapters.gemini_cli.gate import GeminiResumeGate
from replayer.bridges.scripted import TextBlock, ToolUseBlock
from replayer.floor.divergence import divergence_of
from replayer.floor.pins import running_version
from replayer.floor.trajectory import Observation, Trajectory
from tests.conftest import GEMINI, ROOT

FIXTURES = GEMINI.root
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
CONTEXT = {"text": "<session_context>\nToday is a day.\n</session_context>"}


def _historical(traj: Trajectory) -> dict[str, Observation]:
    return {c.id: c.historical for s in traj.steps for c in s.calls if c.historical is not None}


def _request(contents: list[dict[str, Any]]) -> dict[str, Any]:
    """A main request as the CLI sends it: the fresh session context first in the first user turn."""
    sent = copy.deepcopy(contents)
    sent[0]["parts"].insert(0, CONTEXT)
    return {"contents": sent, "tools": []}


def test_the_rebuilt_log_resumes_to_the_expected_prefix(tmp_path: Path) -> None:
    traj = session.parse(FIXTURES / "tools" / "session.jsonl")
    rebuild = GeminiCliAdapter().rebuild(traj, 1, _historical(traj), tmp_path)
    rebuilt = session.parse(rebuild.native_files[0])
    assert rebuilt.session_id == traj.session_id and rebuilt.cwd == traj.cwd
    assert wire.resume_contents(rebuilt.native_as(session.Native).messages) == rebuild.expected_prefix
    assert [len(s.calls) for s in rebuilt.steps] == [len(traj.steps[0].calls)]
    last = rebuild.expected_prefix[-1]
    assert last["role"] == "user" and all("functionResponse" in p for p in last["parts"])


def test_the_gate_expects_the_closing_turn_after_a_tool_batch_and_strips_it_with_the_nonce() -> None:
    traj = session.parse(FIXTURES / "tools" / "session.jsonl")
    messages = traj.native_as(session.Native).messages
    prefix = wire.resume_contents(messages[: boundary(traj.native_as(session.Native), traj, 1)])
    assert prefix[-1]["role"] == "user", "the prefix ends with the first batch's responses"
    nonce = {"role": "user", "parts": [{"text": "replayer-nonce-1"}]}
    closing = {"role": "model", "parts": [{"text": wire.INTERRUPTED}]}
    reply = {"role": "model", "parts": [{"text": "Done."}]}

    without = GeminiResumeGate(prefix, "replayer-nonce-1", strip_prompt=True)
    refused = without.route("POST", STREAM, _request([*prefix, nonce]))
    assert refused.kind == "refuse" and refused.mismatch is not None
    assert refused.mismatch.path.startswith(f"contents[{len(prefix)}]")

    gate = GeminiResumeGate(prefix, "replayer-nonce-1", strip_prompt=True)
    first = gate.route("POST", STREAM, _request([*prefix, closing, nonce]))
    assert first.kind == "main" and first.body is not None
    assert first.body["contents"] == _request(prefix)["contents"], "the model continues from the responses"
    later = gate.route("POST", STREAM, _request([*prefix, closing, nonce, reply, nonce]))
    assert later.kind == "main" and later.body is not None
    assert later.body["contents"] == _request([*prefix, reply, nonce])["contents"]

    kept = GeminiResumeGate(prefix, "Go on.")
    asked = kept.route(
        "POST", STREAM, _request([*prefix, closing, {"role": "user", "parts": [{"text": "Go on."}]}])
    )
    assert asked.kind == "main" and asked.body is None, "a boundary prompt goes as the CLI sends it"


def test_no_closing_turn_after_a_final_answer() -> None:
    messages = session.parse(FIXTURES / "tools" / "session.jsonl").native_as(session.Native).messages
    ends = [i for i, m in enumerate(messages) if m["type"] == "gemini" and not session.calls_of(m)]
    prefix = wire.resume_contents(messages[: ends[0] + 1])
    assert prefix[-1]["role"] == "model" and wire.closing_turns(prefix) == []


def test_the_continued_log_loses_the_nonce_and_keeps_the_raw_one(tmp_path: Path) -> None:
    traj = session.parse(FIXTURES / "tools" / "session.jsonl")
    rebuild = GeminiCliAdapter().rebuild(traj, 1, _historical(traj), tmp_path / "rebuilt")
    log = rebuild.native_files[0]
    nonce = "replayer-nonce-abc"
    appended = [
        {"id": "p1", "type": "gemini", "content": [{"text": wire.INTERRUPTED}]},
        {"id": "n1", "type": "user", "content": [{"text": nonce}]},
        {"id": "g1", "type": "gemini", "content": "Finished.", "model": "gemini-2.5-flash"},
    ]
    log.write_bytes(log.read_bytes() + b"".join(orjson.dumps(m) + b"\n" for m in appended))
    home = rebuild.agent_home
    assert home is not None
    dest = tmp_path / "continued"
    adapter = GeminiCliAdapter()
    launch = Launch(prompt=nonce, keep_prompt=False, port=8765, model=None, max_steps=None)
    ended = Ended(traj, rebuild, launch, home, dest, None)  # type: ignore[arg-type]  # no sandbox needed
    files = adapter.finish_continuation(ended)
    assert files == {
        "continued_session": "continued/session.jsonl",
        "continued_session_raw": "continued/session.raw.jsonl",
    }
    assert (dest / "session.raw.jsonl").read_bytes() == log.read_bytes()
    assert nonce.encode() not in (dest / "session.jsonl").read_bytes()
    continued = adapter.continued_prefix(tmp_path)
    assert continued == [*rebuild.expected_prefix, {"role": "model", "parts": [{"text": "Finished."}]}]


FIELD_0_34 = (
    ROOT / "tests" / "fixtures" / "field" / "gemini_cli" / "aim-0.34.0-session-2026-03-18T01-56-3afe7bdc.json"
)


def test_a_document_release_is_given_a_document_and_no_closing_turn(tmp_path: Path) -> None:
    """Before 0.39 the CLI lists and resumes only `session-*.json` documents and, on resume, sends the turns
    as they are (a real 0.34.0 session, tests/fixtures/field): the rebuild is a document that reads back
    to the kept messages, and the gate expects the nonce right after the tool responses."""
    # the file names no workspace (--cwd): its sibling session's paths hash to the same projectHash
    traj = session.parse(FIELD_0_34).model_copy(update={"cwd": "/home/kingb/aim"})
    with running_version("gemini_cli", "0.34.0"):
        rebuild = GeminiCliAdapter().rebuild(traj, 1, _historical(traj), tmp_path)
        gate = GeminiCliAdapter().gate(rebuild, "replayer-nonce-1", keep_prompt=False)
    path = rebuild.native_files[0]
    assert path.suffix == ".json" and path.name.endswith(f"-{traj.session_id[:8]}.json")
    document = orjson.loads(path.read_bytes())
    kept = traj.native_as(session.Native).messages[: boundary(traj.native_as(session.Native), traj, 1)]
    assert document["messages"] == kept and document["sessionId"] == traj.session_id
    assert rebuild.expected_prefix == wire.resume_contents(kept, wire.DOCUMENT)
    assert rebuild.expected_prefix[-1]["role"] == "user", "the prefix ends with the read's response"
    nonce = {"role": "user", "parts": [{"text": "replayer-nonce-1"}]}
    first = gate.route("POST", STREAM, _request([*rebuild.expected_prefix, nonce]))
    assert first.kind == "main" and first.body is not None
    assert first.body["contents"] == _request(rebuild.expected_prefix)["contents"]


def test_a_document_release_skips_only_commands_and_merges_no_turns() -> None:
    """The same messages resume differently: 0.61 drops a blank prompt and merges consecutive user turns,
    a document release keeps both turns as they are."""
    messages = [
        {"id": "u1", "type": "user", "content": "First."},
        {"id": "u2", "type": "user", "content": " "},
        {"id": "i1", "type": "info", "content": "Request cancelled."},
        {"id": "u3", "type": "user", "content": "/chat debug"},
        {"id": "u4", "type": "user", "content": "Second."},
    ]
    assert [len(c["parts"]) for c in wire.resume_contents(messages)] == [2]
    assert [wire.part_text(c["parts"]) for c in wire.resume_contents(messages, wire.DOCUMENT)] == [
        "First.",
        " ",
        "Second.",
    ]


FIELD_BENCHMARK = FIELD_0_34.with_name("aim-benchmark-control-pro-run4.json")


def test_0_61_sends_no_recorded_thoughts_and_signs_the_call_they_preceded() -> None:
    """A real session's gemini messages carry `thoughts`: 0.61 leaves them out of the history it sends (for
    Gemini 2 and 3 models) and gives the first call of such a turn its synthetic thought signature; a
    document release sends them as thought parts."""
    messages = session.parse(FIELD_BENCHMARK).native_as(session.Native).messages
    sent = wire.resume_contents(messages)
    assert not any(p.get("thought") for c in sent for p in c["parts"])
    calls = [p for c in sent for p in c["parts"] if "functionCall" in p]
    assert calls and all(p["thoughtSignature"] == wire.SYNTHETIC_SIGNATURE for p in calls)
    older = wire.resume_contents(messages, wire.DOCUMENT)
    assert any(p.get("thought") for c in older for p in c["parts"])
    assert not any("thoughtSignature" in p for c in older for p in c["parts"])


def test_the_session_folder_is_the_slug_the_cli_registers(tmp_path: Path) -> None:
    """The CLI's registry takes only `[a-z0-9-]+` folder names (0.61 resets it otherwise and never finds
    the session): `django_control_pro` is registered as `django-control-pro`."""
    traj = session.parse(FIELD_BENCHMARK)
    rebuild = GeminiCliAdapter().rebuild(traj, 1, _historical(traj), tmp_path)
    assert rebuild.native_files[0].parent.parent.name == "django-control-pro"
    registry = orjson.loads((tmp_path / "home" / ".gemini" / "projects.json").read_bytes())
    assert registry == {"projects": {"/home/kingb/aim_benchmarks/django_control_pro": "django-control-pro"}}
    assert all(re.fullmatch(r"[a-z0-9-]+", slug) for slug in registry["projects"].values())


def test_shell_output_differing_only_in_process_ids_is_normalized_equal() -> None:
    traj = session.parse(FIXTURES / "shell" / "session.jsonl")
    call = next(c for s in traj.steps for c in s.calls if c.tool == "run_shell_command")
    assert call.historical is not None and "Process Group PGID: " in str(call.historical.content)

    def fresh(text: str) -> Observation:
        assert call.historical is not None
        return dataclasses.replace(call.historical, content=text)

    other_pid = re.sub(r"PGID: \d+", "PGID: 4242", str(call.historical.content))
    normalizers = GeminiCliAdapter().normalizers(call.tool)
    d = divergence_of(1, call, "rerun", fresh(other_pid), normalizers)
    assert d.status == "normalized_equal" and d.normalizers == ["process_ids"]
    other_exit = other_pid.replace("Exit Code: 1", "Exit Code: 2")
    assert divergence_of(1, call, "rerun", fresh(other_exit), normalizers).status == "different"


def test_tool_definitions_are_the_ones_the_cli_sent_and_export_as_chat_functions() -> None:
    log = [orjson.loads(line) for line in (FIXTURES / "tools" / "upstream.jsonl").read_bytes().splitlines()]
    sent = [r["body"]["tools"] for r in log if r["main_thread"] and r["body"].get("tools")][-1]
    assert recorded_tools("gemini_cli", "0.61.0") == sent
    chat = GeminiCliAdapter().chat_tools(FIXTURES / "tools")
    declared = [d for group in sent for d in group["functionDeclarations"]]
    assert [t["function"]["name"] for t in chat] == [d["name"] for d in declared]
    shell = next(t["function"] for t in chat if t["function"]["name"] == "run_shell_command")
    assert shell["parameters"]["properties"]["command"]["type"] == "string"


def test_the_chat_form_pairs_every_call_with_one_result(tmp_path: Path) -> None:
    """The resume wire repeats each response in its turn; the exported chat answers each call once."""
    traj = session.parse(FIXTURES / "tools" / "session.jsonl")
    rebuild = GeminiCliAdapter().rebuild(traj, 3, _historical(traj), tmp_path)
    responses = [p for c in rebuild.expected_prefix for p in c["parts"] if "functionResponse" in p]
    chat = GeminiCliAdapter().dialect().to_chat(rebuild.expected_prefix)
    calls = [c["id"] for m in chat for c in m.get("tool_calls") or []]
    results = [m["tool_call_id"] for m in chat if m["role"] == "tool"]
    assert calls == results and len(responses) == 2 * len(calls)
    first = next(m for m in chat if m["role"] == "tool")
    assert first["content"] == traj.steps[0].calls[0].historical.content  # type: ignore[union-attr]


def test_a_batch_of_prefixes_exports_as_chat_and_atif_records(tmp_path: Path) -> None:
    """`replayer batch` (prepare: no container) over both recordings, then `export` in both formats."""
    from replayer.verbs.boundaries import valid_boundaries
    from tests.conftest import replayer
    from tests.support.atif import Trajectory as Atif

    sources = [FIXTURES / "tools" / "session.jsonl", FIXTURES / "shell" / "session.jsonl"]
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(b"".join(orjson.dumps({"trajectory": str(p)}) + b"\n" for p in sources))
    replayer("batch", "--trust-manifest", str(manifest), "-o", str(tmp_path / "out"), check=True)
    chat, atif = tmp_path / "chat.jsonl", tmp_path / "atif.jsonl"
    replayer("export", str(tmp_path / "out"), "-o", str(chat), check=True)
    replayer("export", str(tmp_path / "out"), "--format", "atif", "-o", str(atif), check=True)
    records = [orjson.loads(line) for line in chat.read_bytes().splitlines()]
    expected = sum(len(valid_boundaries(session.parse(p))) for p in sources)
    assert len(records) == expected and {r["metadata"]["agent"] for r in records} == {"gemini_cli"}
    for record in records:
        calls = [c["id"] for m in record["messages"] for c in m.get("tool_calls") or []]
        results = [m["tool_call_id"] for m in record["messages"] if m["role"] == "tool"]
        assert calls == results, record["metadata"]
        assert "run_shell_command" in {t["function"]["name"] for t in record["tools"]}
    trajectories = [Atif.model_validate_json(line) for line in atif.read_bytes().splitlines()]
    assert len(trajectories) == expected and {t.agent.name for t in trajectories} == {"gemini_cli"}


def test_the_bridge_counts_the_tokens_of_a_gemini_stream() -> None:
    from replayer.bridges.gemini import GeminiDialect, stream_chunks
    from replayer.bridges.scripted import Turn
    from replayer.bridges.usage import usage_of

    turn = Turn(blocks=[TextBlock(text="Done."), ToolUseBlock(id="c1", name="read_file", input={})])
    chunks = stream_chunks(turn, "gemini-2.5-flash", "r1")
    sse = b"".join(b"data: " + orjson.dumps(c) + b"\r\n\r\n" for c in chunks)
    last = chunks[-1]["usageMetadata"]
    assert usage_of([sse], GeminiDialect.usage_keys).model_dump() == {
        "input_tokens": last["promptTokenCount"],
        "output_tokens": last["candidatesTokenCount"],
    }
