"""Pi fidelity with the real pinned package: at every boundary of every recording the expected prefix is
the `messages` list (after the system message) Pi sent right after that step, from the session file and
from the json-mode and rpc-mode event logs (`prepare`), and after the reruns by Pi's own agent loop and
tools in a real container (`run`), where every observation is reproduced exactly."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from replayer.pipeline.engine import load
from tests.conftest import PI, first_and_last, replayer
from tests.support.prefixes import prepared, replayed

SCENARIOS = ["tools", "two_runs", "rpc"]


def _source(name: str, form: str) -> Path:
    return PI.fixture(name) / {"session": "session.jsonl", "events": "events.jsonl", "rpc": "rpc.jsonl"}[form]


def _boundaries() -> list[tuple[str, int]]:
    out = []
    for name in SCENARIOS:
        _, traj = load(PI.fixture(name) / "session.jsonl")
        out += [(name, n) for n in range(0, len(traj.steps) + 1)]
    return out


def _request_after(name: str, expected: list[dict]) -> list[dict]:
    histories = [r["body"]["messages"][1:] for r in PI.requests(name)]
    return next((h for h in histories if len(h) == len(expected)), [])


def _cli(verb: str, source: Path, after_step: int, out: Path, *extra: str) -> dict:
    args = [verb, str(source), "--after-step", str(after_step), "--out", str(out), "--json", *extra]
    replayer(*args, check=True)
    return orjson.loads((out / "result.json").read_bytes())


@pytest.mark.parametrize(("name", "after_step"), _boundaries())
def test_prepared_prefix_is_the_request_pi_sent(
    name: str, after_step: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    forms = ["session", "rpc" if name == "rpc" else "events"]
    prefixes = []
    for form in forms:
        out = prepared(tmp_path_factory, _source(name, form), after_step)
        prefixes.append(orjson.loads((out / "expected_prefix.json").read_bytes()))
    assert prefixes[0] and prefixes[0] == _request_after(name, prefixes[0])
    assert prefixes[1] == prefixes[0], "the event log gives the same prefix as the session file"


RERUN = first_and_last([b for b in _boundaries() if b[0] != "rpc"])


@pytest.mark.agent
@pytest.mark.parametrize(("name", "after_step"), RERUN)
def test_rerun_by_pi_reproduces_every_observation(
    name: str, after_step: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The recording's RERUN boundaries of one replay (`run -n 1,5`), each as `run -n K` writes it."""
    workspace = PI.fixture(name) / "workspace"
    boundaries = [n for s, n in RERUN if s == name]
    out = replayed(tmp_path_factory, _source(name, "session"), boundaries, after_step, "-w", str(workspace))
    result = orjson.loads((out / "result.json").read_bytes())
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert expected == _request_after(name, expected)
    assert all(d["kind"] == "rerun" and d["status"] == "exact" for d in result["divergences"]), result[
        "divergences"
    ]
    assert result["degradations"] == [] and result["version"]["source"] == "default"
    session = out / result["native_files"][0]
    records = [orjson.loads(line) for line in session.read_bytes().splitlines()]
    assert records[0]["type"] == "session" and records[0]["version"] == 3


@pytest.mark.agent
def test_a_changed_workspace_reaches_the_rebuilt_session(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    shutil.copytree(PI.fixture("tools") / "workspace", workspace)
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b  # changed\n")
    out = tmp_path / "out"
    result = _cli("run", _source("tools", "events"), 1, out, "--workspace", str(workspace))
    read = next(d for d in result["divergences"] if d["tool"] == "read")
    assert read["status"] == "different"
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert "# changed" in expected[2]["content"]


def test_an_unknown_tool_is_refused_before_any_container(tmp_path: Path) -> None:
    """Without --allow-degraded (which keeps its historical observation: tests/adapters/pi/test_pi_field.py)."""
    source = _source("unknown_tool", "session")
    ws = PI.fixture("unknown_tool") / "workspace"
    proc = replayer("run", str(source), "-n", "1", "-w", str(ws), "-o", str(tmp_path / "o"))
    assert proc.returncode == 4 and "no_such_tool" in proc.stderr, proc.stderr
    assert "--allow-degraded keeps its historical observation" in proc.stderr
    assert not (tmp_path / "o").exists()
    proc = replayer("inspect", str(source), "--json")
    kinds = [c["kind"] for s in orjson.loads(proc.stdout)["steps"] for c in s["calls"]]
    assert kinds == ["rerun", "unknown"]


@pytest.mark.agent
@pytest.mark.docker
def test_allow_degraded_keeps_an_unknown_tools_observation_beside_a_rerun_one(tmp_path: Path) -> None:
    """One step calls `read` and a tool no Pi has: Pi's loop reruns the step (answering the unknown call
    "not found", which is not used), the rebuilt session keeps that call's recorded result."""
    source = _source("unknown_tool", "session")
    out = tmp_path / "o"
    replayer(
        "run",
        str(source),
        "-n",
        "1",
        "-w",
        str(PI.fixture("unknown_tool") / "workspace"),
        "-o",
        str(out),
        "--allow-degraded",
        check=True,
    )
    result = orjson.loads((out / "result.json").read_bytes())
    assert [(d["tool"], d["action"]) for d in result["degradations"]] == [("no_such_tool", "historical_kept")]
    assert [(d["tool"], d["status"]) for d in result["divergences"]][0] == ("read", "exact")

    def result_of(path: Path, call_id: str) -> dict:
        entries = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
        return next(
            e["message"]["content"] for e in entries if (e.get("message") or {}).get("toolCallId") == call_id
        )

    kept = result["degradations"][0]["call_id"]
    assert result_of(out / result["native_files"][0], kept) == result_of(source, kept)
