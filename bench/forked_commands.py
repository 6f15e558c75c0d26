"""The test suite's `replayer` commands forked from an interpreter that has imported the project
(tests/support/forkserver.py, now) against each started as a fresh `python -m replayer.cli` (before), side by
side in alternating rounds: `replayer inspect` of a recorded session, which needs no engine, so what differs is
the start (the suite runs about 1,100 commands)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.exec_cleanup import busy_ticks, medians

FORKED_HEADING = "## The test suite's commands, forked"
ROUNDS = 3
COMMANDS = 10
ROOT = Path(__file__).resolve().parents[1]
SESSION = ROOT / "tests" / "fixtures" / "claude_code" / "write_edit" / "session.jsonl"


def _commands(run: Callable[..., subprocess.CompletedProcess[str]]) -> tuple[float, float]:
    """Wall and machine CPU seconds per command (the machine's: a forked command is not a child of this one)."""
    ticks, t0 = busy_ticks(), time.perf_counter()
    for _ in range(COMMANDS):
        proc = run("inspect", str(SESSION))
        assert proc.returncode == 0, proc.stderr
    wall = time.perf_counter() - t0
    return wall / COMMANDS, (busy_ticks() - ticks) / os.sysconf("SC_CLK_TCK") / COMMANDS


def bench_forked_commands(tmp: Path) -> dict[str, float]:
    from tests.support.forkserver import Client

    forks = Client(ROOT, tmp)

    def fresh(*args: str) -> subprocess.CompletedProcess[str]:
        argv = [sys.executable, "-m", "replayer.cli", *args]
        return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, env=dict(os.environ))

    def forked(*args: str) -> subprocess.CompletedProcess[str]:
        return forks.run(args, dict(os.environ))

    forked("--version")  # the server started, as the suite's first command starts it
    samples: dict[str, list[tuple[float, float]]] = {"before": [], "now": []}
    for _ in range(ROUNDS):
        samples["before"].append(_commands(fresh))
        samples["now"].append(_commands(forked))
    return medians(samples)


def forked_commands_section(m: dict[str, float]) -> str:
    load = os.getloadavg()[1]
    return f"""{FORKED_HEADING}

`python -m bench forked-commands`: {COMMANDS} `replayer inspect` of a recorded Claude Code session a round, each
started as a fresh `python -m replayer.cli` (before) and forked from the suite's fork server (now, what
`tests/conftest.py`'s `replayer` does), {ROUNDS} alternating rounds, medians; CPU is the whole machine's busy
time, load average {load:.1f} over 5 minutes at the end (a shared machine).

| a command | wall | ratio | machine CPU | ratio |
|---|---|---|---|---|
| baseline: a fresh interpreter | {m["before_wall"] * 1000:.0f} ms | 1.00 | {m["before_cpu"] * 1000:.0f} ms | 1.00 |
| the suite: forked | {m["now_wall"] * 1000:.0f} ms | **{m["now_wall"] / m["before_wall"]:.2f}** | {m["now_cpu"] * 1000:.0f} ms | **{m["now_cpu"] / m["before_cpu"]:.2f}** |

A command's imports (the libraries and the project) were about 0.4 CPU-s of every command a test ran, about a
fifth of the suite's CPU; what a command does after its start is the same either way.
"""
