"""The key fidelity test: for every recording and every boundary N, `prepare --after-step N` yields
the messages the real CLI sent right after step N (normalized as documented in docs/adapters/claude_code.md)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replayer.adapters.claude_code import session, wire
from replayer.pipeline.engine import load
from tests.conftest import CLAUDE
from tests.support.prefixes import prepared


def _request_after(name: str, call_ids: list[str]) -> list[dict]:
    for req in CLAUDE.requests(name):
        messages = wire.normalize_request(req["body"]["messages"])
        last = messages[-1]["content"]
        ids = [b.get("tool_use_id") for b in last if b.get("type") == "tool_result"]
        if ids == call_ids:
            return messages
    raise AssertionError(f"no recorded request ends with the results of {call_ids}")


def _boundaries() -> list[tuple[str, int]]:
    out = []
    for name in CLAUDE.scenarios:
        _, traj = load(CLAUDE.fixture(name) / "session.jsonl")
        out += [(name, n) for n in range(0, len(traj.steps) + 1)]
    return out


@pytest.mark.parametrize(("name", "after_step"), _boundaries())
def test_expected_prefix_equals_the_request_the_cli_sent(
    name: str, after_step: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = prepared(tmp_path_factory, CLAUDE.fixture(name) / "session.jsonl", after_step)
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    _, traj = load(CLAUDE.fixture(name) / "session.jsonl")
    if after_step == 0:
        first = wire.normalize_request(CLAUDE.requests(name)[0]["body"]["messages"])
        assert expected == first
    else:
        assert expected == _request_after(name, [c.id for c in traj.steps[after_step - 1].calls])
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["after_step"] == after_step
    assert all(d["status"] == "historical_kept" for d in result["divergences"])


def test_normalization_drops_only_the_envelope() -> None:
    request = CLAUDE.requests("parallel")[-1]["body"]["messages"]
    normalized = wire.normalize_request(request)
    assert not any(m["role"] == "system" for m in normalized)
    assert "cache_control" not in orjson.dumps(normalized).decode()
    assert normalized[0]["content"] == [{"type": "text", "text": "Look at both files at once."}]
    # the raw request carries the envelope that normalization removed
    assert request[0]["content"][0]["text"].startswith("<system-reminder>\nAs you answer")
    assert any(m["role"] == "system" for m in request)


def test_a_leaf_tied_with_its_history_in_time_is_rebuilt_latest(tmp_path: Path) -> None:
    """1.0.x resumes from the latest record (the first of equal ones); a session it resumed once holds
    its copied history under one timestamp. The rebuilt leaf moves 1 ms past the rest; the rest stays."""
    source = CLAUDE.fixture("versions") / "1.0.108" / "probe" / "session.jsonl"
    adapter, traj = load(source)
    rebuilt = adapter.rebuild(traj, 3, {}, tmp_path / "native")
    records = [orjson.loads(line) for line in rebuilt.native_files[0].read_bytes().splitlines()]
    chain = [r for r in records if r.get("type") in ("user", "assistant")]
    stamps = {
        r["uuid"]: r["timestamp"] for r in traj.native_as(session.Native).session.records if "uuid" in r
    }
    assert [r["timestamp"] for r in chain[:-1]] == [stamps[r["uuid"]] for r in chain[:-1]]
    assert len(set(stamps[r["uuid"]] for r in chain)) == 1, "the recording's tie"
    assert chain[-1]["timestamp"] > chain[-2]["timestamp"]


def test_the_gate_drops_reminders_the_cli_put_anywhere_in_a_user_message_of_the_prefix() -> None:
    """Claude Code 2.1.332 puts an attribution reminder between the tool results and the next prompt
    that share a user message (seen by `replayer verify`); anything else extra is still a difference."""
    from replayer.adapters.claude_code.gate import _without_reminders

    result = {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"}
    prompt = {"type": "text", "text": "Run the probe."}
    reminder = {
        "type": "text",
        "text": "<system-reminder>\nAttribution for git commits ...\n</system-reminder>",
    }
    assert _without_reminders([result, reminder, prompt], [result, prompt]) == [result, prompt]
    assert _without_reminders([reminder, result, prompt], [result, prompt]) == [result, prompt]
    assert _without_reminders([result, {"type": "text", "text": "other"}, prompt], [result, prompt]) is None
    assert _without_reminders([result, reminder], [result, prompt]) is None
