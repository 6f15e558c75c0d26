"""Codex's files of the field corpus (tests/support/field.py): rerun at their own version and continued
through the gate (against the scripted upstream and bare `mock`), MCP tools kept historical, a
rollback, a model switch, a remote compaction, and the pin continuing an older form of rollout."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from replayer.adapters import by_name
from replayer.bridges.scripted import LoggedRequest
from tests.conftest import ROOT
from tests.support import field
from tests.support.field import FIELD

test_a_field_trajectory_runs_at_its_own_version, test_a_field_continuation_ends_when_the_bare_mock_ends_it = (
    field.own_version_tests("codex")
)


test_allow_degraded_keeps_the_historical_observation_of_a_tool_no_rerun_has = field.degraded_test("codex")

test_a_field_file_continues_against_the_mock_at_its_own_version = field.mock_run_test("codex")


CASEWARE_117 = FIELD / "codex" / "caseware-0.117.0-alpha.12-rollout-2026-03-28.jsonl"
CASEWARE_118 = FIELD / "codex" / "caseware-0.118.0-alpha.2-rollout-2026-03-29-email-redacted.jsonl"


def _rebuilt_codex(
    path: Path, boundary: int, dest: Path, fresh: dict[str, Any] | None = None
) -> tuple[Any, list[dict], str]:
    from replayer.adapters.codex import session as rollout

    rebuild = by_name("codex").rebuild(rollout.parse(path), boundary, fresh or {}, dest)
    records = [orjson.loads(line) for line in rebuild.native_files[0].read_bytes().splitlines()]
    return rebuild, records, (dest / "home" / ".codex" / "config.toml").read_text()


def test_a_codex_rollback_drops_its_turns_from_the_prefix_as_the_cli_does(tmp_path: Path) -> None:
    """The 0.117 Desktop rollout's first turn (steps 1-6) was interrupted and rolled back: the model's next
    request no longer held it (its recorded input tokens fall). A cut after it keeps the rollback event in
    the rebuilt rollout, whose resume drops the turn (codex-rs `drop_last_n_user_turns`), and the prefix
    leaves it out; a cut inside it keeps it. The recorded personality is the continuation's."""
    from replayer.adapters.codex import resume

    steps = field.steps(CASEWARE_117)
    first_turn = [c["id"] for s in steps[:6] for c in s["calls"]]
    rebuild, records, config = _rebuilt_codex(CASEWARE_117, 10, tmp_path / "10")
    prefix = orjson.dumps(rebuild.expected_prefix)
    assert not any(c.encode() in prefix for c in first_turn)
    assert [s["calls"][0]["id"].encode() in prefix for s in steps[6:10]] == [True] * 4
    assert [r["payload"]["type"] for r in records if r["type"] == "event_msg"] == ["thread_rolled_back"]
    kinds = [i.get("type") for i in rebuild.expected_prefix]
    assert "web_search_call" in kinds and "reasoning" in kinds
    assert 'personality = "friendly"' in config and rebuild.continuation.turn.rolled_back
    whys = [i.mark for i in resume.insertions("0.117.0", rebuild.continuation.turn)]
    assert resume.PERMISSIONS in whys and resume.PERSONALITY in whys, "inserted again after the rollback"
    inside, records, _ = _rebuilt_codex(CASEWARE_117, 6, tmp_path / "6")
    assert all(c.encode() in orjson.dumps(inside.expected_prefix) for c in first_turn)
    assert not inside.continuation.turn.rolled_back
    assert resume.PERSONALITY not in [i.mark for i in resume.insertions("0.117.0", inside.continuation.turn)]


def test_a_codex_session_that_switched_models_continues_with_the_boundarys(tmp_path: Path) -> None:
    """The 0.118 rollout switched between gpt-5.4-mini and gpt-5.4 by turn: the continuation runs the model
    of the turn the cut falls in (another makes the CLI insert a <model_switch> message); its
    request_user_input calls keep the user's recorded answers."""
    cut_mini, _, config = _rebuilt_codex(CASEWARE_118, 12, tmp_path / "12")
    assert cut_mini.model == "gpt-5.4-mini" and 'model = "gpt-5.4-mini"' in config
    cut_full, _, config = _rebuilt_codex(CASEWARE_118, 42, tmp_path / "42")
    assert cut_full.model == "gpt-5.4" and 'model = "gpt-5.4"' in config
    asked = {
        c["kind"] for s in field.steps(CASEWARE_118) for c in s["calls"] if c["tool"] == "request_user_input"
    }
    assert asked == {"pure"}


