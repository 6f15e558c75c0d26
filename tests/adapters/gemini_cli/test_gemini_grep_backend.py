"""Gemini CLI's grep_search runs on ripgrep when the CLI finds it, else on its own grep fallback, and the
observation's wording says which (adapters/gemini_cli/grep_backend.py). Both recordings are the real CLI 0.61.0's:
tests/fixtures/gemini_cli/shell with ripgrep (`in path "."`), grep_fallback with `tools.useRipgrep` false
(`in the workspace directory`, and a file given as dir_path refused as not a directory)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replayer.adapters.gemini_cli.grep_backend import recorded_backend, wording
from replayer.bridges.gemini import ScriptedGemini
from replayer.bridges.scripted import Script, TextBlock, Turn
from replayer.floor.divergence import model_text
from replayer.pipeline.engine import load
from tests.conftest import GEMINI, ROOT, replayer
from tests.support.continuing import KEY

FALLBACK = GEMINI.fixture("grep_fallback")
RIPGREP = GEMINI.fixture("shell")
FIELD = ROOT / "tests" / "fixtures" / "field" / "gemini_cli" / "aim-benchmark-control-pro-run4.json"


def _greps(native: Path) -> list[str]:
    _, traj = load(native)
    return [
        model_text(c.historical)
        for s in traj.steps
        for c in s.calls
        if c.tool == "grep_search" and c.historical is not None
    ]


def test_each_wording_names_its_backend() -> None:
    fallback = _greps(FALLBACK / "session.jsonl")
    assert [wording(t) for t in fallback] == ["grep", "grep", "grep"]
    assert [wording(t) for t in _greps(RIPGREP / "session.jsonl")] == ["ripgrep"]
    # a dir_path that is a folder reads the same on both: the public session names none
    [field] = _greps(FIELD)
    assert field.startswith('Found 40 matches for pattern "distinct" in path "') and wording(field) is None


def test_the_parse_says_when_the_fallback_recorded_the_session() -> None:
    _, fallback = load(FALLBACK / "session.jsonl")
    _, ripgrep = load(RIPGREP / "session.jsonl")
    assert recorded_backend(fallback.steps) == "grep" and recorded_backend(ripgrep.steps) == "ripgrep"
    assert any("tools.useRipgrep false" in n for n in fallback.parse_notes)
    assert not any("ripgrep" in n for n in ripgrep.parse_notes)


def _run(fixture: Path, after: int, out: Path) -> dict:
    proc = replayer(
        "run", str(fixture / "session.jsonl"), "-n", str(after), "-w", str(fixture / "workspace"), "-o",
        str(out), "--json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return dict(orjson.loads(proc.stdout))


@pytest.mark.agent
def test_a_session_recorded_without_ripgrep_reruns_without_it(tmp_path: Path) -> None:
    """The base image has ripgrep: without the recorded backend the three calls would come back `in path "."`
    and a file searched instead of refused; with it they are exact, and the rebuilt home the continuation
    starts from keeps the setting."""
    result = _run(FALLBACK, 3, tmp_path / "fallback")
    assert [d["status"] for d in result["divergences"]] == ["exact", "exact", "exact"]
    settings = orjson.loads(
        (tmp_path / "fallback" / "native" / "home" / ".gemini" / "settings.json").read_bytes()
    )
    assert settings["tools"] == {"useRipgrep": False}


@pytest.mark.agent
def test_a_session_recorded_with_ripgrep_reruns_with_it(tmp_path: Path) -> None:
    result = _run(RIPGREP, 2, tmp_path / "ripgrep")
    grep = [d for d in result["divergences"] if d["tool"] == "grep_search"]
    assert [d["status"] for d in grep] == ["exact"]
    settings = orjson.loads(
        (tmp_path / "ripgrep" / "native" / "home" / ".gemini" / "settings.json").read_bytes()
    )
    assert "tools" not in settings


@pytest.mark.agent
def test_the_continuation_offers_the_recorded_grep(tmp_path: Path) -> None:
    """The continued CLI declares the GrepTool's grep_search (no ripgrep-only `fixed_strings`, `no_ignore`),
    the one the session was recorded with."""
    out = tmp_path / "continued"
    script = Script(turns=[Turn(blocks=[TextBlock(text="Done.")])], model="gemini-2.5-flash")
    with ScriptedGemini(script, expected_key=KEY) as upstream:
        proc = replayer(
            "run", str(FALLBACK / "session.jsonl"), "-n", "3", "-w", str(FALLBACK / "workspace"), "-o", str(out),
            "--continue", "--upstream", upstream.url, env={"GEMINI_API_KEY": KEY},
        )  # fmt: skip
        first = next(r.body for r in upstream.log if r.main_thread)
    assert proc.returncode == 0, proc.stderr
    [grep] = [
        d for group in first["tools"] for d in group["functionDeclarations"] if d["name"] == "grep_search"
    ]
    offered = set(grep["parametersJsonSchema"]["properties"])
    assert "pattern" in offered and not offered & {"fixed_strings", "no_ignore"}
