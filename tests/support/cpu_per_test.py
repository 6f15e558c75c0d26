"""The machine's CPU test by test: where the suite's time goes on a machine whose cores it keeps busy.

A test's own process sees little of what it costs (the agents run in containers, the engine in its daemons), so
each test is charged the machine's busy time (bench's `busy_ticks`) from its setup to its teardown. That is only its own
when nothing else runs: measure with one worker, no `-n`.

    pytest -p tests.support.cpu_per_test -m "not serial"     (lines to $CPU_PER_TEST, default cpu_per_test.jsonl)
    python -m tests.support.cpu_per_test FILE                (the modules by CPU, and the tests by cost band)
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import orjson
import pytest

from bench.exec_cleanup import busy_ticks

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
BANDS = (1.0, 3.0, 6.0, 10.0, 20.0)
"""CPU-s bounds of the cost bands the summary counts tests in."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    busy, start = busy_ticks(), time.monotonic()
    yield
    line = {"id": item.nodeid, "wall": time.monotonic() - start, "cpu": (busy_ticks() - busy) / TICKS_PER_S}
    with open(os.environ.get("CPU_PER_TEST", "cpu_per_test.jsonl"), "ab") as out:
        out.write(orjson.dumps(line) + b"\n")


def summary(lines: list[dict]) -> tuple[dict[str, tuple[float, float, int]], list[tuple[str, float, int]]]:
    """Each module's (CPU-s, wall s, tests), most CPU first; and each cost band's (name, CPU-s, tests)."""
    modules: dict[str, tuple[float, float, int]] = {}
    for line in lines:
        module = line["id"].split("::")[0]
        cpu, wall, n = modules.get(module, (0.0, 0.0, 0))
        modules[module] = (cpu + line["cpu"], wall + line["wall"], n + 1)
    bounds = (0.0, *BANDS, float("inf"))
    bands = []
    for low, high in pairwise(bounds):
        inside = [line["cpu"] for line in lines if low <= line["cpu"] < high]
        name = f"{low:g}-{high:g} CPU-s" if high != float("inf") else f"{low:g}+ CPU-s"
        bands.append((name, sum(inside), len(inside)))
    return dict(sorted(modules.items(), key=lambda kv: -kv[1][0])), bands


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.cpu_per_test FILE", file=sys.stderr)
        return 2
    lines = [orjson.loads(raw) for raw in Path(argv[0]).read_bytes().splitlines() if raw.strip()]
    modules, bands = summary(lines)
    total = sum(line["cpu"] for line in lines)
    print(f"{len(lines)} tests: {total:.0f} CPU-s, {sum(line['wall'] for line in lines):.0f} s")
    for module, (cpu, wall, n) in modules.items():
        print(f"{cpu:8.1f} CPU-s {wall:8.1f} s {n:4d}  {module}")
    for name, cpu, n in bands:
        print(f"{name:>14}: {n:5d} tests, {cpu:7.1f} CPU-s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