def test_the_codex_gate_reads_a_context_message_of_several_parts() -> None:
    """After a rollback 0.117 sends its permission notice, personality and skills in one developer message
    of three parts (seen on the wire): each part must be a known insertion; one unknown part refuses."""
    from replayer.adapters.codex import resume
    from replayer.adapters.codex.gate import CodexGate

    def message(role: str, *texts: str) -> dict:
        return {
            "type": "message",
            "role": role,
            "content": [{"type": "input_text", "text": t} for t in texts],
        }

    notice = (
        "<permissions instructions>\n`sandbox_mode` is `danger-full-access`\nApproval policy is currently "
        "never.\n</permissions instructions>"
    )
    turn = resume.TurnSettings(sandbox="danger-full-access", approval="never", rolled_back=True)

    def route(inserted: dict, settings: resume.TurnSettings = turn) -> str:
        prefix = [message("user", "task")]
        gate = CodexGate(
            prefix,
            "nonce",
            keep_prompt=False,
            instructions_form=True,
            instructions="base",
            insertions=resume.insertions("0.117.0", settings),
        )
        body = {"instructions": "base", "input": [*prefix, inserted, message("user", "nonce")]}
        return gate.route("POST", "/v1/responses", body).kind

    bundle = (notice, "<personality_spec> friendly", "<skills_instructions>\n## Skills")
    assert route(message("developer", *bundle)) == "main"
    assert route(message("developer", *bundle, "<collaboration_mode>plan")) == "refuse"
    unchanged = turn.model_copy(update={"rolled_back": False})
    assert route(message("developer", *bundle), unchanged) == "refuse", "no rollback: nothing to reinsert"


CASEWARE_COMPACTED = FIELD / "codex" / "caseware-0.118.0-alpha.2-compacted-rollout-2026-03-28.jsonl"
"""126 steps; a remote compaction mid-turn after step 84, in the turn that goes on to step 118."""


@pytest.mark.agent
@pytest.mark.docker
def test_a_compacted_codex_rollout_is_rerun_by_its_own_cli_and_resumed_compacted(tmp_path: Path) -> None:
    """0.118's own CLI reruns the 85 steps up to a cut just after the compaction, fed through it in one run
    (its exec sessions live on, as in the recording); the continuation resumes the rebuilt rollout, whose
    first request carries the replacement history, then the step after it, and none of the calls it
    replaced."""
    name = str(CASEWARE_COMPACTED.relative_to(FIELD))
    options = ("--agent-version", "0.118.0", "--allow-degraded")
    proc, out, sent = field.continue_field(name, 85, "codex", options, tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["version"]["reruns"] == "codex 0.118.0, its own code"
    rerun = {d["call_id"] for d in result["divergences"] if d["kind"] == "rerun"}
    steps = field.steps(CASEWARE_COMPACTED)
    after = [c["id"] for c in steps[84]["calls"]]
    assert set(after) <= rerun, "the step after the compaction was rerun by the CLI"
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1)
    assert len(sent) == 1
    body = sent[0].body
    kinds = [i.get("type") for i in body["input"]]
    assert "compaction" in kinds, "the replacement history's compaction item"
    sent_calls = [i["call_id"] for i in body["input"] if i.get("type") == "function_call"]
    assert sent_calls == after, "only the step after the compaction: the replaced calls are gone"


OLDER_FORM_RESUMED = (
    ROOT / "tests" / "fixtures" / "codex" / "older_form_resumed" / "0.171.0-caseware-0.118-boundary-3.json"
)
"""The first request the pinned 0.171.0 sent when it continued the 0.118 rollout above cut at step 3 (`run
--agent-version 0.171.0 --continue`, nonce removed by the gate; its model, input and tools kept)."""


