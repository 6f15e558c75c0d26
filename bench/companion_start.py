"""A Pi replay that reruns no call (a field session whose two calls are an extension's tools, kept historical
with --allow-degraded), with the step rerunner's companion started at the first step asked for against
started with the rerunner, as before, run side by side in alternating rounds. Started and never spoken
to, the companion got no end of input, and the replay waited out its 10 s stop grace before killing it."""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

from replayer import api
from replayer.adapters.companion import StepRerunner

COMPANION_HEADING = "## A replay that reruns no call starts no companion"
ROUNDS = 3
FIELD_FILE = (
    Path(__file__).resolve().parents[1]
    / "tests"
    / "fixtures"
    / "field"
    / "pi"
    / "brunch-extension-tools-propose-graph-commit.jsonl"
)


def _eager(init: Any) -> Any:
    def started(self: StepRerunner, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        assert self.companion is not None  # the baseline: started with the rerunner

    return started


def _replay(tmp: Path, eager: bool) -> float:
    workspace, out = Path(tempfile.mkdtemp(dir=tmp)), Path(tempfile.mkdtemp(dir=tmp)) / "out"
    with (
        mock.patch.object(StepRerunner, "__init__", _eager(StepRerunner.__init__))
        if eager
        else contextlib.nullcontext()
    ):
        t0 = time.perf_counter()
        result = api.run(FIELD_FILE, 2, workspace, out, allow_degraded=True)
        wall = time.perf_counter() - t0
    assert [d.status for d in result.divergences] == ["historical_kept"] * 2
    return wall


def bench_companion_start(tmp: Path) -> dict[str, float]:
    samples: dict[str, list[float]] = {"before": [], "now": []}
    for _ in range(ROUNDS):
        samples["before"].append(_replay(tmp, eager=True))
        samples["now"].append(_replay(tmp, eager=False))
    return {way: statistics.median(s) for way, s in samples.items()}


def companion_start_section(m: dict[str, float]) -> str:
    load = os.getloadavg()[1]
    return f"""{COMPANION_HEADING}

`python -m bench companion-start`: `run -n 2 --allow-degraded` of the Pi field session
`brunch-extension-tools-propose-graph-commit.jsonl` (its two calls are a Pi extension's tools, kept historical:
nothing is rerun), with the step rerunner's companion started at the first step asked for (now) and started
with the rerunner (before), {ROUNDS} alternating rounds, medians of wall time, load average {load:.1f} over
5 minutes at the end (a shared machine).

| companion | wall | ratio |
|---|---|---|
| baseline: started with the rerunner, never spoken to, killed after its 10 s stop grace | {m["before"]:.1f} s | 1.00 |
| the replayer: started at the first step asked for (none here) | {m["now"]:.1f} s | **{m["now"] / m["before"]:.2f}** |

Pi, mini-swe-agent and OpenHands rerun through a companion (adapters/companion.py). One started and never
spoken to gets no end of input, so it never stops by itself: the replay waited out the grace and killed
it. A replay whose prefix reruns no call (every call kept historical) now starts none, and saves
the agent's start besides (Node for Pi, a Python start for the others).
"""


if __name__ == "__main__":  # `python -m bench.companion_start`: this section alone, printed
    with tempfile.TemporaryDirectory() as tmp:
        print(companion_start_section(bench_companion_start(Path(tmp))))
