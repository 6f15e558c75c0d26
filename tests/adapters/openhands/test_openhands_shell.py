"""The shell state a continuation's fresh shell is given (adapters/openhands/companion/shell_state.py),
round-tripped through real bash shells: what the prefix's commands changed is taken by the query and
given back by the restore command, values with quotes and newlines included."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from replayer.adapters.openhands.companion import shell_state


def _shell(command: str, cwd: Path, env: dict[str, str]) -> None:
    subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", command], cwd=cwd, env=env, check=False
    )  # its status is the prefix's


def _query(commands: str, cwd: Path, env: dict[str, str], out: Path) -> dict:
    _shell(f"{commands}\n{shell_state.query_command(str(out))}", cwd, env)
    return shell_state.read_query(str(out))


def test_the_prefixs_directory_exports_and_status_reach_a_fresh_shell(tmp_path: Path) -> None:
    (tmp_path / "sub dir").mkdir()
    env = {"PATH": os.environ["PATH"], "GONE": "1", "KEPT": "same"}
    query = tmp_path / "query"
    start = _query("", tmp_path, env, query)
    prefix = "cd 'sub dir'; export FOO=$'it\\'s\\nmulti line' BAR=2; unset GONE; (exit 3)"
    now = _query(prefix, tmp_path, env, query)
    state = shell_state.changes(start, now)
    assert state == {
        "cwd": str(tmp_path / "sub dir"),
        "status": 3,
        "set": {"BAR": "2", "FOO": "it's\nmulti line", "OLDPWD": str(tmp_path)},
        "unset": ["GONE"],
    }
    command = shell_state.restore_command(state)
    assert command is not None
    fresh = _query(command, tmp_path, env, query)
    assert shell_state.restored(state, fresh) is None
    assert (fresh["cwd"], fresh["env"]["FOO"], fresh["env"]["KEPT"]) == (
        str(tmp_path / "sub dir"),
        "it's\nmulti line",
        "same",
    )
    assert not query.exists(), "the query's file is removed once read"


def test_a_shell_the_prefix_left_as_it_started_needs_no_restore(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"]}
    start = _query("", tmp_path, env, tmp_path / "q")
    state = shell_state.changes(start, _query("echo hi >/dev/null", tmp_path, env, tmp_path / "q"))
    assert state == {"cwd": None, "status": 0, "set": {}, "unset": []}
    assert shell_state.restore_command(state) is None


def test_a_fresh_shell_that_did_not_take_the_state_is_named(tmp_path: Path) -> None:
    env = {"PATH": os.environ["PATH"]}
    state = {"cwd": "/", "status": 0, "set": {"FOO": "x"}, "unset": []}
    fresh = _query("", tmp_path, env, tmp_path / "q")
    assert shell_state.restored(state, fresh) == (
        "the continuation's shell did not take FOO, the working directory /"
    )


def test_a_query_its_shell_runs_late_is_read_once_written_whole(tmp_path: Path) -> None:
    """A shell may answer a command before it ran it (a loaded machine's tmux pane still showing the screen
    before, then running the command unseen: seen of V1's terminal, whose continuation then read the query's
    file empty): the file is written beside its name and renamed, and reading waits for it."""
    env = {"PATH": os.environ["PATH"]}
    late: list[subprocess.Popen[bytes]] = []

    def run(command: str) -> None:  # answers at once; the shell runs the command a second later
        late.append(
            subprocess.Popen(
                ["bash", "--norc", "--noprofile", "-c", f"sleep 1; {command}"], cwd=tmp_path, env=env
            )
        )

    state = shell_state.query(run, str(tmp_path / "q"))
    late[0].wait()
    assert state is not None and (state["cwd"], state["status"]) == (str(tmp_path), 0)
    assert sorted(p.name for p in tmp_path.iterdir()) == [], "read, removed, nothing left beside it"


PLANTED = [
    {"cwd": None, "status": 0, "set": {"A=1; touch MARK; B": "x"}, "unset": []},
    {"cwd": None, "status": 0, "set": {}, "unset": ["GONE; touch MARK"]},
    {"cwd": None, "status": 0, "set": {}, "unset": ["$(touch MARK)"]},
    {"cwd": "$(touch MARK)", "status": 0, "set": {}, "unset": []},
    {"cwd": None, "status": 0, "set": {"FOO": ["$(touch MARK)"]}, "unset": []},
    {"cwd": None, "status": 1.5, "set": {}, "unset": []},
    {"cwd": None, "status": 0, "set": {"PS1": "x"}, "unset": [], "more": 1},
    ["not", "an", "object"],
]


def test_a_planted_shell_state_is_refused_in_one_line_and_runs_nothing(tmp_path: Path) -> None:
    """The state file is in the agent home, which the prefix can write: a shell.json it planted never runs
    as shell code; only valid variable names, values quoted, anything else refused before any command."""
    env = {"PATH": os.environ["PATH"], "GONE": "1"}
    for n, state in enumerate([*PLANTED, "{not json"]):
        path = tmp_path / f"shell-{n}.json"
        path.write_text(state if isinstance(state, str) else json.dumps(state))
        ran: list[str] = []

        def run(command: str, ran: list[str] = ran) -> None:
            ran.append(command)
            _shell(command, tmp_path, env)

        with pytest.raises(RuntimeError) as refused:
            shell_state.restore(str(path), run)
        assert str(refused.value).startswith("refused the shell state") and "\n" not in str(refused.value)
        assert ran == [] and not (tmp_path / "MARK").exists(), state
