"""Codex rollouts recorded by other versions than the pin (tests/recorder_codex.py --version V): the wire
prefix that version sends at every boundary, reruns by that version's own CLI driven by the replay model,
and a continuation by that version through the gate, also under the `openai` provider real rollouts
record. One scenario per version; the pinned version driven is checked against its reimplementation."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from replayer.adapters.codex import config_toml
from replayer.adapters.codex import session as rollout
from replayer.adapters.codex.gate import CodexGate
from replayer.bridges.scripted import Script, ScriptedUpstream, TextBlock, Turn
from replayer.floor.divergence import NORMALIZERS
from tests.conftest import CODEX, ROOT, replayer
from tests.support.continuing import KEY

VERSIONS = ROOT / "tests" / "fixtures" / "codex" / "versions"
RECORDED = sorted(p.name for p in VERSIONS.iterdir())


def _probe(version: str) -> Path:
    return VERSIONS / version / "probe"


def _posts(version: str) -> list[dict]:
    lines = (_probe(version) / "upstream.jsonl").read_bytes().splitlines()
    return [r["body"] for r in map(orjson.loads, lines) if r["method"] == "POST"]


def _with_provider(source: Path, dest: Path, provider: str) -> Path:
    """A copy of a recording (rollout and workspace) whose session_meta names `provider`, as users' do."""
    dest.mkdir(parents=True)
    shutil.copytree(source / "workspace", dest / "workspace")
    lines = (source / "rollout.jsonl").read_bytes().splitlines()
    meta = orjson.loads(lines[0])
    meta["payload"]["model_provider"] = provider
    (dest / "rollout.jsonl").write_bytes(b"\n".join([orjson.dumps(meta), *lines[1:]]) + b"\n")
    return dest


def _run(folder: Path, out: Path, after_step: int, *extra: str, env: dict[str, str] | None = None) -> dict:
    args = ["run", str(folder / "rollout.jsonl"), "-n", str(after_step), "-w", str(folder / "workspace")]
    proc = replayer(*args, "-o", str(out), "--json", *extra, env=env)
    assert proc.returncode == 0, proc.stderr
    return orjson.loads((out / "result.json").read_bytes())


def _continue(folder: Path, out: Path, after_step: int) -> tuple[dict, list]:
    script = Script(turns=[Turn(blocks=[TextBlock(text="Finished.")])], model="gpt-5.5")
    with ScriptedUpstream(script, expected_key=KEY) as upstream:
        result = _run(
            folder, out, after_step, "--continue", "--upstream", upstream.url, env={"OPENAI_API_KEY": KEY}
        )
        return result, list(upstream.log)


# pure: the wire form of each version, from its own recorded requests ----------------------------------
@pytest.mark.parametrize("version", RECORDED)
def test_the_wire_prefix_is_what_that_version_sent_at_every_boundary(version: str) -> None:
    traj = rollout.parse(_probe(version) / "rollout.jsonl")
    native = traj.native_as(rollout.Native)
    posts = _posts(version)
    for boundary in range(len(traj.steps) + 1):
        expected = rollout.wire_input(native, rollout.prefix_records(native, boundary, {}))
        sent = [p["input"][: len(expected)] for p in posts]
        assert expected in sent, f"boundary {boundary}: no request of {version} starts with the prefix"
    if (
        rollout.instructions_form(native) and rollout.wire_instructions(native) is not None
    ):  # 0.58: unrecorded
        assert all(p["instructions"] == rollout.wire_instructions(native) for p in posts)


def test_stored_shell_outputs_become_the_text_a_freeform_apply_patch_cli_sends() -> None:
    stored = '{"output":"Total output lines: 3\\n\\na\\nb\\nc\\n","metadata":{"exit_code":1,"duration_seconds":0.1}}'
    items = [
        {"type": "custom_tool_call", "call_id": "p", "name": "apply_patch", "input": "x"},
        {"type": "custom_tool_call_output", "call_id": "p", "output": stored},
        {"type": "function_call", "call_id": "e", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "e", "output": stored},
    ]
    out = rollout.reserialized(items)
    assert (
        out[1]["output"] == "Exit code: 1\nWall time: 0.1 seconds\nTotal output lines: 3\nOutput:\na\nb\nc\n"
    )
    assert out[3]["output"] == stored, "exec_command outputs are sent as stored"
    zero = stored.replace("0.1", "0.0")
    assert (
        "Wall time: 0 seconds" in rollout.reserialized([items[0], {**items[1], "output": zero}])[1]["output"]
    )


