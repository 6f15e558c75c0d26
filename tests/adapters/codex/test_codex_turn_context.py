"""Codex sessions recorded under another turn context than the container's (workspace-write, as TUI sessions
and `exec --full-auto` record), with reasoning items and a web search call (tests/recorder_codex.py
--turn-context V): the wire form each version sends of them, the context each version inserts on resume
(declared by the adapter, adapters/codex/resume.py), and a continuation at each version through the gate."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replayer.adapters import by_name
from replayer.adapters.codex import resume
from replayer.adapters.codex import session as rollout
from replayer.adapters.codex.gate import CodexGate
from replayer.bridges.scripted import Script, ScriptedUpstream, TextBlock, Turn
from tests.conftest import ROOT, replayer
from tests.support.continuing import KEY

RECORDINGS = ROOT / "tests" / "fixtures" / "codex" / "turn_context"
VERSIONS = sorted(p.name for p in RECORDINGS.iterdir())


def _folder(version: str) -> Path:
    return RECORDINGS / version / "turn_context"


def _posts(version: str) -> list[dict]:
    lines = (_folder(version) / "upstream.jsonl").read_bytes().splitlines()
    return [r["body"] for r in map(orjson.loads, lines) if r["method"] == "POST"]


def _native(version: str) -> rollout.Native:
    return rollout.parse(_folder(version) / "rollout.jsonl").native_as(rollout.Native)


def test_the_recordings_hold_what_the_gate_must_know() -> None:
    assert VERSIONS == ["0.101.0", "0.125.0", "0.142.0", "0.171.0"]
    for version in VERSIONS:
        native = _native(version)
        kinds = [p.get("type") for r in native.records if (p := rollout.item(r))]
        assert "reasoning" in kinds and "web_search_call" in kinds, version
        assert resume.recorded(native.records).sandbox == "workspace-write"


# pure: the wire form, from each version's own requests --------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_the_wire_prefix_is_what_that_version_sent_at_every_boundary(version: str) -> None:
    """0.142 keeps the server's item ids (rs_, fc_, msg_, ws_) in its rollout and sends none; 0.171 sends them."""
    native = _native(version)
    posts = _posts(version)
    steps = len(rollout.parse(_folder(version) / "rollout.jsonl").steps)
    for boundary in range(steps + 1):
        expected = rollout.wire_input(native, rollout.prefix_records(native, boundary, {}))
        skip = 0 if rollout.instructions_form(native) else 1  # input[0]'s id is the CLI's own (a uuid v5)
        sent = [p["input"][skip : len(expected)] for p in posts]
        assert expected[skip:] in sent, f"boundary {boundary}: no request of {version} carries the prefix"
    stored = {p.get("id") for r in native.records if (p := rollout.item(r)) and p.get("type") == "reasoning"}
    assert stored == {f"rs_tc_{n:02d}" for n in range(1, 5)} or stored == {None}


def _prompt(text: str, role: str = "user") -> dict:
    return {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]}


NOTICE = (
    "<permissions instructions>\nFilesystem sandboxing defines which files can be read or written. "
    "`sandbox_mode` is `{mode}`: No filesystem sandboxing - all commands are permitted. Network access is "
    "enabled.\nApproval policy is currently never. Do not provide the `sandbox_permissions` for any reason, "
    "commands will be rejected.\n</permissions instructions>"
)


def _route(version: str, recorded: resume.TurnSettings, inserted: dict, model: str | None = None) -> str:
    """`model`: the model the CLI was launched with, which the request asks for."""
    prefix = [_prompt("task")]
    gate = CodexGate(
        prefix,
        "nonce",
        keep_prompt=False,
        instructions_form=True,
        instructions="base",
        insertions=resume.insertions(version, recorded, model),
        model=model,
    )
    body = {"instructions": "base", "model": model, "input": [*prefix, inserted, _prompt("nonce")]}
    return gate.route("POST", "/v1/responses", body).kind


def test_a_permission_notice_passes_only_where_the_running_cli_writes_one() -> None:
    tui = resume.TurnSettings(sandbox="workspace-write", approval="on-request")
    same = resume.TurnSettings(sandbox="danger-full-access", approval="never")
    running = _prompt(NOTICE.format(mode="danger-full-access"), "developer")
    assert _route("0.142.0", tui, running) == "main"
    assert _route("0.142.0", same, running) == "refuse", "nothing differs: the CLI writes no notice"
    assert _route("0.101.0", same, running) == "main", "0.101 inserts its initial context on every resume"
    assert _route("0.58.0", tui, running) == "refuse", "0.58 writes no permission notices"
    other = _prompt(NOTICE.format(mode="workspace-write"), "developer")
    assert _route("0.142.0", tui, other) == "refuse", "a notice must name the settings that run"
    assert _route("0.142.0", tui, {**running, "role": "user"}) == "refuse"
    unknown = _prompt("<collaboration_mode>plan</collaboration_mode>", "developer")
    assert _route("0.142.0", tui, unknown) == "refuse", "an unknown insertion still refuses"
    agents = _prompt("# AGENTS.md instructions for /testbed\n\n<INSTRUCTIONS>x</INSTRUCTIONS>")
    assert _route("0.101.0", tui, agents) == "main" and _route("0.142.0", tui, agents) == "refuse"


CASEWARE_118 = (
    ROOT / "tests/fixtures/field/codex/caseware-0.118.0-alpha.2-rollout-2026-03-29-email-redacted.jsonl"
)


