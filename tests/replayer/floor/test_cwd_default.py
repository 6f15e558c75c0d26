"""A working directory for a file that records none: every field a format has for it is read (mini-swe-agent's
`info.config.environment.cwd`, which 1.10.0 on write and 1.0-1.9 do not; a Gemini CLI subagent document's
`directories`); when the calls name only relative paths the file runs in `DEFAULT_CWD` (`cwd_source`
`default`), and `run` asks for --cwd only where an absolute path would not be held by a default directory."""

from __future__ import annotations

from pathlib import Path

import orjson

from replayer.floor.cwdinfer import workspace_path
from replayer.floor.trajectory import DEFAULT_CWD
from replayer.pipeline.engine import load
from tests.conftest import MINI, ROOT, replayer

FIELD = ROOT / "tests" / "fixtures" / "field"
SUBAGENT = FIELD / "gemini_cli" / "aim-0.34.0-subagent-session-2026-03-18T01-57-3afe7bdc.json"


def _without_config(scenario: str, dest: Path) -> Path:
    """A real 1.x trajectory as 1.0-1.9 save it: `save_traj` adds `info.config` from 1.10.0 on."""
    doc = orjson.loads((MINI.fixture(scenario) / "trajectory.traj.json").read_bytes())
    del doc["info"]["config"]
    dest.write_bytes(orjson.dumps(doc))
    return dest


def test_a_mini_1x_run_without_config_and_relative_commands_runs_in_the_default(tmp_path: Path) -> None:
    path = _without_config("v1_15", tmp_path / "old.traj.json")
    _, traj = load(path)
    assert (traj.cwd, traj.cwd_source) == (DEFAULT_CWD, "default")

    inspected = replayer("inspect", str(path))
    assert inspected.returncode == 0 and f"cwd {DEFAULT_CWD} (default)" in inspected.stdout.splitlines()[0]
    out = tmp_path / "out"
    replayer("prepare", str(path), "-n", "1", "-o", str(out), check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    assert (result["cwd"], result["cwd_source"]) == (DEFAULT_CWD, "default")


def test_a_file_naming_an_absolute_path_still_asks_for_the_cwd(tmp_path: Path) -> None:
    """The `v1` recording runs `ls /nonexistent`: a default directory would not hold that path (the refusal
    `run` gives, naming it: tests/adapters/claude_code/test_claude_code_minimal.py)."""
    path = _without_config("v1", tmp_path / "old.traj.json")
    _, traj = load(path)
    assert traj.cwd is None
    assert "cwd (not recorded: run needs --cwd)" in replayer("inspect", str(path)).stdout.splitlines()[0]
    stated = orjson.loads(replayer("inspect", str(path), "--json", "--cwd", "/testbed", check=True).stdout)
    assert (stated["cwd"], stated["cwd_source"]) == ("/testbed", "stated")


def test_a_gemini_subagent_document_s_directories_give_its_project(tmp_path: Path) -> None:
    """Gemini CLI writes a subagent's document with `directories` (its parent's workspace directories,
    the project's first; chatRecordingService in 0.61.0)."""
    doc = orjson.loads(SUBAGENT.read_bytes())
    path = tmp_path / SUBAGENT.name
    path.write_bytes(orjson.dumps({**doc, "directories": ["/home/kingb/aim", "/home/kingb/shared"]}))
    _, traj = load(path)
    assert (traj.cwd, traj.cwd_source) == ("/home/kingb/aim", "recorded")  # its sha256 is the projectHash
    path.write_bytes(orjson.dumps({**doc, "directories": ["/home/kingb/elsewhere"]}))
    assert load(path)[1].cwd == "/home/kingb/elsewhere"  # no hash matches: the first recorded directory


def test_which_paths_need_a_recorded_directory() -> None:
    relative = [
        {"command": "cat calc.py 2>/dev/null > /tmp/out"},
        {"path": "src/a.py", "url": "https://x.org/a"},
    ]
    assert workspace_path(relative) is None
    assert workspace_path([{"edits": [{"file_path": "/home/u/p/a.py"}]}]) == "/home/u/p/a.py"
    assert workspace_path([{"command": "pytest --rootdir=/testbed -q"}]) == "/testbed"
