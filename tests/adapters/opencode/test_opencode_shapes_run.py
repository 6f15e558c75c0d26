"""OpenCode shapes of issue 35 item 6 rerun in the sandbox by the pinned CLI: a server's event stream saved
as one JSON array, like the stream it came from (the recorded `opencode serve` session's calls, exact);
a `run --format json` log without --task (the published sandcastle log: a stand-in prompt starts the CLI)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.conftest import ROOT, replayer

pytestmark = [pytest.mark.docker, pytest.mark.agent]

API = ROOT / "tests" / "fixtures" / "opencode" / "server" / "api"
SANDCASTLE = ROOT / "tests" / "fixtures" / "field" / "opencode" / "sandcastle-run-format-json-stdout.jsonl"


def test_an_event_array_reruns_exact(tmp_path: Path) -> None:
    raw = (API / "event.sse").read_bytes()
    values = [orjson.loads(line[5:]) for line in raw.splitlines() if line.startswith(b"data:")]
    array = tmp_path / "events.json"
    array.write_bytes(orjson.dumps(values, option=orjson.OPT_INDENT_2))
    out = tmp_path / "out"
    replayer("run", str(array), "-n", "3", "-w", str(API / "workspace"), "-o", str(out), "--json", check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    assert {d["step"] for d in result["divergences"]} == {1, 2, 3}
    assert all(d["status"] in ("exact", "normalized_equal") for d in result["divergences"]), result[
        "divergences"
    ]


def test_a_log_without_its_prompt_reruns(tmp_path: Path) -> None:
    """Its workspace is not published: the reads differ, but each is rerun by the CLI and rebuilt."""
    out, workspace = tmp_path / "out", tmp_path / "ws"
    workspace.mkdir()
    replayer("run", str(SANDCASTLE), "-n", "1", "-w", str(workspace), "-o", str(out), "--json", check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    assert [d["tool"] for d in result["divergences"]] == ["read", "read", "read"]
    assert all(d["fresh_excerpt"] for d in result["divergences"])
    assert any("stand-in" in n for n in result["parse_notes"])
