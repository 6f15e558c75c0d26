"""How each Gemini CLI release between 0.39 and 0.61 resumes a session, without Docker: the rules read from
the releases' packages (adapters/gemini_cli/bundle.py), the contents each sends for the same rebuilt
prefix, and the gate that holds each release's first request to them.

The input is the recording of the real CLI 0.61.0 (tests/fixtures/gemini_cli/shell), cut after its first
tool batch as `replayer verify` cuts it; `replayer verify` ran the same cut at 0.42.0, 0.43.0, 0.44.0,
0.45.2, 0.52.0, 0.53.0, 0.54.4 and 0.60.0 (replayer/data/verdicts).
"""

from __future__ import annotations

import copy
from typing import Any

from replayer.adapters.gemini_cli import boundary, bundle, session, wire
from replayer.adapters.gemini_cli.gate import GeminiResumeGate
from tests.conftest import GEMINI

SHELL = GEMINI.root / "shell" / "session.jsonl"
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
CONTEXT = {"text": "<session_context>\nToday is a day.\n</session_context>"}
NONCE = "replayer-nonce-1"


def _head() -> list[dict[str, Any]]:
    """The shell recording's messages through its first batch's responses."""
    traj = session.parse(SHELL)
    native = traj.native_as(session.Native)
    return native.messages[: boundary(native, traj, 1)]


def _request(contents: list[dict[str, Any]], merges: bool) -> dict[str, Any]:
    """A main request: the fresh session context first in the first user turn (0.53 and later), else a
    user turn of its own."""
    sent = copy.deepcopy(contents)
    if merges:
        sent[0]["parts"].insert(0, CONTEXT)
    else:
        sent.insert(0, {"role": "user", "parts": [CONTEXT]})
    return {"contents": sent, "tools": []}


def test_each_rule_starts_at_the_release_its_package_first_has_it() -> None:
    rules = {v: bundle.resume_rules(v) for v in ("0.38.2", "0.42.0", "0.43.0", "0.44.0", "0.45.2")}
    rules |= {v: bundle.resume_rules(v) for v in ("0.47.0", "0.52.0", "0.53.0", "0.54.4", "0.56.0")}
    rules |= {v: bundle.resume_rules(v) for v in ("0.57.0", "0.60.0", "0.61.0")}
    assert rules["0.38.2"] == wire.DOCUMENT and rules["0.61.0"] == rules["0.60.0"] == wire.LATEST
    changes = {
        "strips_prefixes": "0.43.0",
        "content_parts": "0.44.0",
        "reuses_context": "0.44.0",
        "skips_context": "0.45.2",
        "skips_blank": "0.47.0",
        "merges": "0.53.0",
        "strips_thoughts": "0.54.4",
        "closes": "0.54.4",
        "drops_empty_text": "0.57.0",
    }
    order = list(rules)
    for rule, first in changes.items():
        on = [v for v in order if getattr(rules[v], rule)]
        assert on == order[order.index(first) :], rule


def test_before_0_53_the_responses_go_twice_in_two_user_turns() -> None:
    """0.61 records the batch's responses in the call (`toolCalls[].result`) and again as a user message:
    0.53 and later send both in one merged user turn, 0.45.2 (the gate refused it at contents[2].parts[1]
    before) and 0.52 as two user turns."""
    head = _head()
    merged = wire.resume_contents(head, bundle.resume_rules("0.53.0"))
    apart = wire.resume_contents(head, bundle.resume_rules("0.45.2"))
    assert [c["role"] for c in merged] == ["user", "model", "user"]
    assert [c["role"] for c in apart] == ["user", "model", "user", "user"]
    assert merged[2]["parts"] == [*apart[2]["parts"], *apart[3]["parts"]] and apart[2] == apart[3]
    assert wire.resume_contents(head, bundle.resume_rules("0.52.0")) == apart