def test_a_codex_model_gets_the_freeform_apply_patch_and_no_ghost_snapshot_is_sent() -> None:
    """The field's 0.58.0 rollout (gpt-5.1-codex) never calls apply_patch, yet the CLI offers it freeform for
    that model family, so its shell outputs are sent as text; its undo checkpoint is never sent."""
    field = ROOT / "tests" / "fixtures" / "field" / "codex" / "acidicsoil-0.58.0-rollout-2025-11-17.jsonl"
    native = rollout.parse(field).native_as(rollout.Native)
    assert any((p := rollout.item(r)) and p.get("type") == "ghost_snapshot" for r in native.records)
    sent = rollout.wire_input(native, rollout.prefix_records(native, 3, {}))
    assert "ghost_snapshot" not in {i.get("type") for i in sent}
    outputs = [i["output"] for i in sent if i.get("type") == "function_call_output"]
    assert len(outputs) == 3 and all(o.startswith("Exit code: ") for o in outputs)
    probe = rollout.parse(_probe("0.58.0") / "rollout.jsonl").native_as(
        rollout.Native
    )  # gpt-5.5: no freeform
    assert not rollout.freeform_apply_patch(probe)


def test_the_instructions_form_gate_checks_the_instructions_exactly() -> None:
    prefix = [{"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]}]
    prompt_item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "nonce"}]}
    body = {"instructions": "base", "input": [*prefix, prompt_item]}

    def gate() -> CodexGate:
        return CodexGate(prefix, "nonce", keep_prompt=False, instructions_form=True, instructions="base")

    assert gate().route("POST", "/v1/responses", body).kind == "main"
    changed = gate().route("POST", "/v1/responses", {**body, "instructions": "based"})
    assert changed.kind == "refuse" and changed.mismatch and changed.mismatch.path.startswith("instructions")
    missing = gate().route("POST", "/v1/responses", {"input": body["input"]})
    assert missing.kind == "refuse" and missing.mismatch and missing.mismatch.path == "instructions"


