"""The Python API (docs/api.md) called directly: `replayer.inspect`, `replayer.prepare` and `replayer.run`
on a recorded fixture, their results the command's --json models, their progress as typed events."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

import replayer
from replayer.floor.errors import OutputError, PlanRefused
from replayer.floor.events import CallRerun, Event, JobEnded, Stage
from replayer.floor.results import ReplayResult
from replayer.floor.trajectory import InspectReport
from replayer.pipeline.engine import load
from tests.conftest import CLAUDE

SESSION = CLAUDE.fixture("write_edit") / "session.jsonl"
WORKSPACE = CLAUDE.fixture("write_edit") / "workspace"


def test_the_verbs_are_the_apis_functions_even_where_modules_share_their_names() -> None:
    import replayer.verbs.batch
    import replayer.verbs.compare
    from replayer import api
    from replayer.verbs.batch import run_job  # the modules stay importable by their names

    assert (replayer.compare, replayer.batch, replayer.run) == (api.compare, api.batch, api.run)
    assert run_job.__module__ == "replayer.verbs.batch"


def test_inspect_returns_the_report_inspect_json_prints() -> None:
    report = replayer.inspect(SESSION)
    _, traj = load(SESSION)
    assert isinstance(report, InspectReport) and report.session_id == traj.session_id
    assert [[c.id for c in s.calls] for s in report.steps] == [[c.id for c in s.calls] for s in traj.steps]
    assert report.version is not None and report.version.version == traj.agent_version
    assert all(c.kind == "rerun" and c.has_observation for s in report.steps for c in s.calls)


def test_prepare_writes_the_prefix_and_reports_its_stages(tmp_path: Path) -> None:
    events: list[Event] = []
    result = replayer.prepare(str(SESSION), 2, tmp_path / "prefix", on_event=events.append)
    assert isinstance(result, ReplayResult) and result.after_step == 2
    stored = ReplayResult.model_validate_json((tmp_path / "prefix" / "result.json").read_bytes())
    assert stored == result
    assert [e.name for e in events if isinstance(e, Stage)] == ["parse", "rebuild"]
    assert {d.status for d in result.divergences} == {"historical_kept"}
    with pytest.raises(OutputError):  # the errors the command maps to its exit codes
        replayer.prepare(SESSION, 2, tmp_path / "prefix")
    with pytest.raises(PlanRefused):
        replayer.prepare(SESSION, 99, tmp_path / "other")
    assert not (tmp_path / "other").exists()


@pytest.mark.agent
@pytest.mark.docker
def test_run_reruns_in_a_container_and_tells_each_call_as_it_ends(tmp_path: Path) -> None:
    events: list[Event] = []
    result = replayer.run(SESSION, 3, WORKSPACE, tmp_path / "out", limits="pids=256", on_event=events.append)
    assert result.continuation is None and result.request.limits.pids == 256
    assert orjson.loads((tmp_path / "out" / "result.json").read_bytes())["after_step"] == 3
    stages = [e.name for e in events if isinstance(e, Stage)]
    assert stages == ["parse", "sandbox", "rerun", "rebuild"]
    calls = [e for e in events if isinstance(e, CallRerun)]
    assert [(e.step, e.call_id, e.tool, e.status) for e in calls] == [
        (d.step, d.call_id, d.tool, d.status) for d in result.divergences
    ]
    assert [e.done for e in calls] == list(range(1, len(calls) + 1)) and {e.total for e in calls} == {
        len(calls)
    }
    assert replayer.api.continuation_error(result.continuation, tmp_path / "out") is None


def test_batch_returns_the_counts_and_tells_each_job(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(orjson.dumps({"trajectory": str(SESSION), "mode": "prepare", "boundaries": [1, 2]}))
    events: list[Event] = []
    counts = replayer.batch(
        manifest, tmp_path / "batch", workers=1, on_event=events.append, trust_manifest=True
    )
    assert (counts.jobs, counts.done, counts.failed) == (2, 2, 0)
    assert orjson.loads((tmp_path / "batch" / "batch.json").read_bytes())["done"] == 2
    assert events[0] == Stage("runs", 2)
    assert [(e.done, e.total, e.status) for e in events[1:] if isinstance(e, JobEnded)] == [
        (1, 2, "done"),
        (2, 2, "done"),
    ]
    again = replayer.batch(
        manifest, tmp_path / "batch", on_event=events.append, trust_manifest=True
    )  # nothing left to do
    assert (again.jobs, again.done, again.skipped) == (2, 0, 2) and events[-1] == Stage("runs", 0)
