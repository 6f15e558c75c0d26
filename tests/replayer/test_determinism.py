"""The determinism rate's classifier and counts (replayer/floor/determinism.py), on observations the real
CLIs recorded: the same command run twice by Codex (a fresh chunk id and wall time), the same glob run by two
OpenCode versions (another walk order), Gemini CLI's process group ids."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from replayer.floor.determinism import determinism, summary, varying
from replayer.floor.divergence import model_text
from replayer.floor.models import RerunRecord, ToolCall
from replayer.pipeline.engine import load

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FAILING = "echo out; sleep 0.2; echo err >&2; exit 3"


def _observed(native: str, which: Callable[[ToolCall], bool]) -> str:
    _, traj = load(FIXTURES / native)
    found = [c.historical for s in traj.steps for c in s.calls if which(c) and c.historical is not None]
    assert found, f"{native} has no such call"
    return model_text(found[0])


def _codex(native: str, cmd: str) -> str:
    return _observed(native, lambda c: c.tool == "exec_command" and c.input.get("cmd") == cmd)


def test_codex_exec_command_varies_by_its_chunk_id_and_wall_time() -> None:
    one = _codex("codex/exec/rollout.jsonl", FAILING)
    two = _codex("codex/versions/0.125.0/probe/rollout.jsonl", FAILING)
    assert one != two and "Chunk ID" in one
    assert varying(one, two) == ["ids", "times"]
    assert varying(one, one) == []


def test_another_output_is_other_even_beside_an_id() -> None:
    """`cat a.txt` in two workspaces: the chunk id differs, and so does what the file holds."""
    one = _codex("codex/exec/rollout.jsonl", "cat a.txt")
    two = _codex("codex/continued/rollout.jsonl", "cat a.txt")
    assert varying(one, two) == ["ids", "other"]


def test_a_listing_in_another_order_is_walk_order() -> None:
    glob = "opencode/versions/{}/probe/events.jsonl"
    one = _observed(glob.format("1.1.65"), lambda c: c.tool == "glob")
    two = _observed(glob.format("1.15.13"), lambda c: c.tool == "glob")
    assert one != two and sorted(one.split("\n")) == sorted(two.split("\n"))
    assert varying(one, two) == ["walk_order"]


def test_gemini_process_group_ids() -> None:
    out = _observed(
        "gemini_cli/shell/session.jsonl", lambda c: "Process Group PGID: " in model_text(c.historical)
    )
    again = out.replace("Process Group PGID: ", "Process Group PGID: 1")
    assert varying(out, again) == ["process_ids"]


def _records(step_texts: list[tuple[str, str, str]], historical: dict[str, str]) -> list[RerunRecord]:
    return [
        RerunRecord(step=i, call_id=cid, tool=tool, historical=historical[cid], fresh=text)
        for i, (cid, tool, text) in enumerate(step_texts, 1)
    ]


def test_the_rate_counts_a_fresh_id_as_not_exact_and_a_deterministic_call_as_exact() -> None:
    failing = _codex("codex/exec/rollout.jsonl", FAILING)
    again = _codex("codex/versions/0.125.0/probe/rollout.jsonl", FAILING)
    listing = "a.txt\nsub"
    recorded = {"c1": failing, "c2": listing}
    runs = [
        _records([("c1", "exec_command", failing), ("c2", "list", listing)], recorded),
        _records([("c1", "exec_command", again), ("c2", "list", listing)], recorded),
        _records([("c1", "exec_command", again), ("c2", "list", listing)], recorded),
    ]
    found = determinism(runs)
    assert (found.repeats, found.reruns, found.exact) == (3, 6, 4)
    exec_, listed = found.tools
    assert (exec_.tool, exec_.exact, exec_.reruns, exec_.varies) == ("exec_command", 1, 3, ["ids", "times"])
    assert (listed.tool, listed.exact, listed.rate, listed.varies) == ("list", 3, 1.0, [])
    c1, c2 = found.calls
    assert not c1.stable and c2.stable
    assert summary(found).startswith(
        "4/6 exact (0.667) over 3 repeats; exec_command 1/3 (ids, times); list 3/3"
    )


def test_a_call_stable_across_repeats_but_not_the_recorded_one_is_stable_and_not_exact() -> None:
    recorded = {"c1": "Process Group PGID: 63"}
    runs = [_records([("c1", "run_shell_command", "Process Group PGID: 12")], recorded)] * 2
    [call] = determinism(runs).calls
    assert call.stable and call.exact == 0 and call.varies == ["process_ids"]


@pytest.mark.parametrize("missing", [True, False])
def test_a_call_missing_from_a_repeat_is_not_exact(missing: bool) -> None:
    recorded = {"c1": "x", "c2": "y"}
    first = _records([("c1", "t", "x"), ("c2", "t", "y")], recorded)
    second = first[:1] if missing else first
    found = determinism([first, second])
    assert found.exact == (3 if missing else 4)
    assert ("other" in found.calls[1].varies) is missing
