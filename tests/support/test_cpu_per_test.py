"""The suite's CPU test by test (tests/support/cpu_per_test.py): its summary by module and by cost band."""

from __future__ import annotations

from tests.support.cpu_per_test import summary


def test_modules_sum_their_tests_and_bands_count_each_test_once() -> None:
    lines = [
        {"id": "a.py::t1", "cpu": 0.5, "wall": 1.0},
        {"id": "b.py::t1", "cpu": 12.0, "wall": 9.0},
        {"id": "a.py::t2[x]", "cpu": 3.0, "wall": 2.0},
        {"id": "b.py::t2", "cpu": 25.0, "wall": 20.0},
    ]
    modules, bands = summary(lines)
    assert modules == {"b.py": (37.0, 29.0, 2), "a.py": (3.5, 3.0, 2)}
    assert list(modules) == ["b.py", "a.py"], "most CPU first"
    counted = {name: (cpu, n) for name, cpu, n in bands}
    assert counted["0-1 CPU-s"] == (0.5, 1) and counted["3-6 CPU-s"] == (3.0, 1)
    assert counted["10-20 CPU-s"] == (12.0, 1) and counted["20+ CPU-s"] == (25.0, 1)
    assert sum(n for _, _, n in bands) == len(lines)
