"""mini-swe-agent input the replayer must refuse, or accept only when asked, each with one clear line.
Variants are derived from the real recordings (the bare list is what the oldest versions wrote)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from replayer.adapters.mini_swe_agent import config
from replayer.adapters.mini_swe_agent.session import Native, parse
from tests.conftest import MINI, ROOT, replayer

ORIGINAL = MINI.fixture("toolcall") / "trajectory.traj.json"
WORKSPACE = str(MINI.fixture("toolcall") / "workspace")
FIELD = ROOT / "tests" / "fixtures" / "field"


def _variant(tmp_path: Path, change) -> Path:  # type: ignore[no-untyped-def]
    doc = json.loads(ORIGINAL.read_text())
    doc = change(doc) or doc
    path = tmp_path / "variant.traj.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def _one_line_error(proc, code: int, needle: str) -> None:  # type: ignore[no-untyped-def]
    assert proc.returncode == code, proc.stderr
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def test_an_unsupported_environment_is_refused_with_its_name(tmp_path: Path) -> None:
    def change(doc):  # type: ignore[no-untyped-def]
        doc["info"]["config"]["environment_type"] = (
            "minisweagent.environments.singularity.SingularityEnvironment"
        )

    path = _variant(tmp_path, change)
    proc = replayer("run", str(path), "-n", "1", "-w", WORKSPACE, "-o", str(tmp_path / "o"))
    _one_line_error(proc, 4, "SingularityEnvironment' is not supported")
    assert not (tmp_path / "o").exists()


def test_forwarded_host_variables_are_refused(tmp_path: Path) -> None:
    def change(doc):  # type: ignore[no-untyped-def]
        doc["info"]["config"]["environment_type"] = "minisweagent.environments.docker.DockerEnvironment"
        doc["info"]["config"]["environment"] |= {"image": "python:3.11", "forward_env": ["GITHUB_TOKEN"]}

    proc = replayer(
        "run", str(_variant(tmp_path, change)), "-n", "1", "-w", WORKSPACE, "-o", str(tmp_path / "o")
    )
    _one_line_error(proc, 4, "forward_env ['GITHUB_TOKEN']")


def test_an_unknown_trajectory_format_is_bad_input(tmp_path: Path) -> None:
    path = _variant(tmp_path, lambda d: d | {"trajectory_format": "mini-swe-agent-9"})
    _one_line_error(replayer("inspect", str(path)), 3, "unknown mini-swe-agent trajectory_format")


def test_a_truncated_file_is_bad_input(tmp_path: Path) -> None:
    path = tmp_path / "cut.traj.json"
    path.write_bytes(ORIGINAL.read_bytes()[:5000])
    _one_line_error(replayer("inspect", str(path)), 3, "unknown format")


@pytest.mark.agent
def test_the_input_trajectory_is_never_modified(tmp_path: Path) -> None:
    before = ORIGINAL.read_bytes()
    replayer("run", str(ORIGINAL), "-n", "1", "-w", WORKSPACE, "-o", str(tmp_path / "o"), check=True)
    assert ORIGINAL.read_bytes() == before


BARE = MINI.fixture("bare_list") / "local.traj.json"


def test_the_oldest_bare_list_is_parsed_prepared_but_never_rerun(tmp_path: Path) -> None:
    inspect = orjson.loads(replayer("inspect", str(BARE), "--json", check=True).stdout)
    assert (inspect["agent"], inspect["agent_version"]) == ("mini_swe_agent", None)
    assert [c["input"]["command"] for s in inspect["steps"] for c in s["calls"]] == [
        "echo 'hello world'",
        "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT",
    ]
    assert [s["final"] for s in inspect["steps"]] == [False, True]
    replayer("prepare", str(BARE), "-n", "1", "-o", str(tmp_path / "p"), check=True)
    version = orjson.loads((tmp_path / "p" / "result.json").read_bytes())["version"]
    assert (version["source"], version["in_file"]) == ("default", None), "a bare list records no version"
    original = json.loads(BARE.read_text())
    assert orjson.loads((tmp_path / "p" / "expected_prefix.json").read_bytes()) == original[:4]
    assert (
        json.loads((tmp_path / "p" / "native" / "home" / "trajectory.traj.json").read_text()) == original[:4]
    )
    proc = replayer(
        "run", str(BARE), "-n", "1", "-w", WORKSPACE, "-o", str(tmp_path / "r"), "--allow-degraded"
    )
    # its echo commands name no absolute path: the default directory; no config to start the agent with
    _one_line_error(proc, 4, "records no config")


def test_a_recorded_deepseek_model_continues_and_other_providers_are_refused() -> None:
    """litellm routes deepseek/ to its OpenAI-compatible chat completions at the bridge (and prices it, which
    mini needs); a provider with its own protocol is refused, naming the prefixes that work."""
    field = FIELD / "mini_swe_agent" / "deepseek-v2.2.7-sqlfluff-2419.traj.json"
    native = parse(field).native_as(Native)
    assert config.model_name(native) == "deepseek/deepseek-chat"
    assert config.continuation_refusal(native, "deepseek/deepseek-chat") is None
    refusal = config.continuation_refusal(native, "anthropic/claude-sonnet-5")
    assert refusal is not None and "openai/, hosted_vllm/, deepseek/" in refusal
