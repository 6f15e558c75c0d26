"""`replayer export` of a mini-swe-agent 1.17.5 session (text-based: its CLI offers the model no tools), with
the capture's finding kept (BUNDLES/tool-definitions/mini_swe_agent@1.17.5.none.json) against without it
(removed before each export: the export runs that CLI in the sandbox to learn it again, as every export did
before the finding was kept), run side by side in alternating rounds."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from replayer.adapters.tool_definitions import no_tools_path

NO_TOOLS_HEADING = "## Exports of a version whose CLI offers no tools"
ROUNDS = 3
ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "mini_swe_agent" / "v1"


def _replayer(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "replayer.cli", *args], cwd=ROOT, check=True, capture_output=True)


def _export(result: Path, out: Path, kept: bool) -> float:
    if not kept:
        no_tools_path("mini_swe_agent", "1.17.5").unlink(missing_ok=True)
    t0 = time.perf_counter()
    _replayer("export", str(result), "-o", str(out), "--force")
    return time.perf_counter() - t0


def bench_no_tools(tmp: Path) -> dict[str, float]:
    result = tmp / "prepared"
    _replayer("prepare", str(FIXTURE / "trajectory.traj.json"), "-n", "1", "-o", str(result))
    samples: dict[str, list[float]] = {"before": [], "now": []}
    for _ in range(ROUNDS):
        samples["before"].append(_export(result, tmp / "before.jsonl", kept=False))
        samples["now"].append(_export(result, tmp / "now.jsonl", kept=True))
    assert (tmp / "before.jsonl").read_bytes() == (tmp / "now.jsonl").read_bytes(), "the same record"
    return {way: statistics.median(s) for way, s in samples.items()}


def no_tools_section(m: dict[str, float]) -> str:
    load = os.getloadavg()[1]
    return f"""{NO_TOOLS_HEADING}

`python -m bench no-tools`: `replayer export` (a CLI process) of one prepared boundary of the mini-swe-agent
1.17.5 fixture, whose CLI sends its requests without tools, {ROUNDS} alternating rounds, medians of wall
time, load average {load:.1f} over 5 minutes at the end (a shared machine). Both ways write the same
record (the pinned tools stand in, the note says why).

| the finding that 1.17.5 offers no tools | wall | ratio |
|---|---|---|
| baseline: not kept (each export runs the 1.17.5 CLI in a sandbox to learn it again) | {m["before"]:.1f} s | 1.00 |
| the replayer: kept beside the bundles, per replayer version | {m["now"]:.1f} s | **{m["now"] / m["before"]:.2f}** |

Each export of a batch that held mini-swe-agent 1.x sessions ran the capture once per such version; the
test suite's batch of every recorded source holds two (1.15.0 and 1.17.5), exported several times a run.
"""


if __name__ == "__main__":  # `python -m bench.no_tools`: this section alone, printed
    with tempfile.TemporaryDirectory() as tmp:
        print(no_tools_section(bench_no_tools(Path(tmp))))
