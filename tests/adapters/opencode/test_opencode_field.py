"""OpenCode's files of the field corpus (tests/support/field.py): `opencode run --format json` logs rerun at
their own version and continued through the gate (against the scripted upstream and bare `mock`), three runs appended to one log, and a session recorded before OpenCode's time ids wrapped."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.conftest import replayer
from tests.support import field
from tests.support.field import FIELD

test_a_field_trajectory_runs_at_its_own_version, _ = field.own_version_tests("opencode")


@pytest.fixture(scope="module")
def against_the_mock(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """OpenCode's MOCK_ENDS run (the sandcastle log at 1.17.18, continued against bare `mock`): the result
    directory and its result."""
    tmp_path = tmp_path_factory.mktemp("opencode-mock-ends")
    return tmp_path / "out", field.continue_against_the_mock(*field.MOCK_ENDS["opencode"], tmp_path)


@pytest.mark.agent
@pytest.mark.docker
def test_a_field_continuation_ends_when_the_bare_mock_ends_it(against_the_mock: tuple[Path, dict]) -> None:
    field.check_the_bare_mock_ended(against_the_mock[1]["continuation"])


test_a_field_continuation_ends_when_the_bare_mock_ends_it.__doc__ = field.check_the_bare_mock_ends_it.__doc__


APPENDED = FIELD / "opencode" / "repo-explainer-kubernetes-3-runs-format-json.jsonl"
KUBERNETES = "/Users/saadkhalid/Projects/repo-explainer/tmp/kubernetes/kubernetes"


@pytest.mark.docker  # an OpenCode import runs in a sandbox
def test_appended_opencode_runs_are_listed_and_each_prepares(tmp_path: Path) -> None:
    """Three `opencode run --format json` runs one after another in one file: listed as sessions; each one
    chosen reads alone, in the folder its write resolved its relative path in (`metadata.filepath`); the
    delegating run's `task` calls are named as sub-agent sessions."""
    listing = orjson.loads(replayer("inspect", str(APPENDED), "--json", check=True).stdout)
    sessions = [s["id"] for s in listing["sessions"]]
    assert len(sessions) == 3 and listing["steps"] == []
    first, delegating, last = sessions
    report = orjson.loads(replayer("inspect", str(APPENDED), "--session", first, "--json", check=True).stdout)
    assert (report["cwd"], report["cwd_source"]) == (KUBERNETES, "inferred")
    assert [c["tool"] for s in report["steps"] for c in s["calls"]] == ["bash", "write"]
    tasks = orjson.loads(
        replayer("inspect", str(APPENDED), "--session", delegating, "--json", check=True).stdout
    )
    assert {c["kind"] for s in tasks["steps"] for c in s["calls"]} == {"unknown"}
    for session in (first, last):
        out = tmp_path / session
        replayer("prepare", str(APPENDED), "--session", session, "-n", "2", "-o", str(out), check=True)
        result = orjson.loads((out / "result.json").read_bytes())
        assert (result["cwd"], result["session_id"]) == (KUBERNETES, session)


@pytest.mark.agent
@pytest.mark.docker
def test_an_opencode_session_recorded_before_its_ids_wrapped_continues_to_its_end(
    against_the_mock: tuple[Path, dict],
) -> None:
    """The sandcastle log's ids were made in May 2026, before OpenCode's 48-bit time ids wrapped (2026-08-14):
    those 1.17.18 (the version of issue 43's export) makes now sort before them, and it asked the model
    again after every final answer. The rebuild moves the prefix's ids before now: the mock's first answer
    ends it, and what the continuation made sorts after everything recorded."""
    out, result = against_the_mock
    assert field.MOCK_ENDS["opencode"][0] == "opencode/sandcastle-run-format-json-stdout.jsonl"
    assert result["version"]["version"] == "1.17.18"
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"]) == ("accepted", "completed"), cont
    assert cont["steps_used"] <= 5 and cont["metadata"]["opencode_ids_moved"]["count"] > 0
    rebuilt = orjson.loads((out / "native" / "export.json").read_bytes())["messages"]
    continued = orjson.loads((out / cont["files"]["continued_session"]).read_bytes())["messages"]
    recorded = {m["info"]["id"] for m in rebuilt}
    made = [m["info"]["id"] for m in continued if m["info"]["id"] not in recorded]
    assert made and min(made) > max(recorded), "the continuation's messages sort after the prefix's"
