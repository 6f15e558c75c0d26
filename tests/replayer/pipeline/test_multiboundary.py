"""One replay, many boundaries (`run -n a,b`, replayer/pipeline/multiboundary.py): each boundary of one replay
writes what `run -n k` of the same file writes alone (divergences, fresh outputs, the rebuilt session, the
expected prefix, the state), from one container; and the `-n` forms. Every agent's boundaries are compared
with their own runs in test_fanout (continued: the same replay, with `--continue`), one run for both."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from replayer import api
from replayer.floor.divergence import NORMALIZERS
from replayer.floor.errors import BadInput, PlanRefused
from replayer.floor.results import ReplayResult
from replayer.pipeline.engine import load
from replayer.verbs.boundaries import Sample, parse_boundaries, pick_boundaries
from tests.conftest import ROOT, replayer

FIXTURES = ROOT / "tests" / "fixtures"
AGENTS = {
    "claude_code": ("claude_code/write_edit/session.jsonl", (2, 5)),
    "codex": ("codex/exec/rollout.jsonl", (4, 9)),
    "gemini_cli": ("gemini_cli/shell/session.jsonl", (1, 2)),
    "mini_swe_agent": ("mini_swe_agent/toolcall/trajectory.traj.json", (3, 6)),
    # not `tools`: its grep answers in ripgrep's parallel walk order, which differs from run to run
    "opencode": ("opencode/two_runs/export.json", (1, 3)),
    "openhands": ("openhands/v1/conversation", (2, 4)),
    "pi": ("pi/tools/session.jsonl", (3, 5)),
}
"""A recording of each agent and the two boundaries one replay passes (the last one reruns every call)."""


_RENEWED = (
    re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"),  # fresh event ids
    re.compile(r"\b1[6-9]\d{8}(\.\d+)?\b|\b1[6-9]\d{11}\b"),  # epoch seconds and milliseconds
)


def _renewed(text: str) -> str:
    """`text` without what any two runs of the same prefix differ by: the normalizers a rerun is compared
    to its history under (times, durations, Codex's chunk ids, process ids), fresh ids and epoch times."""
    for name in ("trailing_whitespace", "iso_timestamps", "durations", "random_ids", "process_ids"):
        text = NORMALIZERS[name](text)
    for pattern in _RENEWED:
        text = pattern.sub("<R>", text)
    return text


def _value(value: Any) -> Any:
    """A JSON value with every string renewed and every epoch time masked."""
    if isinstance(value, str):
        return _renewed(value)
    if isinstance(value, bool):
        return value
    if isinstance(value, int | float):
        return _renewed(str(value))
    if isinstance(value, list):
        return [_value(v) for v in value]
    if isinstance(value, dict):
        return {_renewed(k): _value(v) for k, v in value.items()}
    return value


def _content(data: bytes) -> Any:
    """A file's content as compared: JSON (or JSON lines) renewed value by value, else renewed text; None
    for bytes that are not text (a SQLite store, a .pyc holding its source's mtime)."""
    try:
        text = data.decode()
    except UnicodeDecodeError:
        return None
    try:
        return _value(orjson.loads(data))
    except orjson.JSONDecodeError:
        pass
    try:
        return [_value(orjson.loads(line)) for line in data.splitlines() if line.strip()]
    except orjson.JSONDecodeError:
        return _renewed(text)


def _tree(root: Path, contents: bool = True) -> dict[str, Any]:
    """Every entry under `root` by its renewed path: a file's content (`_content`), None for a directory."""
    return {
        _renewed(str(p.relative_to(root))): _content(p.read_bytes()) if contents and p.is_file() else None
        for p in sorted(root.rglob("*"))
    }


def _same_result(alone: Path, passed: Path, agent: str) -> None:
    one = orjson.loads((alone / "result.json").read_bytes())
    many = orjson.loads((passed / "result.json").read_bytes())
    for field in ("after_step", "boundary_call_ids", "degradations", "hints"):
        assert many[field] == one[field], field
    assert [_renewed(n) for n in many["native_files"]] == [_renewed(n) for n in one["native_files"]]
    statuses = [(d["call_id"], d["status"], d["kind"]) for d in one["divergences"]]
    assert [(d["call_id"], d["status"], d["kind"]) for d in many["divergences"]] == statuses
    assert many["sandbox"]["skipped"] == one["sandbox"]["skipped"]
    for name in ("reruns.json", "expected_prefix.json", "continuation.json"):  # the fresh output per call
        assert _content((passed / name).read_bytes()) == _content((alone / name).read_bytes()), name
    for native in one["native_files"]:  # the rebuilt session
        renewed = _renewed(native)
        mine = next(n for n in many["native_files"] if _renewed(n) == renewed)
        assert _content((passed / mine).read_bytes()) == _content((alone / native).read_bytes()), native
    assert _tree(passed / "state" / "workspace") == _tree(alone / "state" / "workspace")
    for home in ("native", "state/home"):
        same_names(alone / home, passed / home, agent)


def same_names(alone: Path, passed: Path, agent: str) -> None:
    """The entries under `passed` by their names, as under `alone` (a home's logs and locks are the CLI's
    own, renewed every run); OpenHands' companion shell writes its .bash_history when it exits, after the
    last boundary: a boundary that a replay passes has none yet."""
    names = _tree(alone, contents=False)
    if agent == "openhands":
        names = {n: v for n, v in names.items() if not n.endswith(".bash_history")}
    assert _tree(passed, contents=False) == names, passed


@pytest.mark.agent
def test_each_boundary_of_one_replay_equals_its_own_run(tmp_path: Path) -> None:
    """The one replay writing results (no continuation), with Claude Code: every boundary equal to its own
    run, the first taken mid-replay, the last where the replay ends. What is each agent's at a boundary (its
    rerunner's home as taken mid-replay, its rebuild from the fresh outputs so far, its reruns) is the same
    in a continued replay, whose boundaries test_fanout compares with their own runs for every agent
    (`_same_continuation` checks what `_same_result` checks of the prefix); what this run adds, the state
    copied at each boundary and the result committed mid-replay, is the engine's alone."""
    agent = "claude_code"
    rel, boundaries = AGENTS[agent]
    source = FIXTURES / rel
    workspace = source.parent / "workspace"
    outcomes = api.run_boundaries(source, list(boundaries), workspace, tmp_path / "many")
    assert sorted(outcomes) == list(boundaries)
    results = [outcomes[k] for k in boundaries]
    assert all(isinstance(r, ReplayResult) for r in results), results
    assert len({r.container for r in results if isinstance(r, ReplayResult)}) == 1, "one container"
    reruns = [d for r in results if isinstance(r, ReplayResult) for d in r.divergences if d.kind == "rerun"]
    assert reruns, "the replay reran calls"
    for k in boundaries:
        api.run(source, k, workspace, tmp_path / f"alone-{k}")
        _same_result(tmp_path / f"alone-{k}", tmp_path / "many" / f"after-{k}", agent)


def test_the_n_forms() -> None:
    assert parse_boundaries("all") == "all"
    assert parse_boundaries("3,7,10-12") == [3, 7, 10, 11, 12]
    assert parse_boundaries(" sample:4:9 ") == Sample(sample=4, seed=9)
    assert parse_boundaries("sample:2") == Sample(sample=2, seed=0)
    for bad in ("", "3,,4", "5-2", "-1", "sample:0", "sample:x", "every:2"):
        with pytest.raises(BadInput, match="-n"):
            parse_boundaries(bad)


def test_picked_boundaries_are_valid_ones() -> None:
    _, traj = load(FIXTURES / AGENTS["pi"][0])
    assert pick_boundaries("all", traj) == [0, 1, 2, 3, 4, 5]
    assert pick_boundaries([5, 2, 2], traj) == [2, 5]
    sample = pick_boundaries(Sample(sample=3, seed=1), traj)
    assert len(sample) == 3 and sample == sorted(sample) and set(sample) <= {0, 1, 2, 3, 4, 5}
    assert pick_boundaries(Sample(sample=3, seed=1), traj) == sample, "a seed picks the same sample"
    with pytest.raises(PlanRefused, match="boundary 6 is not one of 0..5"):
        pick_boundaries([2, 6], traj)


@pytest.mark.agent
def test_the_command_writes_a_directory_a_boundary_and_refuses_what_it_cannot(tmp_path: Path) -> None:
    source = FIXTURES / AGENTS["claude_code"][0]
    args = ["run", str(source), "-w", str(source.parent / "workspace"), "-o", str(tmp_path / "out")]
    proc = replayer(*args, "-n", "1,3", "--json")
    assert proc.returncode == 0, proc.stderr
    shown = orjson.loads(proc.stdout)["boundaries"]
    assert sorted(shown) == ["1", "3"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["after-1", "after-3"]
    assert orjson.loads((tmp_path / "out" / "after-3" / "result.json").read_bytes())["after_step"] == 3
    # an existing boundary directory is that boundary's refusal; the others are written
    again = replayer(*args, "-n", "1,2", "--json")
    assert again.returncode == 7, again.stderr
    outcomes = orjson.loads(again.stdout)["boundaries"]
    assert outcomes["1"]["error_kind"] == "output" and outcomes["2"]["after_step"] == 2
    assert (tmp_path / "out" / "after-2" / "result.json").is_file()
    usage = replayer(*args, "-n", "2-", "--json")
    assert usage.returncode == 2 and "--after-step" in usage.stderr
    tape = ("--continue", "--upstream", "mock", "--record-cassette", str(tmp_path / "tape"))
    assert replayer(*args, "-n", "1,2", *tape).returncode == 2, "one cassette records one continuation"


def test_a_boundary_beyond_the_valid_ones_refuses_before_anything_starts(tmp_path: Path) -> None:
    source = FIXTURES / AGENTS["pi"][0]
    with pytest.raises(PlanRefused, match="boundary 9"):
        api.run_boundaries(source, [2, 9], source.parent / "workspace", tmp_path / "out")
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir()), "nothing started"


@pytest.mark.parametrize("boundaries", ["99", "1,99", "2-99"])
def test_a_boundary_the_trajectory_lacks_exits_4_alone_or_in_a_list(tmp_path: Path, boundaries: str) -> None:
    """One rule (docs/cli.md, exit 4): `-n 50` and `-n 3,99` are the same refusal, before anything starts."""
    source = FIXTURES / AGENTS["pi"][0]
    out = tmp_path / "out"
    proc = replayer(
        "run", str(source), "-n", boundaries, "-w", str(source.parent / "workspace"), "-o", str(out)
    )
    assert proc.returncode == 4 and "plan_refused: boundary" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()
