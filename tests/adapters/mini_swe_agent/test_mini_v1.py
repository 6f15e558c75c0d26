"""mini-swe-agent 1.x run by the 1.x release that wrote the file: its own agent parses and renders, its own
environment class executes, its own litellm model class talks to the bridge, and its own `save_traj`
writes the continued file. The recording is tests/fixtures/mini_swe_agent/v1 (the `mini` CLI of 1.17.5);
the real SWE-bench run of 1.15.0 is tested in tests/adapters/mini_swe_agent/test_mini_field.py. A fork's environment subclass
runs as the built-in class it extends only with --allow-degraded, recorded."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from replayer.adapters.mini_swe_agent import MiniSweAgentAdapter, config
from replayer.adapters.mini_swe_agent.session import Native
from replayer.floor.pins import running_version
from tests.conftest import MINI, ROOT, replayer

V1 = MINI.fixture("v1") / "trajectory.traj.json"
FIELD_1X = (
    ROOT / "tests" / "fixtures" / "field" / "mini_swe_agent" / "gemini3pro-v1.15-django-16255.traj.json"
)
FORK_ENV = "swebench_fork.environments.CachedDockerEnvironment"  # a fork's subclass, not in the package
LITELLM = "minisweagent.models.litellm_model.LitellmModel"


def priced_mock(tmp_path: Path) -> Path:
    """A mock answering as a model litellm prices: the run recorded `cost_tracking: default`, so 1.x stops on
    an answer it cannot price (the bare mock's model is not in litellm's map)."""
    script = tmp_path / "mock.json"
    script.write_text(json.dumps({"turns": [], "model": "gpt-4o"}))
    return script


def _native(path: Path) -> Native:
    return MiniSweAgentAdapter().parse(path).native_as(Native)


def _forked(tmp_path: Path) -> Path:
    """The real 1.15.0 SWE-bench run as a fork that subclassed DockerEnvironment would have saved it."""
    doc = json.loads(FIELD_1X.read_text())
    doc["info"]["config"]["environment_type"] = FORK_ENV
    doc["info"]["config"]["environment"]["cache_dir"] = "/cache"  # the fork's own option
    path = tmp_path / "forked.traj.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_1x_file_keeps_its_recorded_config_under_its_own_release() -> None:
    native = _native(FIELD_1X)
    with running_version("mini_swe_agent", "1.15.0"):
        spec = config.companion_spec(native, output_path="/out.traj.json")
        assert config.continuation_refusal(native, "openai/gemini-3-pro-preview") is None
    recorded = native.data["info"]["config"]
    assert spec["version"] == "1.15.0" and spec["output_path"] == "/out.traj.json"
    assert spec["config"]["agent"] == recorded["agent"], "1.x's AgentConfig takes the recorded fields"
    assert spec["config"]["model_type"] == LITELLM and spec["substituted_model"] == recorded["model_type"]
    # run by 2.x, the same file's templates move to 2.x's text-based model, and it cannot continue
    spec_2x = config.companion_spec(native, output_path=None)
    assert spec_2x["config"]["model_type"].endswith("LitellmTextbasedModel")
    assert (
        spec_2x["config"]["model"]["observation_template"] == recorded["agent"]["action_observation_template"]
    )
    refusal = config.continuation_refusal(native, "openai/gemini-3-pro-preview")
    assert refusal is not None and "--agent-version 1.x.y" in refusal


def test_a_fork_environment_class_is_judged_by_its_name_and_options(tmp_path: Path) -> None:
    recorded = {"environment": {"image": "x", "executable": "docker", "cwd": "/testbed"}}
    docker = config.DOCKER_ENV
    cases = {
        FORK_ENV: docker,
        "myfork.envs.LocalEnvironmentWithLogs": None,  # names Local but records an image
        "myfork.envs.Sandbox": None,  # neither name
        "minisweagent.environments.singularity.SingularityEnvironment": None,  # the package's own: by name
        docker: None,
    }
    for named, expected in cases.items():
        assert config.extended_environment({**recorded, "environment_type": named}) == expected, named
    local = {"environment_type": "myfork.envs.QuietLocalEnvironment", "environment": {"cwd": "/w"}}
    assert config.extended_environment(local) == config.LOCAL_ENV
    forked = _native(_forked(tmp_path))
    assert config.rerun_refusal(forked) is None
    reason = config.substitution(forked)
    assert reason is not None and FORK_ENV in reason and "DockerEnvironment" in reason
    with running_version("mini_swe_agent", "1.15.0"):
        spec = config.companion_spec(forked, output_path=None)
    assert spec["config"]["environment_type"] == docker and spec["substituted_environment"] == FORK_ENV


def test_a_fork_environment_class_is_refused_before_anything_starts_without_the_flag(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    out = tmp_path / "out"
    proc = replayer("run", str(_forked(tmp_path)), "-n", "1", "-w", str(workspace), "-o", str(out))
    assert proc.returncode == 4 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert FORK_ENV in proc.stderr and "--allow-degraded" in proc.stderr and not out.exists()
    # a prepare reruns nothing: no class runs, nothing is waived
    replayer("prepare", str(_forked(tmp_path)), "-n", "1", "-o", str(tmp_path / "prep"), check=True)
    assert orjson.loads((tmp_path / "prep" / "result.json").read_bytes())["degradations"] == []


@pytest.mark.agent
@pytest.mark.docker
def test_a_1x_recording_reruns_and_continues_by_its_own_release(tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["run", str(V1), "-n", "3", "-w", str(MINI.fixture("v1") / "workspace"), "-o", str(out)]
    replayer(*args, "--continue", "--upstream", "mock", check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    version = result["version"]
    assert (version["version"], version["source"]) == ("1.17.5", "recorded")
    assert version["reruns"] == "mini_swe_agent 1.17.5, its own code" and version["note"] is None
    # the FormatError turn between steps 1 and 2 holds no action: steps 1-3 are the actions before the submission
    assert [d["status"] for d in result["divergences"]] == ["exact"] * 3 and result["degradations"] == []
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"]) == ("accepted", "completed")
    continued = json.loads((out / cont["files"]["continued_trajectory"]).read_text())
    assert (
        continued["trajectory_format"] == "mini-swe-agent-1" and continued["info"]["mini_version"] == "1.17.5"
    )
    assert continued["info"]["exit_status"] == "Submitted"
    assert continued["info"]["config"]["agent_type"] == "minisweagent.agents.interactive.InteractiveAgent"
    assert continued["info"]["config"]["model_type"] == LITELLM
    # 1.x's own messages: role, content and timestamp; the continued request is the rebuilt prefix plus one
    prefix = orjson.loads((out / "expected_prefix.json").read_bytes())
    messages = continued["messages"]
    assert [{"role": m["role"], "content": m["content"]} for m in messages[: len(prefix)]] == prefix
    assert [m["role"] for m in messages[len(prefix) :]] == ["assistant", "user"]
    assert all(set(m) == {"role", "content", "timestamp"} for m in messages[len(prefix) + 1 :])


@pytest.mark.agent
@pytest.mark.docker
def test_a_fork_environment_class_runs_as_the_one_it_extends_with_the_flag(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    out = tmp_path / "out"
    args = [
        "run",
        str(_forked(tmp_path)),
        "-n",
        "1",
        "-w",
        str(workspace),
        "-o",
        str(out),
        "--allow-degraded",
    ]
    args += ["--continue", "--upstream", f"mock:{priced_mock(tmp_path)}", "--model", "openai/gpt-4o"]
    replayer(*args, check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    [degradation] = result["degradations"]
    assert degradation["action"] == "class_substituted" and FORK_ENV in degradation["reason"]
    assert result["version"]["version"] == "1.15.0"
    assert [d["kind"] for d in result["divergences"]] == ["rerun"]
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"]) == ("accepted", "completed")
    stderr = (out / "agent" / "stderr.log").read_text()
    assert "environment option cache_dir left out: DockerEnvironment does not take it" in stderr
    continued = json.loads((out / cont["files"]["continued_trajectory"]).read_text())
    assert continued["info"]["config"]["environment_type"] == config.DOCKER_ENV


@pytest.mark.agent
@pytest.mark.docker
def test_verify_passes_for_a_1x_release(tmp_path: Path) -> None:
    """The probe of 1.15.0 starts from its own line's recording (v1_15), is recorded by 1.15.0's `mini`
    loop through the gate, and replays exactly and continues at every boundary."""
    env = {"REPLAYER_VERDICTS": str(tmp_path / "verdicts")}
    proc = replayer("verify", "mini_swe_agent@1.15.0", "--json", env=env)
    assert proc.returncode == 0, proc.stderr
    [verdict] = orjson.loads(proc.stdout)
    assert verdict["passed"] and verdict["probe"] == "mini_swe_agent/v1_15 (1.15.0)"
    assert verdict["tools_offered"] == [] and verdict["boundaries"] == [1, 2, 3, 4]
    assert all(c["passed"] for c in verdict["checks"]), verdict["checks"]


@pytest.mark.agent
@pytest.mark.docker
def test_the_interactive_agent_of_1x_stops_at_the_step_budget_unattended(tmp_path: Path) -> None:
    """1.x's InteractiveAgent asks for new limits on the terminal when it reaches them; the continuation
    has none, so it ends as DefaultAgent does: `LimitsExceeded` (max_steps), saved by 1.x's save_traj."""
    action = "THOUGHT: look again.\n\n```bash\nls\n```"
    script = tmp_path / "mock.json"
    script.write_text(json.dumps({"turns": [{"blocks": [{"type": "text", "text": action}], "repeat": True}]}))
    out = tmp_path / "out"
    args = ["run", str(V1), "-n", "1", "-w", str(MINI.fixture("v1") / "workspace"), "-o", str(out)]
    replayer(*args, "--continue", "--upstream", f"mock:{script}", "--max-steps", "2", check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "max_steps", 2)
    continued = json.loads((out / cont["files"]["continued_trajectory"]).read_text())
    assert continued["info"]["exit_status"] == "LimitsExceeded"
    rebuilt = json.loads((out / result["native_files"][0]).read_text())
    assert continued["info"]["model_stats"]["api_calls"] == rebuilt["info"]["model_stats"]["api_calls"] + 2