def test_a_model_switch_passes_only_when_the_cli_runs_another_model_than_the_boundary_turns() -> None:
    """The `<model_switch>` message a real 0.118 wrote when its user switched to gpt-5.4 (the caseware
    rollout): the gate takes it only from a CLI launched with another model than the boundary turn's."""
    records = [orjson.loads(line) for line in CASEWARE_118.read_bytes().splitlines()]
    texts = [
        part["text"]
        for r in records
        if (p := rollout.item(r)) and p.get("type") == "message" and p.get("role") == "developer"
        for part in p["content"]
    ]
    switch = _prompt(next(t for t in texts if t.startswith("<model_switch>")), "developer")
    mini = resume.TurnSettings(model="gpt-5.4-mini", sandbox="danger-full-access", approval="never")
    assert _route("0.118.0", mini, switch, model="gpt-5.4") == "main"
    assert _route("0.171.0", mini, switch, model="gpt-5.5") == "main"
    assert _route("0.118.0", mini, switch, model="gpt-5.4-mini") == "refuse", "the same model: no switch"
    assert _route("0.118.0", mini, switch) == "refuse", "no model launched"
    unknown = mini.model_copy(update={"model": None})
    assert _route("0.118.0", unknown, switch, model="gpt-5.4") == "refuse", "no boundary model to differ from"
    assert _route("0.58.0", mini, switch, model="gpt-5.4") == "refuse", "0.58 has no model switch message"
    assert _route("0.118.0", mini, {**switch, "role": "user"}, model="gpt-5.4") == "refuse"
    cut = _prompt(switch["content"][0]["text"].removesuffix("\n</model_switch>"), "developer")
    assert _route("0.118.0", mini, cut, model="gpt-5.4") == "refuse", "the closing marker is the CLI's"
    gate = CodexGate([_prompt("task")], "nonce", keep_prompt=False, model="gpt-5.4")
    other = {"model": "gpt-5.4-mini", "input": [_prompt("task"), _prompt("nonce")]}
    decision = gate.route("POST", "/v1/responses", other)
    assert decision.kind == "refuse" and decision.mismatch is not None and decision.mismatch.path == "model"


def test_the_recorded_turn_context_is_read_in_both_spellings() -> None:
    records = [
        {"type": "turn_context", "payload": {"sandbox_policy": {"mode": "read-only"}, "effort": "high"}},
        {"type": "response_item", "payload": {}},
    ]
    assert resume.recorded(records) == resume.TurnSettings(sandbox="read-only", effort="high")
    newer = [{"type": "turn_context", "payload": {"sandbox_policy": {"type": "danger-full-access"}}}]
    assert resume.changed(resume.recorded(newer)) == []
    assert resume.changed(resume.TurnSettings(approval="on-request")) == [
        "approval on-request recorded, never runs (codex exec)"
    ]


# Docker and the real CLIs --------------------------------------------------------------------------------
@pytest.mark.agent
@pytest.mark.docker
@pytest.mark.parametrize("version", VERSIONS)
def test_a_workspace_write_session_continues_at_its_own_version(version: str, tmp_path: Path) -> None:
    """Boundary 2 holds reasoning items and the web search call. The CLI at the rollout's version resumes
    under danger-full-access (the container is the sandbox), tells the model so, and the gate notes it;
    the recorded reasoning settings reach the request."""
    folder, out = _folder(version), tmp_path / "out"
    script = Script(turns=[Turn(blocks=[TextBlock(text="Finished.")])], model="gpt-5.5")
    with ScriptedUpstream(script, expected_key=KEY) as upstream:
        args = ["run", str(folder / "rollout.jsonl"), "-n", "2", "-w", str(folder / "workspace")]
        proc = replayer(
            *args, "-o", str(out), "--json", "--continue", "--upstream", upstream.url,
            env={"OPENAI_API_KEY": KEY},
        )  # fmt: skip
        log = list(upstream.log)
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    cont = result["continuation"]
    assert result["version"]["version"] == version
    assert cont["gate"] == "accepted" and cont["agent_status"] == "completed", cont
    assert any(
        "<permissions instructions> notice (sandbox workspace-write recorded" in n for n in cont["gate_notes"]
    )
    main = [r for r in log if r.main_thread]
    kinds = [i.get("type") for i in main[0].body["input"]]
    assert "reasoning" in kinds and "web_search_call" in kinds
    assert main[0].body.get("reasoning") == _posts(version)[0].get("reasoning")


def test_the_recorded_reasoning_effort_is_the_continuations(tmp_path: Path) -> None:
    """The field's 0.58.0 rollout records `effort: high` (gpt-5.1-codex's default is medium): the rebuilt
    config.toml sets it; its recorded `summary` (the CLI's resolved default) is not set."""
    field = ROOT / "tests" / "fixtures" / "field" / "codex" / "acidicsoil-0.58.0-rollout-2025-11-17.jsonl"
    traj = rollout.parse(field)
    rebuilt = by_name("codex").rebuild(traj, 3, {}, tmp_path)
    config = (tmp_path / "home" / ".codex" / "config.toml").read_text()
    assert 'model_reasoning_effort = "high"' in config and "model_reasoning_summary" not in config
    assert rebuilt.continuation.turn == resume.TurnSettings(
        sandbox="danger-full-access", approval="never", model="gpt-5.1-codex", effort="high"
    )
    assert rebuilt.model == "gpt-5.1-codex" and 'model = "gpt-5.1-codex"' in config
    assert resume.changed(rebuilt.continuation.turn) == []
