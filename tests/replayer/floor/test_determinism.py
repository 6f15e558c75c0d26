"""The determinism rate's classifier and counts (replayer/floor/determinism.py), on observations the real
CLIs recorded: the same command run twice by Codex (a fresh chunk id and wall time), the same glob run by two
OpenCode versions (another walk order), Gemini CLI's process group ids."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from replayer.floor.determinism import (
    EXCERPT_CHARS,
    EXCERPT_LINES,
    Determinism,
    determinism,
    summary,
    varying,
)
from replayer.floor.divergence import model_text
from replayer.floor.results import ReplayResult, RerunRecord
from replayer.floor.trajectory import ToolCall
from replayer.floor.verdicts import shipped
from replayer.pipeline.engine import load
from replayer.verbs.compatibility import table
from replayer.verbs.repeat import reruns_of
from tests.conftest import CODEX, replayer

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
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
    assert (c2.excerpt_of, c2.excerpt) == (None, []), "reproduced every time: nothing to show"
    assert c1.excerpt_of == 2 and c1.excerpt[0].startswith("@@ ")
    removed = {line[1:] for line in c1.excerpt if line.startswith("-")}
    added = {line[1:] for line in c1.excerpt if line.startswith("+")}
    assert removed and removed <= set(failing.split("\n")) and added <= set(again.split("\n"))
    assert removed.isdisjoint(added), "only the lines that differ"
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
    shown = (found.calls[1].excerpt_of, found.calls[1].excerpt)
    assert shown == ((2, ["not rerun"]) if missing else (None, []))


def test_an_excerpt_is_the_first_differing_lines_within_bounds() -> None:
    recorded = "\n".join(f"line {n} " + "x" * 1000 for n in range(100))
    fresh = recorded.replace("x", "y")
    [call] = determinism([_records([("c1", "t", fresh)], {"c1": recorded})]).calls
    assert len(call.excerpt) == EXCERPT_LINES and all(len(line) <= EXCERPT_CHARS for line in call.excerpt)
    assert call.excerpt[:3] == ["@@ -1,100 +1,100 @@", "-line 0 " + "x" * 192, "-line 1 " + "x" * 192]


@pytest.mark.agent
def test_run_repeat_rates_a_users_prefix(tmp_path: Path) -> None:
    """`run --repeat 2` on the Codex patch recording, 7 steps in two fresh containers: the six apply_patch
    calls print the same thing every run (exact), the exec_command a fresh chunk id (never exact, `ids`).
    The output directory is the first run's, with determinism.json beside its result."""
    source = CODEX.fixture("patch")
    out = tmp_path / "out"
    proc = replayer(
        "run", str(source / "rollout.jsonl"), "-n", "7", "-w", str(source / "workspace"), "-o", str(out),
        "--repeat", "2", "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    shown = orjson.loads(proc.stdout)
    written = Determinism.model_validate_json((out / "determinism.json").read_bytes())
    assert shown["determinism"] == written.model_dump(mode="json")
    assert (written.repeats, written.reruns) == (2, 14)
    patch, shell = written.tools
    assert (patch.tool, patch.calls, patch.exact, patch.rate, patch.varies) == ("apply_patch", 6, 12, 1.0, [])
    assert (shell.tool, shell.calls, shell.exact, shell.rate) == ("exec_command", 1, 0, 0.0)
    assert "ids" in shell.varies and "other" not in shell.varies
    [call] = [c for c in written.calls if c.tool == "exec_command"]
    assert not call.stable  # each container's chunk id is its own
    # the first run's result, unchanged by the repeats: its reruns are the first repeat's
    first = ReplayResult.model_validate_json((out / "result.json").read_bytes())
    assert first.after_step == 7 and shown["container"] == first.container
    firsts = reruns_of(out)
    assert [r.call_id for r in firsts] == [c.call_id for c in written.calls]


def test_repeat_takes_one_boundary() -> None:
    source = CODEX.fixture("patch")
    proc = replayer(
        "run", str(source / "rollout.jsonl"), "-n", "1,2", "-w", str(source / "workspace"), "-o", "/nonexistent/x",
        "--repeat", "2",
    )  # fmt: skip
    assert proc.returncode == 2 and "--repeat takes one boundary" in proc.stderr


def test_the_compatibility_doc_publishes_a_verdicts_rate_per_tool() -> None:
    failing = _codex("codex/exec/rollout.jsonl", FAILING)
    again = _codex("codex/versions/0.125.0/probe/rollout.jsonl", FAILING)
    runs = [_records([("c1", "exec_command", text)], {"c1": failing}) for text in (failing, again, again)]
    [shipped_verdict] = [v for v in shipped() if (v.agent, v.version) == ("codex", "0.125.0")]
    verdict = shipped_verdict.model_copy(update={"determinism": None})
    rated = verdict.model_copy(update={"determinism": determinism(runs)})
    rows = table([rated]).splitlines()
    assert "| codex | 0.125.0 | `exec_command` | 1 | 3 | 1/3 | 0.33 | ids, times |" in rows
    assert not any(
        "| 0.125.0 | `exec_command` |" in r for r in table([verdict]).splitlines()
    )  # no rate, no row
    failed = rated.model_copy(update={"passed": False})
    assert not any("| 0.125.0 | `exec_command` |" in r for r in table([failed]).splitlines())


def test_what_both_share_is_not_what_varies() -> None:
    """A commit hash both lines print, beside a clock time only one changed: times, not ids."""
    assert varying("commit 3f2a9c1 at 10:00:01", "commit 3f2a9c1 at 10:00:02") == ["times"]
    assert varying("commit 3f2a9c1 at 10:00:01", "commit 9b7e0d4 at 10:00:02") == ["ids", "times"]
