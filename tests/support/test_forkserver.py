"""The suite's `replayer` (tests/support/forkserver.py) is what a fresh `python -m replayer.cli` is: the same
streams, exit code and refusals, each command with its own environment and nothing left by the one before."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT, replayer, replayer_argv


def _fresh(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    return subprocess.run(replayer_argv(*args), capture_output=True, text=True, env=full, cwd=ROOT)


def _same(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    forked, fresh = replayer(*args, env=env), _fresh(*args, env=env)
    assert (forked.returncode, forked.stdout, forked.stderr) == (fresh.returncode, fresh.stdout, fresh.stderr)
    return forked


@pytest.mark.parametrize(
    "args",
    [
        ("--version",),
        ("run", "/nonexistent/session.jsonl", "-n", "1"),  # refused: exit 4, one line
        ("run", "--after-step", "x", "a.jsonl"),  # usage: exit 2, click's words
        ("inspect", str(ROOT / "tests" / "fixtures" / "claude_code" / "write_edit" / "session.jsonl")),
    ],
)
def test_a_forked_command_is_a_fresh_ones(args: tuple[str, ...]) -> None:
    assert _same(*args).returncode in (0, 2, 4)


def test_each_command_reads_its_own_environment_and_no_earlier_ones(tmp_path: Path) -> None:
    args = ("run", "/nonexistent/session.jsonl", "-n", "1", "-w", str(tmp_path), "-o", str(tmp_path / "o"))
    limited = _same(*args, env={"REPLAYER_LIMITS": "garbage"})
    assert limited.returncode == 13 and "REPLAYER_LIMITS" in limited.stderr
    plain = _same(*args)
    assert plain.returncode == 3 and "does not exist" in plain.stderr, "the setting before is not this one's"