def test_the_pin_continues_an_older_form_rollout_in_its_own_form(tmp_path: Path) -> None:
    """0.171 resumes a 0.118 rollout in its own form: the base instructions as input[0], not `instructions`,
    the recorded messages with `unknown` content kinds; with no baseline for the older form, it sends its
    context again: the recorded plan collaboration mode and the permission notice, the recorded AGENTS.md
    and plugins revoked (the container has neither). The gate accepts exactly that, and the recorded
    version's own form still holds for the recorded version."""
    from replayer.adapters.codex import resume
    from replayer.floor.pins import running_version
    from replayer.floor.trajectory import Observation

    body = orjson.loads(OLDER_FORM_RESUMED.read_bytes())
    nonce = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "nonce"}]}
    body["input"].append(nonce)
    assert "instructions" not in body and body["input"][0]["role"] == "developer"
    adapter = by_name("codex")
    # the outputs that run's reruns gave (the workspace was empty): the prefix holds them
    fresh = {
        i["call_id"]: Observation(i["output"])
        for i in body["input"]
        if i.get("type") == "function_call_output"
    }

    def route(sent: dict, version: str) -> Any:
        with running_version("codex", version):
            rebuild, _, _ = _rebuilt_codex(CASEWARE_118, 3, tmp_path / version, fresh)
            gate = adapter.gate(rebuild, "nonce", keep_prompt=False)
            return gate.route("POST", "/v1/responses", sent), gate.notes

    decision, notes = route(body, "0.171.0")
    assert decision.kind == "main", decision.mismatch
    assert any("AGENTS.md revoked" in n for n in notes) and any("collaboration mode" in n for n in notes)
    recorded, _ = route(body, "0.118.0")
    assert recorded.kind == "refuse" and recorded.mismatch.path == "instructions", "0.118's own form"
    other_mode = orjson.loads(orjson.dumps(body))
    for part in other_mode["input"][-4]["content"]:
        if part["text"].startswith("<collaboration_mode>"):
            part["text"] = "<collaboration_mode># Collaboration Mode: Default\n</collaboration_mode>"
    assert route(other_mode, "0.171.0")[0].kind == "refuse", "only the recorded collaboration mode"
    turn = resume.TurnSettings(paginated=True, agents_md=True, plugins=True, collaboration="# Plan Mode")
    marks = [i.mark for i in resume.insertions("0.171.0", turn)]
    assert resume.REVOKED_AGENTS_MD not in marks, "a rollout of its own form keeps its baseline"


def test_a_continued_rollout_reads_back_in_the_form_of_the_version_that_continued_it(tmp_path: Path) -> None:
    """The form is the continuing version's (resume.sends_instructions_form): a 0.118 rollout read back by
    export and the report after 0.171 continued it is in 0.171's form, after 0.118 did in 0.118's; a rollout
    of the paginated form stays in it. Here the continued rollout holds the prefix alone."""
    import shutil

    from replayer.adapters.codex import resume
    from replayer.adapters.codex import session as rollout
    from replayer.floor.pins import running_version

    older = rollout.parse(CASEWARE_118).native_as(rollout.Native)
    paginated = FIELD.parent / "codex" / "turn_context" / "0.171.0" / "turn_context" / "rollout.jsonl"
    assert [resume.sends_instructions_form(older, v) for v in ("0.118.0", "0.142.0", "0.171.0")] == [
        True,
        True,
        False,
    ]
    assert not resume.sends_instructions_form(rollout.parse(paginated).native_as(rollout.Native), "0.171.0")
    for version in ("0.118.0", "0.171.0"):
        with running_version("codex", version):
            rebuild, _, _ = _rebuilt_codex(CASEWARE_118, 3, tmp_path / version)
            result_dir = tmp_path / version / "result"
            (result_dir / "continued").mkdir(parents=True)
            shutil.copyfile(rebuild.native_files[0], result_dir / "continued" / "rollout.jsonl")
            assert by_name("codex").continued_prefix(result_dir) == rebuild.expected_prefix, version
        assert rebuild.continuation.instructions_form == (version == "0.118.0")


@pytest.fixture(scope="module")
def pin_continued_at_3(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path, list[LoggedRequest]]:
    """`run --agent-version 0.171.0 --continue` of the 0.118 rollout cut at step 3 (a gpt-5.4-mini turn)."""
    name = str(CASEWARE_118.relative_to(FIELD))
    return field.continue_field(
        name, 3, "codex", ("--agent-version", "0.171.0"), tmp_path_factory.mktemp("pin-at-3")
    )


@pytest.mark.agent
@pytest.mark.docker
def test_the_pins_continuation_of_an_older_form_rollout_is_exported_in_the_form_it_sent(
    pin_continued_at_3: tuple[subprocess.CompletedProcess[str], Path, list[LoggedRequest]],
) -> None:
    """`run --agent-version 0.171.0 --continue` of the 0.118 rollout cut at step 3: the pin sends it in its
    own form, and export and the report read the continued rollout back in that form, item for item what
    the upstream received (the CLI's insertions included), then the agent's answer."""
    from replayer.floor.pins import running_version
    from replayer.pipeline import timeline
    from replayer.verbs import export, view

    proc, out, sent = pin_continued_at_3
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    assert (result["version"]["version"], result["version"]["in_file"]) == ("0.171.0", "0.118.0-alpha.2")
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1)
    assert len(sent) == 1 and "instructions" not in sent[0].body, "the pin's own form"
    received = sent[0].body["input"]
    received[0] = {
        **received[0],
        "id": None,
    }  # the CLI derives it from the thread (base_instructions_message)
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert len(received) > len(expected), "the CLI's insertions after the prefix"
    adapter = by_name("codex")
    with running_version("codex", "0.171.0"):
        continued = adapter.continued_prefix(out)
    assert continued is not None and continued[: len(received)] == received
    dialect = adapter.dialect()
    answer = {"role": "assistant", "content": "Finished."}
    assert export.chat_record(out)["messages"] == [*dialect.to_chat(received), answer]
    shown = view.load(out).continuation
    assert shown == timeline.entries([*dialect.to_chat(received[len(expected) :]), answer], view.TEXT_CHARS)


