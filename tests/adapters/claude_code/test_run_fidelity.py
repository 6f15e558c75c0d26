"""`replayer run` in a real container, the pinned CLI driven: every rerun of every recording reproduces
its observations (exactly, or but for the random id the CLI gives a backgrounded or persisted output), and
a changed workspace shows up as a divergence in the rebuilt session."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from replayer.pipeline.engine import load
from tests.conftest import CLAUDE, replayer
from tests.support.prefixes import replayed

pytestmark = pytest.mark.agent


def _records(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _run(name: str, after_step: int, out: Path, workspace: Path | None = None, *extra: str) -> dict:
    ws = workspace or CLAUDE.fixture(name) / "workspace"
    args = ["run", str(CLAUDE.fixture(name) / "session.jsonl"), "--after-step", str(after_step)]
    replayer(*args, "--workspace", str(ws), "--out", str(out), "--json", *extra, check=True)
    return orjson.loads((out / "result.json").read_bytes())


def _in_its_workspace(factory: pytest.TempPathFactory, name: str, after_step: int) -> Path:
    """`run -n K --allow-degraded` of the recording in its own workspace: one replay to its last boundary
    (and to 3 of write_edit, which test_writes_land_in_the_workspace_copy_not_the_input reads; its calls are
    all rerun, so --allow-degraded changes nothing there), each boundary as `run -n K` writes it alone."""
    _, traj = load(CLAUDE.fixture(name) / "session.jsonl")
    boundaries = sorted({len(traj.steps), *([3] if name == "write_edit" else [])})
    workspace = CLAUDE.fixture(name) / "workspace"
    source = CLAUDE.fixture(name) / "session.jsonl"
    return replayed(factory, source, boundaries, after_step, "-w", str(workspace), "--allow-degraded")


@pytest.mark.parametrize("name", CLAUDE.scenarios)
def test_rerun_reproduces_every_observation(name: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    _, traj = load(CLAUDE.fixture(name) / "session.jsonl")
    out = _in_its_workspace(tmp_path_factory, name, len(traj.steps))
    result = orjson.loads((out / "result.json").read_bytes())
    assert len(result["divergences"]) == sum(len(s.calls) for s in traj.steps)
    for d in result["divergences"]:
        if d["kind"] != "rerun":
            assert d["status"] == "historical_kept", d
        elif d["status"] != "exact":
            assert d["status"] == "normalized_equal" and d["normalizers"] == ["random_ids"], d
    unknown = [d["call_id"] for d in result["divergences"] if d["kind"] == "unknown"]
    assert [g["call_id"] for g in result["degradations"]] == unknown  # each one kept, and recorded
    # toolUseResult (never sent to the model) is rebuilt consistently too, the task id the fresh one
    original = {
        r.get("uuid"): r.get("toolUseResult") for r in _records(CLAUDE.fixture(name) / "session.jsonl")
    }
    rebuilt = _records(out / result["native_files"][0])
    home = out / "state" / "home"
    for rec in rebuilt:
        if "toolUseResult" in rec:
            fresh, recorded = rec["toolUseResult"], original[rec["uuid"]]
            if isinstance(fresh, dict) and isinstance(recorded, dict):  # an error's is its text
                fresh, recorded = dict(fresh), dict(recorded)
                for key in ("backgroundTaskId", "persistedOutputPath"):
                    assert (key in fresh) == (key in recorded), (rec["uuid"], key)
                    fresh.pop(key, None), recorded.pop(key, None)
            assert fresh == recorded, rec["uuid"]
            structured = rec["toolUseResult"]
            if isinstance(structured, dict) and structured.get("persistedOutputPath"):
                # where the observation says the full output is, the rebuilt home has it
                path = structured["persistedOutputPath"]
                data = (home / path.removeprefix("/home/replay/")).read_bytes()
                assert len(data) == structured["persistedOutputSize"], path
                assert data.decode().startswith(structured["stdout"]), path


def test_a_changed_file_diverges_and_lands_in_the_rebuilt_session(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    shutil.copytree(CLAUDE.fixture("single") / "workspace", workspace)
    (workspace / "a.txt").write_text("changed\n")
    before = (workspace / "a.txt").stat().st_mtime_ns
    result = _run("single", 2, tmp_path / "out", workspace)
    by_id = {d["call_id"]: d for d in result["divergences"]}
    assert by_id["toolu_single_01"]["status"] == "different"
    assert by_id["toolu_single_01"]["historical_excerpt"] == "hi"
    assert by_id["toolu_single_01"]["fresh_excerpt"] == "changed"
    assert by_id["toolu_single_02"]["status"] == "exact"
    rebuilt = _records(tmp_path / "out" / result["native_files"][0])
    results = [
        b for r in rebuilt if r.get("type") == "user" for b in r["message"]["content"] if isinstance(b, dict)
    ]
    first = next(b for b in results if b.get("tool_use_id") == "toolu_single_01")
    assert first["content"] == "changed"
    expected = orjson.loads((tmp_path / "out" / "expected_prefix.json").read_bytes())
    assert expected[2]["content"][0]["content"] == "changed"
    # the user's workspace is never touched
    assert (workspace / "a.txt").read_text() == "changed\n"
    assert (workspace / "a.txt").stat().st_mtime_ns == before


def test_writes_land_in_the_workspace_copy_not_the_input(tmp_path_factory: pytest.TempPathFactory) -> None:
    out = _in_its_workspace(tmp_path_factory, "write_edit", 3)
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["after_step"] == 3
    state = out / "state" / "workspace"
    assert (state / "b.txt").read_text() == "new file\nsecond line\n"
    assert "goodbye" in (state / "hello.py").read_text()
    assert not (CLAUDE.fixture("write_edit") / "workspace" / "b.txt").exists()
    assert "hello" in (CLAUDE.fixture("write_edit") / "workspace" / "hello.py").read_text()


def test_edit_of_a_file_changed_on_disk_reproduces_the_cli_error(tmp_path: Path) -> None:
    """Without the Read (file missing from the workspace), Edit is refused as the CLI refuses it."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    result = _run("write_edit", 3, tmp_path / "out", workspace)
    by_id = {d["call_id"]: d for d in result["divergences"]}
    assert by_id["toolu_write_edit_02"]["fresh_excerpt"].startswith("File does not exist. Note: your current")
    assert by_id["toolu_write_edit_03"]["fresh_excerpt"].startswith("<tool_use_error>File does not exist.")
