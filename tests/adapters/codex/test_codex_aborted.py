"""Calls the user interrupted (Ctrl-C: `turn_aborted`), from a real recording of the pinned CLI
(tests/recorder_codex.py aborted, into interrupted/): kept with the observation the CLI gave them, never run again, and a
boundary after them is a cut. A call left without any output (older rollouts, an approval the user
abandoned) takes the "aborted" output the CLI's own resume sends for it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replayer.adapters import by_name
from replayer.adapters.codex import session as rollout
from tests.conftest import CODEX, replayer

ABORTED = CODEX.fixture("interrupted/aborted")
INTERRUPTED = {"call_aborted_01", "call_aborted_02"}


def _unanswered(tmp_path: Path) -> Path:
    """The recording without the outputs the CLI wrote for the interrupted calls (ordinals renumbered)."""
    records = [orjson.loads(line) for line in (ABORTED / "rollout.jsonl").read_bytes().splitlines()]
    kept = [
        r
        for r in records
        if not (
            r["payload"].get("type") in rollout.OUTPUT_TYPES and r["payload"].get("call_id") in INTERRUPTED
        )
    ]
    for ordinal, record in enumerate(kept):
        record["ordinal"] = ordinal
    path = tmp_path / (ABORTED / "rollout.jsonl").name
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in kept))
    return path


def test_the_interrupted_calls_are_kept_as_the_cli_left_them() -> None:
    traj = rollout.parse(ABORTED / "rollout.jsonl")
    native = traj.native_as(rollout.Native)
    assert native.aborted == INTERRUPTED and not native.unanswered
    step = traj.steps[1]
    assert step.complete and {c.id for c in step.calls} == INTERRUPTED
    assert all("aborted by user" in str(c.historical.content) for c in step.calls if c.historical)
    adapter = by_name("codex")
    kinds = {c.id: adapter.classify(c, traj)[0] for s in traj.steps for c in s.calls}
    assert kinds == {
        "call_aborted_00": "rerun",
        **dict.fromkeys(INTERRUPTED, "pure"),
        "call_aborted_03": "rerun",
    }


def test_a_call_finished_before_the_interrupt_is_not_aborted() -> None:
    records = [
        {"type": "turn_context", "payload": {}},
        {"type": "response_item", "payload": {"type": "function_call", "call_id": "a"}},
        {"type": "response_item", "payload": {"type": "function_call", "call_id": "b"}},
        {
            "type": "response_item",
            "payload": {"type": "function_call_output", "call_id": "a", "output": "ok"},
        },
        {"type": "event_msg", "payload": {"type": "turn_aborted"}},
        {"type": "turn_context", "payload": {}},
        {"type": "response_item", "payload": {"type": "function_call", "call_id": "c"}},
    ]
    assert rollout._Scan(records).aborted(records) == ({"b"}, {"b"}), "c's turn was not aborted"


def test_a_call_without_output_takes_the_resumes_aborted_output(tmp_path: Path) -> None:
    traj = rollout.parse(_unanswered(tmp_path))
    native = traj.native_as(rollout.Native)
    assert native.unanswered == INTERRUPTED and traj.steps[1].complete
    assert {str(c.historical.content) for c in traj.steps[1].calls if c.historical} == {"aborted"}
    wire = rollout.wire_input(native, rollout.prefix_records(native, 3, {}))
    at = {i.get("call_id"): n for n, i in enumerate(wire) if i.get("type") in rollout.CALL_TYPES}
    for call_id, kind in (
        ("call_aborted_01", "function_call_output"),
        ("call_aborted_02", "custom_tool_call_output"),
    ):
        assert wire[at[call_id] + 1] == {"type": kind, "id": None, "call_id": call_id, "output": "aborted"}


# Docker and the real CLI --------------------------------------------------------------------------------
@pytest.mark.agent
@pytest.mark.docker
def test_a_boundary_after_an_interrupt_is_replayed_without_running_the_interrupted_calls(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    args = [
        "run",
        str(ABORTED / "rollout.jsonl"),
        "-n",
        "3",
        "-w",
        str(ABORTED / "workspace"),
        "-o",
        str(out),
    ]
    proc = replayer(*args, "--json", "--continue", "--upstream", "mock")
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    statuses = {d["call_id"]: d["status"] for d in result["divergences"]}
    assert {statuses[c] for c in INTERRUPTED} == {"historical_kept"}
    assert statuses["call_aborted_03"] in ("exact", "normalized_equal"), (
        "`ls` sees no file the patch would add"
    )
    assert sorted(p.name for p in (out / "state" / "workspace").iterdir()) == ["a.txt"]
    cont = result["continuation"]
    assert cont["gate"] == "accepted" and cont["agent_status"] == "completed", cont


@pytest.mark.agent
@pytest.mark.docker
def test_the_cli_resumes_a_call_without_output_with_its_aborted_output(tmp_path: Path) -> None:
    """The pinned CLI sends "aborted" right after each such call, under an id it derives from the thread."""
    out = tmp_path / "out"
    args = ["run", str(_unanswered(tmp_path)), "-n", "3", "-w", str(ABORTED / "workspace"), "-o", str(out)]
    proc = replayer(*args, "--json", "--continue", "--upstream", "mock")
    assert proc.returncode == 0, proc.stderr
    cont = orjson.loads((out / "result.json").read_bytes())["continuation"]
    assert cont["gate"] == "accepted" and cont["agent_status"] == "completed", cont
