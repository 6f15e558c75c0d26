"""OpenHands V1 and V0 `run -n 3 --continue` against the built-in mock (one shell command, then the finish
tool), with the companions looking at the agent's terminal as they do now (every 0.05 s) against every
0.5 s (each version's own POLL_INTERVAL: the path before), side by side in alternating rounds. Nearly
every command (the prefix's reruns, the shell-state query and restore, the continuation's own) waited out
one whole interval after its prompt was back."""

from __future__ import annotations

import os
import re
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import orjson

from replayer import api
from replayer.adapters.openhands import bundle

TERMINAL_POLLS_HEADING = "## OpenHands: the terminal's look interval"
ROUNDS = 2
FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "openhands"
RUNS = {
    "V1 (openhands-sdk 1.34.0)": (FIXTURES / "v1" / "conversation", "terminal", None),
    "V0 (openhands-ai 1.6.0)": (FIXTURES / "v0" / "trajectory.json", "execute_bash", "openai/fake-model"),
}
"""label: (the recording, its shell tool, the model to pass: a V0 list names none)"""
BEFORE = {
    "oh_companion.py": (r"POLL_INTERVAL = 0\.05\b", "POLL_INTERVAL = 0.5"),
    "v0_settled_shell.py": (r"LOOK_S = 0\.05\b", "LOOK_S = 0.5"),
}


def _before_companion(tmp: Path) -> Path:
    """The companion folder with each version's own look interval (0.5 s)."""
    folder = tmp / "companion-before"
    shutil.copytree(bundle.COMPANION_DIR, folder, ignore=shutil.ignore_patterns("__pycache__"))
    for name, (now, before) in BEFORE.items():
        text = (folder / name).read_text()
        changed = re.sub(now, before, text)
        assert changed != text, f"{name}: no look interval to put back"
        (folder / name).write_text(changed)
    return folder


def _continue(tmp: Path, source: Path, tool: str, model: str | None, companion: Path) -> float:
    script = tmp / f"{tool}.json"
    turn = {"blocks": [{"type": "tool_use", "id": "call_bench_1", "name": tool, "input": {"command": "ls"}}]}
    script.write_bytes(orjson.dumps({"turns": [turn]}))
    out = Path(tempfile.mkdtemp(dir=tmp)) / "out"
    with mock.patch.object(bundle, "COMPANION_DIR", companion):
        t0 = time.perf_counter()
        upstream = f"mock:{script}"
        if model is None:
            result = api.run(
                source, 3, source.parent / "workspace", out, continue_agent=True, upstream=upstream
            )
        else:
            result = api.run(
                source,
                3,
                source.parent / "workspace",
                out,
                continue_agent=True,
                upstream=upstream,
                model=model,
            )
        wall = time.perf_counter() - t0
    status = result.continuation and result.continuation.agent_status
    assert status == "completed", f"{source}: the continuation ended {status}"
    return wall


def bench_terminal_polls(tmp: Path) -> dict[str, dict[str, float]]:
    before = _before_companion(tmp)
    out: dict[str, dict[str, float]] = {}
    for label, (source, tool, model) in RUNS.items():
        samples: dict[str, list[float]] = {"before": [], "now": []}
        for _ in range(ROUNDS):
            samples["before"].append(_continue(tmp, source, tool, model, before))
            samples["now"].append(_continue(tmp, source, tool, model, bundle.COMPANION_DIR))
        out[label] = {way: statistics.median(s) for way, s in samples.items()}
    return out


def terminal_polls_section(m: dict[str, dict[str, float]]) -> str:
    load = os.getloadavg()[1]
    rows = "\n".join(
        f"| {label} | {w['before']:.1f} s | {w['now']:.1f} s | **{w['now'] / w['before']:.2f}** |"
        for label, w in m.items()
    )
    return f"""{TERMINAL_POLLS_HEADING}

`python -m bench terminal-polls`: `run -n 3 --continue` of the V1 and V0 fixtures against the built-in
mock (one shell command, then the finish tool), the companions' terminal looked at every 0.5 s (each
version's own interval: the baseline) and every 0.05 s (the replayer), {ROUNDS} alternating rounds,
medians of wall time, load average {load:.1f} over 5 minutes at the end (a shared machine).

| run | every 0.5 s (baseline) | every 0.05 s (the replayer) | ratio |
|---|---|---|---|
{rows}

Both versions' terminals look at the screen right after typing a command and then once per interval
until the prompt is back; a command that ends at once still waited one interval. The loop ends on the
same screen either way (its timeouts count wall time, not looks), so the observations are the same.
"""


if __name__ == "__main__":  # `python -m bench.terminal_polls`: this section alone, printed
    with tempfile.TemporaryDirectory() as tmp:
        print(terminal_polls_section(bench_terminal_polls(Path(tmp))))
