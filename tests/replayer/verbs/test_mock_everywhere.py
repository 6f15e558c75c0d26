"""The built-in mock model wherever an upstream is taken, with no key: compare's variants (bare `mock` and a
script file), the Python API, and the token budgets it bills against. Real containers, the real pinned Claude
Code CLI (run --continue and cassette recording with the mock: tests/adapters/claude_code; a batch manifest's
continuation with the mock: test_fanout's batch test)."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

import replayer as api
from replayer.pipeline.mock import FINAL_TEXT
from tests.conftest import CLAUDE, replayer

pytestmark = [pytest.mark.docker, pytest.mark.agent]

FIXTURE = CLAUDE.fixture("single")
SESSION = FIXTURE / "session.jsonl"
NO_KEY = {"ANTHROPIC_API_KEY": "", "REPLAYER_UPSTREAM": ""}


def test_compare_variants_take_the_mock_and_a_script(tmp_path: Path) -> None:
    script = tmp_path / "turns.json"
    turns = [
        {"blocks": [{"type": "tool_use", "id": "toolu_mock_1", "name": "Bash", "input": {"command": "ls"}}]}
    ]
    script.write_bytes(orjson.dumps({"turns": turns, "final_text": "Scripted end."}))
    out = tmp_path / "cmp"
    args = ["compare", str(SESSION), "-n", "1", "-w", str(FIXTURE / "workspace"), "-o", str(out)]
    args += [
        "--upstream",
        "mock",
        "--variant",
        "base=",
        "--variant",
        f"scripted=upstream=mock:{script}",
        "--json",
    ]
    proc = replayer(*args, env=NO_KEY)
    assert proc.returncode == 0, proc.stderr
    runs = {r["variant"]: r for r in orjson.loads((out / "compare.json").read_bytes())["runs"]}
    assert {name: r["status"] for name, r in runs.items()} == {"base": "ok", "scripted": "ok"}
    ended = {name: (r["continuation"]["agent_status"], r["continuation"]["mock"]) for name, r in runs.items()}
    assert ended == {"base": ("completed", True), "scripted": ("completed", True)}
    steps = {name: r["continuation"]["steps_used"] for name, r in runs.items()}
    assert steps == {"base": 1, "scripted": 2}, "the script's tool call, then its closing answer"


def test_the_api_takes_the_mock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in NO_KEY.items():
        monkeypatch.setitem(os.environ, name, value)
    result = api.run(
        SESSION, 1, FIXTURE / "workspace", tmp_path / "out", continue_agent=True, upstream="mock"
    )
    assert result.continuation is not None and result.continuation.mock
    assert result.continuation.agent_status == "completed"
    continued = tmp_path / "out" / result.continuation.files["continued_session"]
    assert FINAL_TEXT.encode() in continued.read_bytes()


def _billing_script(tmp_path: Path) -> Path:
    """A mock script whose first answer (a tool call) bills 100,000 tokens."""
    script = tmp_path / "turns.json"
    turns = [
        {
            "blocks": [{"type": "tool_use", "id": "toolu_b_1", "name": "Bash", "input": {"command": "ls"}}],
            "usage": {"input_tokens": 100_000, "output_tokens": 20},
        }
    ]
    script.write_bytes(orjson.dumps({"turns": turns}))
    return script


def test_a_budget_the_user_sets_spans_the_compares_variants_and_boundaries(tmp_path: Path) -> None:
    """`compare -n 1,2` of two variants, one run at a time: boundary 1's first variant's first answer bills
    100,000 tokens of the 120,000 the user set, and every run after it, the second variant's at that boundary
    and both at boundary 2, has no room left for a request's worst case (at least the 32,000 output Claude Code
    asks for): its first request is held. One ledger for the compare, across its variants and its boundaries.
    (A bill past Claude Code's context window would make it compact the conversation instead.)"""
    fixture = CLAUDE.fixture("write_edit")
    script = _billing_script(tmp_path)
    out = tmp_path / "cmp"
    args = ["compare", str(fixture / "session.jsonl"), "-n", "1,2", "-w", str(fixture / "workspace")]
    args += ["-o", str(out), "-j", "1", "--upstream", f"mock:{script}", "--max-tokens", "120000"]
    proc = replayer(*args, "--variant", "a=", "--variant", "b=", "--json", env=NO_KEY)
    assert proc.returncode == 0, proc.stderr
    ended = {}
    for k in (1, 2):
        for run in orjson.loads((out / f"after-{k}" / "compare.json").read_bytes())["runs"]:
            ended[k, run["variant"]] = (
                run["continuation"]["agent_status"],
                run["continuation"]["steps_used"],
            )
    assert ended == {
        (1, "a"): ("max_tokens", 1),
        (1, "b"): ("max_tokens", 0),  # the variants share the budget
        (2, "a"): ("max_tokens", 0),  # so do the boundaries
        (2, "b"): ("max_tokens", 0),
    }
    assert orjson.loads((out / "token-ledger.json").read_bytes())["charged"] >= 100_000


def test_a_budget_the_user_sets_spans_the_batch(tmp_path: Path) -> None:
    """Two continue jobs of one batch (boundaries 1 and 2 of one replay) under `batch --max-tokens 120000`:
    the first answer bills 100,000 tokens, so no other request's worst case fits what is left, whichever job
    sends it. Both jobs are `cut` (not `done`), each with the batch's budget named, and the batch's one
    ledger holds what was billed. (Without it, each continuation has its own budget and both complete.)"""
    script = tmp_path / "turns.json"
    turns = [
        {
            "blocks": [{"type": "tool_use", "id": "toolu_b_1", "name": "Bash", "input": {"command": "ls"}}],
            "usage": {"input_tokens": 100_000, "output_tokens": 20},
        }
    ]
    script.write_bytes(orjson.dumps({"turns": turns}))
    line = {
        "trajectory": str(SESSION),
        "boundaries": [1, 2],
        "mode": "continue",
        "workspace": str(FIXTURE / "workspace"),
        "continuation": {"upstream": f"mock:{script}"},
    }
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(orjson.dumps(line) + b"\n")
    out = tmp_path / "out"
    args = ["batch", str(manifest), "-o", str(out), "--trust-manifest", "-j", "1", "--max-tokens", "120000"]
    proc = replayer(*args, "--json", env=NO_KEY)
    assert proc.returncode == 0, proc.stderr
    summary = orjson.loads((out / "batch.json").read_bytes())
    assert (summary["jobs"], summary["done"], summary["cut"]) == (2, 0, 2), summary
    for outcome in summary["outcomes"]:
        assert outcome["status"] == "cut" and outcome["error_kind"] == "max_tokens"
        assert "does not fit the batch's 120000 (replayer batch --max-tokens" in outcome["error"]
    conts = [
        orjson.loads((job / "result.json").read_bytes())["continuation"] for job in (out / "jobs").iterdir()
    ]
    assert sorted((c["agent_status"], c["steps_used"]) for c in conts) == [
        ("max_tokens", 0),
        ("max_tokens", 1),
    ]
    ledger = orjson.loads((out / "token-ledger.json").read_bytes())
    assert 100_000 <= ledger["charged"] <= ledger["limit"] == 120_000
    # a resumed batch reports them cut again, without running them
    again = replayer(*args, "--json", env=NO_KEY)
    assert again.returncode == 0 and orjson.loads(again.stdout)["cut"] == 2, again.stderr