def test_the_stored_session_context_is_a_prefix_turn_before_0_44_and_the_context_itself_at_0_44() -> None:
    """The recording's first message is the session context 0.61 stored, with the id the CLI derives for it
    (`ENVIRONMENT_ID`): 0.43 sends a fresh context, then that message; 0.44 sends that message as the
    context (no fresh one: the gate takes it out as the context); 0.45 and later skip it and build a fresh
    one. Call ids keep their stored prefix before 0.43."""
    head = _head()
    assert head[0]["id"] == wire.ENVIRONMENT_ID
    versions = ("0.42.0", "0.43.0", "0.44.0", "0.45.2")
    sent = {v: wire.resume_contents(head, bundle.resume_rules(v)) for v in versions}
    assert wire.part_text(sent["0.43.0"][0]["parts"]).startswith("<session_context>")
    assert sent["0.44.0"] == sent["0.45.2"] and sent["0.43.0"][0]["parts"] == head[0]["content"]
    assert [c["role"] for c in sent["0.44.0"]] == ["user", "model", "user", "user"]
    ids = {
        v: [p["functionCall"]["id"] for c in s for p in c["parts"] if "functionCall" in p]
        for v, s in sent.items()
    }
    assert ids["0.42.0"] == ["run_shell_command__call_shell_01"] and ids["0.43.0"] == ["call_shell_01"]


def test_empty_text_parts_are_dropped_from_0_57_on_and_blank_prompts_from_0_47_on() -> None:
    messages = [
        {"id": "u1", "type": "user", "content": "First."},
        {"id": "u2", "type": "user", "content": " "},
        {
            "id": "g1",
            "type": "gemini",
            "content": [{"text": ""}, {"functionCall": {"name": "glob", "args": {}}}],
        },
    ]
    older = wire.resume_contents(messages, bundle.resume_rules("0.45.2"))
    assert [wire.part_text(c["parts"]) for c in older] == ["First.", " ", ""]
    assert {"text": ""} in older[2]["parts"]
    newer = wire.resume_contents(messages, bundle.resume_rules("0.57.0"))
    assert [c["role"] for c in newer] == ["user", "model"] and newer[1]["parts"] == [
        messages[2]["content"][1]
    ]
    assert len(wire.resume_contents(messages, bundle.resume_rules("0.56.0"))[1]["parts"]) == 2


def test_each_release_s_gate_accepts_its_own_first_request_and_forwards_the_prefix_alone() -> None:
    """After a tool batch: 0.54 and later close the responses with their model turn before the nonce, 0.53
    merges the nonce into the responses' turn, earlier releases send it as a turn of its own; each gate
    forwards the prefix alone, and refuses another release's request."""
    head = _head()
    nonce = {"role": "user", "parts": [{"text": NONCE}]}
    closing = {"role": "model", "parts": [{"text": wire.INTERRUPTED}]}
    sent = {}
    for version in ("0.45.2", "0.53.0", "0.61.0"):
        rules = bundle.resume_rules(version)
        prefix = wire.resume_contents(head, rules)
        turns = [*prefix, closing, nonce] if rules.closes else [*prefix, nonce]
        sent[version] = _request(wire.merged(turns) if rules.merges else turns, rules.merges)
        gate = GeminiResumeGate(prefix, NONCE, strip_prompt=True, rules=rules)
        first = gate.route("POST", STREAM, sent[version])
        assert first.kind == "main" and first.body is not None, (version, first.mismatch)
        assert first.body["contents"] == _request(prefix, rules.merges)["contents"], version
    assert sent["0.53.0"]["contents"][-1]["parts"][-1] == nonce["parts"][0]
    assert sent["0.53.0"]["contents"][-1]["parts"][0]["functionResponse"]
    for version, other in (("0.45.2", "0.61.0"), ("0.53.0", "0.45.2"), ("0.61.0", "0.53.0")):
        rules = bundle.resume_rules(version)
        gate = GeminiResumeGate(wire.resume_contents(head, rules), NONCE, strip_prompt=True, rules=rules)
        assert gate.route("POST", STREAM, sent[other]).kind == "refuse", (version, other)