def _model_switches(body: dict) -> list[int]:
    """Where the request carries a `<model_switch>` developer message."""
    return [
        i
        for i, item in enumerate(body["input"])
        if item.get("role") == "developer"
        and any(str(p.get("text", "")).startswith("<model_switch>") for p in item.get("content", []))
    ]


@pytest.mark.agent
@pytest.mark.docker
def test_a_compare_fork_continues_with_the_model_of_the_boundary_turn_or_the_variants(
    pin_continued_at_3: tuple[subprocess.CompletedProcess[str], Path, list[LoggedRequest]], tmp_path: Path
) -> None:
    """The 0.118 rollout's last turn ran gpt-5.4 (the default model), the turn of step 3 gpt-5.4-mini: a
    compare fork at 3 continues with gpt-5.4-mini, as `run -n 3 --continue` does: the model it records and
    sends, read from the replay directory it forks from (result.json's boundary_model). A variant naming
    gpt-5.4 (the file's last model) runs gpt-5.4: the CLI, launched with it, tells the model of the switch
    in a <model_switch> message right after the prefix, which the gate accepts for that run only."""
    alone_proc, alone, alone_sent = pin_continued_at_3
    assert alone_proc.returncode == 0, alone_proc.stderr
    name = str(CASEWARE_118.relative_to(FIELD))
    options = ("--agent-version", "0.171.0")
    variants = ("one=", "full=model=gpt-5.4")
    proc, out, sent = field.continue_field(name, 3, "codex", options, tmp_path, fork=True, variants=variants)
    assert proc.returncode == 0, proc.stderr
    runs = {r["variant"]: r for r in orjson.loads((out / "compare.json").read_bytes())["runs"]}
    assert all(r["status"] == "ok" and r["continuation"]["gate"] == "accepted" for r in runs.values()), runs
    replay = orjson.loads((out / "replay" / "result.json").read_bytes())
    standalone = orjson.loads((alone / "result.json").read_bytes())
    assert by_name("codex").default_model(by_name("codex").parse(CASEWARE_118)) == "gpt-5.4"
    assert replay["boundary_model"] == standalone["boundary_model"] == "gpt-5.4-mini"
    assert runs["one"]["continuation"]["model"] == standalone["continuation"]["model"] == "gpt-5.4-mini"
    assert runs["full"]["continuation"]["model"] == "gpt-5.4"
    bodies = {r.body["model"]: r.body for r in sent}
    assert sorted(bodies) == ["gpt-5.4", "gpt-5.4-mini"] and len(sent) == 2
    assert [r.body["model"] for r in alone_sent] == ["gpt-5.4-mini"]
    assert _model_switches(bodies["gpt-5.4-mini"]) == _model_switches(alone_sent[0].body) == []
    prefix = len(orjson.loads((out / "replay" / "expected_prefix.json").read_bytes()))
    assert _model_switches(bodies["gpt-5.4"]) == [prefix]
    full = runs["full"]["continuation"]
    assert any(
        "<model_switch>" in n and "gpt-5.4-mini ran the boundary turn" in n for n in full["gate_notes"]
    )
    assert full["metadata"]["codex_model"] == {"launched": "gpt-5.4", "boundary_turn": "gpt-5.4-mini"}


@pytest.mark.agent
@pytest.mark.docker
def test_the_files_own_version_continues_with_a_model_the_file_never_ran(tmp_path: Path) -> None:
    """`run -n 3 --continue --model gpt-5.5` of the 0.118 rollout at 0.118: the CLI sends gpt-5.5 and its
    <model_switch> message (developer, one part, the new model's instructions) before the prompt."""
    name = str(CASEWARE_118.relative_to(FIELD))
    options = ("--agent-version", "0.118.0", "--model", "gpt-5.5")
    proc, out, sent = field.continue_field(name, 3, "codex", options, tmp_path)
    assert proc.returncode == 0, proc.stderr
    cont = orjson.loads((out / "result.json").read_bytes())["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["model"]) == ("accepted", "completed", "gpt-5.5")
    assert [r.body["model"] for r in sent] == ["gpt-5.5"]
    prefix = len(orjson.loads((out / "expected_prefix.json").read_bytes()))
    assert _model_switches(sent[0].body) == [prefix]
    [part] = sent[0].body["input"][prefix]["content"]
    assert part["text"].endswith("\n</model_switch>") and part["type"] == "input_text"
    assert any("gpt-5.4-mini ran the boundary turn, gpt-5.5 runs" in n for n in cont["gate_notes"])
