"""mini-swe-agent SWE-bench batch runs (`mini-extra swebench`): their agent class and their instance image,
from a real run file (tests/fixtures/field/mini_swe_agent/) and variants of it. No Docker."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from replayer.adapters.mini_swe_agent import MiniSweAgentAdapter, config
from replayer.adapters.mini_swe_agent.session import Native
from tests.conftest import MINI, ROOT, replayer

SWEBENCH_RUN = (
    ROOT / "tests" / "fixtures" / "field" / "mini_swe_agent" / "deepseek-v2.2.7-sqlfluff-2419.traj.json"
)
IMAGE = "docker.io/swebench/sweb.eval.x86_64.sqlfluff_1776_sqlfluff-2419:latest"
DEFAULT_AGENT = "minisweagent.agents.default.DefaultAgent"


def _with_agent_type(tmp_path: Path, agent_type: str) -> Path:
    doc = json.loads(SWEBENCH_RUN.read_text())
    doc["info"]["config"]["agent_type"] = agent_type
    path = tmp_path / "variant.traj.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def test_inspect_prints_the_instance_image_the_run_names() -> None:
    header = replayer("inspect", str(SWEBENCH_RUN), check=True).stdout.splitlines()[0]
    assert header.startswith("agent mini_swe_agent 2.2.7") and header.endswith(f"cwd /testbed  image {IMAGE}")
    report = orjson.loads(replayer("inspect", str(SWEBENCH_RUN), "--json", check=True).stdout)
    assert report["environment_image"] == IMAGE
    local = MINI.fixture("toolcall") / "trajectory.traj.json"  # a LocalEnvironment names no image
    assert "image" not in replayer("inspect", str(local), check=True).stdout.splitlines()[0]


# the class's module in each release line (1.1.1-1.17.5, 2.0.0-2.2.8, 2.3.0-)
@pytest.mark.parametrize(
    "agent_type",
    [
        "minisweagent.run.extra.swebench.ProgressTrackingAgent",
        "minisweagent.run.benchmarks.swebench.ProgressTrackingAgent",
        "minisweagent.run.benchmarks.utils.common.ProgressTrackingAgent",
    ],
)
def test_the_progress_tracking_agent_reruns_as_the_default_agent(agent_type: str, tmp_path: Path) -> None:
    adapter = MiniSweAgentAdapter()
    traj = adapter.parse(_with_agent_type(tmp_path, agent_type))
    assert {adapter.classify(c, traj) for s in traj.steps for c in s.calls} == {("rerun", None)}
    assert config.companion_config(traj.native_as(Native), output_path=None)["agent_type"] == DEFAULT_AGENT
    note = traj.runs_as
    assert note is not None and agent_type in note and DEFAULT_AGENT in note


def test_the_result_names_the_recorded_class_and_the_one_that_ran(tmp_path: Path) -> None:
    out = tmp_path / "out"
    replayer("prepare", str(SWEBENCH_RUN), "-n", "3", "-o", str(out), check=True)
    version = orjson.loads((out / "result.json").read_bytes())["version"]
    assert (version["version"], version["reruns"]) == ("2.2.7", "mini_swe_agent 2.2.7, its own code")
    assert "minisweagent.run.benchmarks.swebench.ProgressTrackingAgent" in version["note"]
    spec = orjson.loads((out / "native" / "home" / ".replayer" / "continue.json").read_bytes())
    assert spec["config"]["agent_type"] == DEFAULT_AGENT
    rebuilt = json.loads((out / "native" / "home" / "trajectory.traj.json").read_text())
    assert rebuilt["info"]["config"]["agent_type"].endswith(".ProgressTrackingAgent"), "the file's own config"


@pytest.mark.parametrize(
    ("agent_type", "needle"),
    [
        ("minisweagent.run.benchmarks.programbench.ProgramBenchAgent", "without extra.raw_output"),
        ("tracer.TracedAgent", "agent_type 'tracer.TracedAgent' is not supported"),  # not in the package
    ],
)
def test_a_subclass_that_does_more_is_refused_in_one_line(
    agent_type: str, needle: str, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    path, out = _with_agent_type(tmp_path, agent_type), tmp_path / "out"
    proc = replayer("run", str(path), "-n", "1", "-w", str(workspace), "-o", str(out))
    assert proc.returncode == 4 and needle in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "--allow-degraded" in proc.stderr
    assert not out.exists()
