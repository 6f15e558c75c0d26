"""mini-swe-agent's files of the field corpus (tests/support/field.py): a 2.x SWE-bench run rerun at its own
version and continued through the gate (against the scripted upstream and bare `mock`), a 1.x
run rerun and continued by its own release, and the recording's environment reaching the reruns."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.conftest import replayer
from tests.support import field
from tests.support.field import FIELD

test_a_field_trajectory_runs_at_its_own_version, test_a_field_continuation_ends_when_the_bare_mock_ends_it = (
    field.own_version_tests("mini_swe_agent")
)


DJANGO = FIELD / "mini_swe_agent" / "gemini3pro-v1.15-django-16255.traj.json"


def _django_workspace(workspace: Path) -> Path:
    """A workspace holding an empty `django` package, which the run's `python3 reproduce_issue.py` (step 4)
    imports."""
    (workspace / "django").mkdir(parents=True)
    (workspace / "django" / "__init__.py").write_text("")
    return workspace


@pytest.fixture(scope="module")
def continued_1x(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real SWE-bench run of 1.15.0 rerun through step 4 and continued against a mock of a model litellm
    prices (the run recorded `cost_tracking: default`), in a workspace of an empty `django` package, with
    the recording's environment as it is (no --agent-env): the result directory."""
    root = tmp_path_factory.mktemp("mini-1x")
    workspace = _django_workspace(root / "workspace")
    script = root / "mock.json"
    script.write_text('{"turns": [], "model": "gpt-4o"}')
    args = ["run", str(DJANGO), "-n", "4", "-w", str(workspace), "-o", str(root / "out")]
    replayer(*args, "--continue", "--upstream", f"mock:{script}", "--model", "openai/gpt-4o", check=True)
    return root / "out"


@pytest.mark.agent
@pytest.mark.docker
def test_a_mini_swe_agent_1x_run_reruns_and_continues_by_its_own_release(
    continued_1x: Path, tmp_path: Path
) -> None:
    """The real SWE-bench run of 1.15.0 (OpenRouterModel, DockerEnvironment, the batch runner's agent) reruns
    by 1.15.0's own DefaultAgent and DockerEnvironment; its continuation queries through 1.15.0's LitellmModel,
    which sends the messages whole as 1.15.0 did (`extra` included), and passes the gate. Run by 2.x (stated),
    it cannot continue, which is refused in one line before anything starts."""
    empty = tmp_path / "workspace"
    empty.mkdir()
    args = ["run", str(DJANGO), "-n", "3", "-w", str(empty), "-o", str(tmp_path / "2x"), "--continue"]
    args += ["--upstream", "mock", "--model", "openai/gpt-4o", "--agent-version", "2.4.6"]
    refused = replayer(*args)
    assert refused.returncode == 4 and "2.4.6 sends a different wire form" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "2x").exists()
    out = continued_1x
    result = orjson.loads((out / "result.json").read_bytes())
    version = result["version"]
    assert (version["version"], version["source"], version["reruns"]) == (
        "1.15.0",
        "recorded",
        "mini_swe_agent 1.15.0, its own code",
    )
    assert "OpenRouterModel" in version["note"] and "ProgressTrackingAgent" in version["note"]
    assert [d["kind"] for d in result["divergences"]] == ["rerun"] * 4 and result["degradations"] == []
    assert (result["continuation"]["gate"], result["continuation"]["agent_status"]) == (
        "accepted",
        "completed",
    )
    prefix = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert "response" in prefix[2]["extra"], "1.15.0 sent each message whole"
    continued = orjson.loads((out / "continued" / "trajectory.traj.json").read_bytes())
    assert (continued["info"]["mini_version"], continued["info"]["exit_status"]) == ("1.15.0", "Submitted")
    assert continued["instance_id"] == "django__django-16255"


@pytest.mark.agent
@pytest.mark.docker
def test_agent_env_reaches_the_reruns(continued_1x: Path, tmp_path: Path) -> None:
    """The recording's environment (--agent-env) applies to the reruns, not only the continuation: the
    django run's `python3 reproduce_issue.py` (step 4) imports the workspace's `django` package, whose
    bytecode cache Python writes unless the run was recorded with PYTHONDONTWRITEBYTECODE=1. Without the
    option: the module's continued run through step 4."""
    workspace, uncached = _django_workspace(tmp_path / "workspace-False"), tmp_path / "out-False"
    env = ("--agent-env", "PYTHONDONTWRITEBYTECODE=1")
    replayer("run", str(DJANGO), "-n", "4", "-w", str(workspace), "-o", str(uncached), *env, check=True)
    for out, options, cached in ((continued_1x, (), True), (uncached, env, False)):
        assert (out / "state" / "workspace" / "django" / "__pycache__").is_dir() == cached
        result = orjson.loads((out / "result.json").read_bytes())
        assert result["request"]["agent_env"] == dict([o.split("=") for o in options[1:]])
