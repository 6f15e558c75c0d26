"""OpenCode's `opencode import` of a rebuilt session in its own sandbox (now: `adapters/opencode/cli_box.py`, the
sandbox started at a process's first import and kept) against the same CLI run on the host (before: what the
rebuild did until the version, the trajectory's choice, was no longer let run there), side by side in
alternating rounds. The baseline runs the pinned binary on the host: the benchmark's own choice of version."""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from bench.exec_cleanup import busy_ticks
from replayer.adapters.opencode import bundle, cli_box
from replayer.adapters.opencode.home import place_config
from replayer.floor.pins import load_pins

OPENCODE_IMPORT_HEADING = "## OpenCode's import in a sandbox of its own"
ROUNDS = 3
IMPORTS = 3
"""Imports a round: a prepare of several boundaries imports once a boundary."""
EXPORT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "opencode" / "tools" / "export.json"


def _config(home: Path) -> None:
    place_config(home, "fake", "fake-model", "http://127.0.0.1:9/v1")


def _on_host() -> float:
    """The CLI's import on the host, in a fresh private home (the baseline)."""
    binary = bundle.binary(str(load_pins().bundle_dir(bundle.NAME)))
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        _config(home)
        (home / ".cache" / "replayer-tmp").mkdir(parents=True)
        env = {
            **bundle.base_env(str(home)),
            "TMPDIR": str(home / ".cache" / "replayer-tmp"),
            "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
        }
        t0 = time.perf_counter()
        subprocess.run([binary, "import", str(EXPORT)], env=env, cwd=home, capture_output=True, check=True)
        return time.perf_counter() - t0


def _in_box(out: Path) -> float:
    t0 = time.perf_counter()
    with cli_box.cli_home() as cli:
        _config(cli.home)
        cli.run("import", cli.give(EXPORT))
        cli.copy_out(Path(tempfile.mkdtemp(dir=out)) / "home")
    return time.perf_counter() - t0


def _round(way: str, out: Path) -> tuple[float, float, float]:
    """(first import's wall, a later import's median wall, machine CPU per import)."""
    ticks = busy_ticks()
    walls = [_on_host() if way == "host" else _in_box(out) for _ in range(IMPORTS)]
    cpu = (busy_ticks() - ticks) / os.sysconf("SC_CLK_TCK") / IMPORTS
    if way == "box":
        cli_box._close_all()  # the next round's first import starts the sandbox again
    return walls[0], statistics.median(walls[1:]), cpu


def bench_opencode_import(tmp: Path) -> dict[str, float]:
    samples: dict[str, list[tuple[float, float, float]]] = {"host": [], "box": []}
    for _ in range(ROUNDS):
        for way in samples:
            samples[way].append(_round(way, tmp))
    return {
        f"{way}_{what}": statistics.median(s[i] for s in rounds)
        for way, rounds in samples.items()
        for i, what in enumerate(("first", "next", "cpu"))
    }


def opencode_import_section(m: dict[str, float]) -> str:
    load = os.getloadavg()[1]
    return f"""{OPENCODE_IMPORT_HEADING}

`python -m bench opencode-import`: {IMPORTS} imports a round of the rebuilt `tools` export by the pinned CLI,
run on the host in a fresh private home (before) and in the CLI's own sandbox (now, `cli_box`: started at the
round's first import and kept, as a process keeps it), {ROUNDS} alternating rounds, medians; CPU is the whole
machine's busy time per import (the engine's daemons included), load average {load:.1f} over 5 minutes at
the end (a shared machine).

| an import | first of a process | ratio | a later one | ratio | machine CPU each | ratio |
|---|---|---|---|---|---|---|
| baseline: on the host | {m["host_first"]:.2f} s | 1.00 | {m["host_next"]:.2f} s | 1.00 | {m["host_cpu"]:.2f} s | 1.00 |
| the replayer: in its own sandbox | {m["box_first"]:.2f} s | **{m["box_first"] / m["host_first"]:.2f}** | {m["box_next"]:.2f} s | **{m["box_next"] / m["host_next"]:.2f}** | {m["box_cpu"]:.2f} s | **{m["box_cpu"] / m["host_cpu"]:.2f}** |

The version that imports is the trajectory's choice, so it no longer runs on the host. In its sandbox a later
import differs from the host's by {m["box_next"] - m["host_next"]:+.2f} s (an exec, and the copy of what it
wrote out, against a process start), and a process's first import adds the sandbox's start
({m["box_first"] - m["box_next"]:+.2f} s): a prepare of many boundaries, or a batch worker's many jobs, starts it
once a version.
"""