def test_outputs_are_rendered_as_text_when_the_request_offers_a_freeform_apply_patch() -> None:
    """The instructions-form CLIs render shell outputs as text while they offer a freeform apply_patch
    (codex-rs client_common.rs): decided by the request's tools where the rollout cannot tell (a bare one)."""
    call = {"type": "function_call", "name": "shell", "arguments": '{"command":["ls"]}', "call_id": "c1"}
    raw = '{"output":"a.txt\\n","metadata":{"exit_code":0,"duration_seconds":0.0}}'
    output = {"type": "function_call_output", "call_id": "c1", "output": raw}
    prompt_item = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "nonce"}]}
    freeform = [{"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}}]
    rendered = {**output, "output": "Exit code: 0\nWall time: 0 seconds\nOutput:\na.txt\n"}

    def route(sent: dict, tools: list) -> str:
        gate = CodexGate(
            [call, output], "nonce", keep_prompt=False, instructions_form=True, outputs_rendered=False
        )
        body = {"instructions": "base", "tools": tools, "input": [call, sent, prompt_item]}
        return gate.route("POST", "/v1/responses", body).kind

    assert route(rendered, freeform) == "main" and route(output, freeform) == "refuse"
    assert route(output, []) == "main" and route(rendered, []) == "refuse"


def test_the_recorded_provider_name_is_kept() -> None:
    openai = config_toml("gpt-5.5", "openai", base_url="http://127.0.0.1:1/v1")
    assert 'model_provider = "openai"' in openai and 'openai_base_url = "http://127.0.0.1:1/v1"' in openai
    assert "[model_providers" not in openai, "a built-in provider cannot be redefined"
    custom = config_toml("gpt-5.5", "azure-east")
    assert 'model_provider = "azure-east"' in custom and '[model_providers."azure-east"]' in custom


# Docker and the real CLIs --------------------------------------------------------------------------------
@pytest.mark.agent
@pytest.mark.docker
@pytest.mark.parametrize("version", RECORDED)
def test_an_openai_provider_rollout_of_another_version_reruns_and_continues_through_the_gate(
    version: str, tmp_path: Path
) -> None:
    """One run a version (`run -n LAST --continue`): reruns by that version's own CLI (the replay model's
    provider whatever the rollout records), then its continuation under the `openai` provider. Both send the
    base instructions as `instructions` (0.58 does not record them: noted, not checked); 0.125.0 tries a
    WebSocket first (426: HTTP); 0.58.0 finds the bridge through OPENAI_BASE_URL."""
    folder = _with_provider(_probe(version), tmp_path / "openai", "openai")
    steps = len(rollout.parse(folder / "rollout.jsonl").steps)
    result, log = _continue(folder, tmp_path / "out", steps)
    assert result["version"]["version"] == version and result["version"]["source"] == "recorded"
    assert result["version"]["status"] == "unverified"
    assert result["version"]["reruns"] == f"codex {version}, its own code"
    statuses = [d["status"] for d in result["divergences"]]
    assert len(statuses) >= steps and set(statuses) <= {"exact", "normalized_equal"}, result["divergences"]
    # what may differ is what a run measures or draws (0.58.0's `duration_seconds`, 0.125.0's chunk ids and
    # wall times): on a loaded machine no shell call's duration need be the recorded one
    used = {n for d in result["divergences"] if d["status"] == "normalized_equal" for n in d["normalizers"]}
    assert used <= {"durations", "random_ids"}, result["divergences"]
    cont = result["continuation"]
    assert cont["gate"] == "accepted" and cont["agent_status"] == "completed", cont
    assert any("`instructions`" in note for note in cont["gate_notes"])
    bridge = [
        orjson.loads(line) for line in (tmp_path / "out" / "bridge" / "log.jsonl").read_bytes().splitlines()
    ]
    assert {e["status"] for e in bridge if e["method"] == "GET"} <= {426}
    main = [r for r in log if r.main_thread]
    recorded = rollout.wire_instructions(rollout.parse(folder / "rollout.jsonl").native_as(rollout.Native))
    assert main and main[0].body["instructions"] == (recorded or main[0].body["instructions"])
    assert version in (main[0].headers.get("version") or main[0].headers.get("user-agent", ""))


@pytest.mark.agent
@pytest.mark.docker
def test_an_openai_provider_rollout_of_the_pin_continues_with_its_passthrough(tmp_path: Path) -> None:
    folder = _with_provider(CODEX.fixture("continued"), tmp_path / "openai", "openai")
    result, _ = _continue(folder, tmp_path / "out", 2)
    cont = result["continuation"]
    assert cont["gate"] == "accepted" and cont["agent_status"] == "completed", cont
    expected = orjson.loads((tmp_path / "out" / "expected_prefix.json").read_bytes())
    assert expected[0][rollout.PASSTHROUGH] == {"content_item_kinds": ["model.base_instructions"]}


@pytest.mark.agent
@pytest.mark.docker
def test_the_pinned_cli_driven_equals_its_reimplementation(tmp_path: Path) -> None:
    folder = CODEX.fixture("patch_errors")
    steps = len(rollout.parse(folder / "rollout.jsonl").steps)
    driven = _run(folder, tmp_path / "driven", steps, env={"REPLAYER_RERUN": "driven"})
    assert driven["version"]["reruns"].endswith("its own code")
    reimplemented = _run(folder, tmp_path / "reimplemented", steps)
    assert "reimplementation" in reimplemented["version"]["reruns"]
    # exec_command joins stdout and stderr from two pipes: their interleaving is the CLI's own race
    # (under load `od`'s error can come before the echo printed first), so its lines compare as a set
    for a, b in zip(driven["divergences"], reimplemented["divergences"], strict=True):
        assert a["call_id"] == b["call_id"]
        if a["tool"] == "apply_patch":
            assert a["status"] == b["status"] == "exact"
    prefixes = [
        orjson.loads((tmp_path / d / "expected_prefix.json").read_bytes())
        for d in ("driven", "reimplemented")
    ]
    assert _without_races(prefixes[0]) == _without_races(prefixes[1])


def _without_races(items: list[dict]) -> list:
    """Each item as JSON with exec_command's random chunk id and wall time normalized and an output's
    lines sorted (the interleaving of its two pipes)."""
    out = []
    for item in items:
        text = orjson.dumps(item).decode()
        for name in ("random_ids", "durations"):
            text = NORMALIZERS[name](text)
        out.append(sorted(text.split("\\n")) if item.get("type") == "function_call_output" else text)
    return out
