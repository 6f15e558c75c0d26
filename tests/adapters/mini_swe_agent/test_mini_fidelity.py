"""mini-swe-agent fidelity with the real pinned package: at every boundary of every recording the
expected prefix is the `messages` list mini-swe-agent sent right after that step, both from the
historical trajectory (`prepare`) and after the reruns in a real container (`run`), where every
observation is reproduced exactly; a changed workspace shows up in the rebuilt trajectory."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from replayer.adapters.mini_swe_agent import session as native_format
from replayer.pipeline.engine import load
from replayer.pipeline.multiboundary import boundary_dir
from tests.conftest import MINI, first_and_last, replayer


def _traj(name: str) -> Path:
    return MINI.fixture(name) / "trajectory.traj.json"


def _boundaries() -> list[tuple[str, int]]:
    out = []
    for name in MINI.scenarios:
        _, traj = load(_traj(name))
        last = next((s.index - 1 for s in traj.steps if s.final), len(traj.steps))
        out += [(name, n) for n in range(0, last + 1)]
    return out


def _request_after(name: str, after_step: int) -> list[dict]:
    """The request mini-swe-agent made right after step N: the one whose turn is the call count so far."""
    _, traj = load(_traj(name))
    native = traj.native_as(native_format.Native)
    n_calls, _ = native_format.calls_and_cost(native_format.prefix_messages(native, after_step))
    return MINI.requests(name)[n_calls]["body"]["messages"]


def _cli(verb: str, name: str, after_step: int, out: Path, *extra: str) -> dict:
    args = [verb, str(_traj(name)), "--after-step", str(after_step), "--out", str(out), "--json", *extra]
    replayer(*args, check=True)  # v1: recorded by mini-swe-agent 1.17.5, which reruns it
    return orjson.loads((out / "result.json").read_bytes())


@pytest.mark.parametrize(("name", "after_step"), _boundaries())
def test_prepared_prefix_is_the_request_mini_sent(name: str, after_step: int, tmp_path: Path) -> None:
    result = _cli("prepare", name, after_step, tmp_path / "out")
    expected = orjson.loads((tmp_path / "out" / "expected_prefix.json").read_bytes())
    assert expected == _request_after(name, after_step)
    assert all(d["status"] == "historical_kept" for d in result["divergences"])


RERUN = first_and_last(_boundaries())
"""Each recording's first and last boundary, both from one replay of it (`run -n first,last`)."""


@pytest.fixture(scope="module")
def reran(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """The replay of a recording at its `RERUN` boundaries (each boundary's result in after-K/), made once
    per module when a test first asks for it."""
    made: dict[str, Path] = {}

    def of(name: str) -> Path:
        if name not in made:
            out = tmp_path_factory.mktemp(f"rerun-{name}") / "out"
            boundaries = ",".join(str(k) for n, k in RERUN if n == name)
            workspace = str(MINI.fixture(name) / "workspace")
            replayer("run", str(_traj(name)), "-n", boundaries, "-o", str(out), "-w", workspace, check=True)
            made[name] = out
        return made[name]

    return of


@pytest.mark.agent
@pytest.mark.parametrize(("name", "after_step"), RERUN)
def test_rerun_reproduces_every_observation(name: str, after_step: int, reran: Callable[[str], Path]) -> None:
    out = boundary_dir(reran(name), after_step)
    result = orjson.loads((out / "result.json").read_bytes())
    assert [d["status"] for d in result["divergences"]] == ["exact"] * len(result["divergences"])
    assert orjson.loads((out / "expected_prefix.json").read_bytes()) == _request_after(name, after_step)
    rebuilt = json.loads((out / result["native_files"][0]).read_text())
    original = json.loads(_traj(name).read_text())
    assert rebuilt["trajectory_format"] == original["trajectory_format"]
    assert rebuilt["info"]["mini_version"] == original["info"]["mini_version"]
    assert rebuilt["info"]["config"] == original["info"]["config"]
    n_calls, cost = native_format.calls_and_cost(rebuilt["messages"])
    assert rebuilt["info"]["model_stats"] == {"instance_cost": cost, "api_calls": n_calls}
    assert rebuilt["info"]["exit_status"] == "" and rebuilt["messages"][-1]["role"] != "exit"
    for fresh, old in zip(rebuilt["messages"], original["messages"], strict=False):
        assert fresh["content"] == old["content"]
        assert set(fresh) == set(old), "the message keeps its format"
        if "raw_output" in old.get("extra", {}):
            assert fresh["extra"]["raw_output"] == old["extra"]["raw_output"]
            assert fresh["extra"]["timestamp"] != old["extra"]["timestamp"], "the observation was not rerun"
        elif name == "v1" and fresh["role"] == "user" and fresh["content"].startswith("<returncode>"):
            assert fresh["timestamp"] != old["timestamp"], "the observation was not rerun"


@pytest.mark.agent
def test_a_changed_workspace_lands_in_the_rebuilt_trajectory(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    shutil.copytree(MINI.fixture("toolcall") / "workspace", workspace)
    (workspace / "calc.py").write_text("def add(a, b):\n    return a + b\n")
    result = _cli("run", "toolcall", 2, tmp_path / "out", "--workspace", str(workspace))
    by_id = {d["call_id"]: d for d in result["divergences"]}
    assert by_id["call_toolcall_01"]["status"] == "exact"
    assert by_id["call_toolcall_02"]["status"] == "different"  # the assertion passes now
    assert by_id["call_toolcall_03"]["status"] == "different"
    expected = orjson.loads((tmp_path / "out" / "expected_prefix.json").read_bytes())
    assert expected[-2]["content"] == '{\n  "returncode": 0,\n  "output": ""\n}'
    assert (
        expected[-1]["content"]
        == '{\n  "returncode": 0,\n  "output": "1:def add(a, b):\\n2-    return a + b\\n"\n}'
    )
    assert (workspace / "calc.py").read_text() == "def add(a, b):\n    return a + b\n"


@pytest.mark.agent
def test_the_timeout_and_the_truncation_are_mini_swe_agents_own(reran: Callable[[str], Path]) -> None:
    """Calls 5 and 6 (step 4), as the replay to toolcall's last boundary reran them."""
    last = max(k for n, k in RERUN if n == "toolcall")
    out = boundary_dir(reran("toolcall"), last)
    result = orjson.loads((out / "result.json").read_bytes())
    rebuilt = json.loads((out / result["native_files"][0]).read_text())
    by_id = {m.get("tool_call_id"): m for m in rebuilt["messages"]}
    long, slow = by_id["call_toolcall_05"], by_id["call_toolcall_06"]
    assert '"elided_chars": 3893' in long["content"] and long["content"].count("\\n") > 2000
    assert slow["extra"]["exception_type"] == "TimeoutExpired"
    assert "timed out after 2 seconds" in slow["content"] and slow["extra"]["returncode"] == -1
