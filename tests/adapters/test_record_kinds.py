"""Record kinds and tools a newer release (or a fork) adds: carried as recorded and said in the parse notes
where the format names a kind per line, unknown tools (refused naming --allow-degraded, kept with it) where
they are calls. The files are real recordings of the agents, with the new kind put in as the release writes it
(its shape from public code and trajectories of that release)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from replayer.adapters.codex import session as rollout
from replayer.floor.errors import PlanRefused
from replayer.floor.trajectory import Trajectory
from replayer.pipeline.engine import load
from replayer.pipeline.plan import make_plan
from tests.conftest import CLAUDE, CODEX, PI, ROOT

FIELD = ROOT / "tests" / "fixtures" / "field"
CARRIED = "carried as recorded"


def _lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _write(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def _shape(traj: Trajectory) -> list[tuple[int, list[str], bool]]:
    return [(s.index, [c.id for c in s.calls], s.complete) for s in traj.steps]


def _claude(tmp_path: Path, extra: dict[str, Any]) -> tuple[Path, Path]:
    original = CLAUDE.fixture("parallel") / "session.jsonl"
    records = _lines(original)
    sid = next(r["sessionId"] for r in records if "sessionId" in r)
    return original, _write(
        tmp_path / "session.jsonl", [records[0], {**extra, "sessionId": sid}, *records[1:]]
    )


def _codex(tmp_path: Path, extra: dict[str, Any]) -> tuple[Path, Path]:
    original = CODEX.fixture("exec") / "rollout.jsonl"
    records = _lines(original)
    return original, _write(tmp_path / "rollout.jsonl", [*records[:5], extra, *records[5:]])


def _pi(tmp_path: Path, extra: dict[str, Any]) -> tuple[Path, Path]:
    """A Pi session with an entry of another kind in its chain (ids linked as Pi links them)."""
    original = PI.fixture("tools") / "session.jsonl"
    records = _lines(original)
    at = next(i for i, r in enumerate(records) if r["type"] == "message")
    entry = {
        **extra,
        "id": "0ddba11",
        "parentId": records[at - 1]["id"],
        "timestamp": records[at]["timestamp"],
    }
    records[at] = {**records[at], "parentId": entry["id"]}
    return original, _write(tmp_path / "session.jsonl", [*records[:at], entry, *records[at:]])


UNKNOWN = {
    "claude_code": (_claude, {"type": "holo-state", "state": {"full": True}}),
    "codex": (
        _codex,
        {"timestamp": "2026-12-02T14:04:14.449Z", "type": "holo_state", "payload": {"full": True}},
    ),
    "pi": (_pi, {"type": "holo_state", "data": {"full": True}}),
}


@pytest.mark.parametrize("agent", sorted(UNKNOWN))
def test_an_unknown_record_kind_is_carried_and_noted(tmp_path: Path, agent: str) -> None:
    make, extra = UNKNOWN[agent]
    original, changed = make(tmp_path, extra)
    _, before = load(original)
    adapter, traj = load(changed)

    assert adapter.name == agent and _shape(traj) == _shape(before)
    [note] = [n for n in traj.parse_notes if CARRIED in n]
    assert f"'{extra['type']}' (1)" in note
    assert not any(CARRIED in n for n in before.parse_notes)


def test_a_newer_claude_code_release_s_own_kinds_are_noted() -> None:
    """A real 2.1.332 session (a release after the pin) writes kinds 2.1.197 does not: carried, each named."""
    _, traj = load(CLAUDE.fixture("versions") / "2.1.332" / "probe" / "session.jsonl")
    [note] = [n for n in traj.parse_notes if CARRIED in n]
    assert "'api-request' (9)" in note and "'cost-state' (2)" in note


def test_claude_code_mode_records_are_known(tmp_path: Path) -> None:
    """2.1.177 writes `{"type":"mode","mode":...,"sessionId":...}` when the permission mode changes, and first
    in a file resumed in a mode: a file that starts with one is still detected, its steps unchanged, no note."""
    original, changed = _claude(tmp_path, {"type": "mode", "mode": "acceptEdits"})
    records = _lines(changed)
    first = _write(tmp_path / "first.jsonl", [records[1], records[0], *records[2:]])
    _, before = load(original)
    for path in (changed, first):
        adapter, traj = load(path)
        assert adapter.name == "claude_code" and _shape(traj) == _shape(before) and traj.parse_notes == []


def test_codex_rebuild_keeps_an_unknown_kind_and_drops_the_ui_events() -> None:
    assert rollout.kept_record({"type": "holo_state", "payload": {}})
    assert rollout.kept_record({"type": "world_state", "payload": {}})
    assert not rollout.kept_record({"type": "token_usage_record", "payload": {}})


def _code_mode_rollout(tmp_path: Path) -> Path:
    """The exec fixture with its first call made as 0.144's code mode makes it: a freeform `exec` call whose
    input is JavaScript calling the nested tool, answered by content items (codex-rs `tools/code_mode`)."""
    records = _lines(CODEX.fixture("exec") / "rollout.jsonl")
    first = next(r for r in records if r["payload"].get("type") == "function_call")
    call_id = first["payload"]["call_id"]
    for r in records:
        payload = r["payload"]
        if payload.get("type") == "function_call" and payload["call_id"] == call_id:
            r["payload"] = {
                "type": "custom_tool_call",
                "status": "completed",
                "call_id": call_id,
                "name": "exec",
                "input": 'const r = await tools.exec_command({cmd: "cat a.txt"});\ntext(r);',
            }
        elif payload.get("type") == "function_call_output" and payload["call_id"] == call_id:
            r["payload"] = {
                "type": "custom_tool_call_output",
                "call_id": call_id,
                "output": [
                    {"type": "input_text", "text": "Script completed\nWall time 0.1 seconds\nOutput:\n"},
                    {"type": "input_text", "text": payload["output"]},
                ],
            }
    return _write(tmp_path / "rollout.jsonl", records)


def test_codex_code_mode_exec_is_an_unknown_tool_kept_with_allow_degraded(tmp_path: Path) -> None:
    adapter, traj = load(_code_mode_rollout(tmp_path))
    call = traj.steps[0].calls[0]
    assert call.tool == "exec" and call.historical is not None
    assert call.historical.content[0]["text"].startswith("Script completed")

    with pytest.raises(PlanRefused, match=r"'exec': a code-mode script .*--allow-degraded"):
        make_plan(adapter, traj, 1, allow_degraded=False)
    plan = make_plan(adapter, traj, 1, allow_degraded=True)
    assert [d.action for d in plan.degradations] == ["historical_kept"]


def test_pi_session_whose_last_line_is_a_compaction_prepares_at_its_last_step(tmp_path: Path) -> None:
    """Pi appends a compaction entry (`{type, id, parentId, timestamp, summary, firstKeptEntryId, tokensBefore,
    details, fromHook}`) after the turn it summarizes; the session ends there until the user goes on."""
    records = _lines(PI.fixture("tools") / "session.jsonl")
    messages = [r for r in records if r["type"] == "message"]
    compaction = {
        "type": "compaction",
        "id": "c0mpac7",
        "parentId": records[-1]["id"],
        "timestamp": records[-1]["timestamp"],
        "summary": "## Goal\nThe task as the user gave it.",
        "firstKeptEntryId": messages[-2]["id"],
        "tokensBefore": 12345,
        "details": {"readFiles": [], "modifiedFiles": []},
        "fromHook": False,
    }
    path = _write(tmp_path / "session.jsonl", [*records, compaction])
    adapter, traj = load(path)
    _, before = load(PI.fixture("tools") / "session.jsonl")

    assert _shape(traj) == _shape(before) and all(s.before_compaction for s in traj.steps)
    last = len(traj.steps)
    rebuilt = adapter.rebuild(traj, last, {}, tmp_path / "rebuilt")
    entries = _lines(rebuilt.native_files[0])
    assert entries[-1]["type"] != "compaction"  # the continuation starts where the compaction had not run
    assert rebuilt.expected_prefix
