"""The order of the parallel run: module seconds read from a durations log, longest modules first."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from tests import conftest
from tests.support.module_seconds import module_seconds

LOG = """
============================= slowest durations =============================
73.43s call     tests/adapters/openhands/test_openhands_v0.py::test_max_steps[a-b]
67.04s setup    tests/adapters/openhands/test_openhands_v0.py::test_rerun
0.50s teardown tests/replayer/floor/test_io.py::test_write
12.00s call     tests/replayer/verbs/test_compare.py::test_every_agent_that_continues_compares[openhands_v0]
(1 durations < 0.005s hidden.  Use -vv to show these durations.)
2 failed, 1010 passed in 1580.65s (0:26:20)
"""


def test_a_modules_seconds_are_the_sum_of_its_tests_phases() -> None:
    seconds = module_seconds(LOG)
    assert seconds == {
        "tests/adapters/openhands/test_openhands_v0.py": 140.5,
        "tests/replayer/verbs/test_compare.py": 12.0,
        "tests/replayer/floor/test_io.py": 0.5,
    }
    assert list(seconds) == sorted(seconds, key=lambda m: -seconds[m])


@dataclass
class Item:
    nodeid: str


def test_longest_modules_go_first_and_a_module_keeps_its_order(tmp_path, monkeypatch) -> None:
    table = tmp_path / "module_seconds.json"
    table.write_bytes(orjson.dumps({"b.py": 5.0, "c.py": 30.0}))
    monkeypatch.setattr(conftest, "MODULE_SECONDS", table)
    items = [Item("a.py::t1"), Item("b.py::t1"), Item("c.py::t1"), Item("b.py::t2"), Item("c.py::t2[x]")]
    conftest.longest_modules_first(items)  # type: ignore[arg-type]
    assert [i.nodeid for i in items] == ["c.py::t1", "c.py::t2[x]", "b.py::t1", "b.py::t2", "a.py::t1"]
