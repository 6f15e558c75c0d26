"""Many continuations, one prefix (replayer/pipeline/fanout.py): `run -n a,b --continue` replays once and
continues each boundary in a container forked from its snapshot, each result equal to what `run -n k
--continue` writes alone (gate, prefix, rebuilt session, outcome, state); and a batch's continue jobs of
one trajectory use one replay, resume only the missing boundaries. Real containers, the real pinned Claude
Code CLI, the built-in mock model."""

from __future__ import annotations

import shutil
from pathlib import Path

import docker
import orjson
import pytest

from replayer.pipeline.fanout import FANOUT_LABEL
from tests.conftest import CLAUDE, replayer
from tests.replayer.test_multiboundary import _content, _renewed, _tree

pytestmark = [pytest.mark.docker, pytest.mark.agent]

FIXTURE = CLAUDE.fixture("write_edit")
SESSION = FIXTURE / "session.jsonl"
BOUNDARIES = (2, 5)
NO_KEY = {"ANTHROPIC_API_KEY": "", "REPLAYER_UPSTREAM": ""}


def _run(*args: str) -> dict:
    proc = replayer(
        "run",
        str(SESSION),
        "-w",
        str(FIXTURE / "workspace"),
        *args,
        "--upstream",
        "mock",
        "--json",
        env=NO_KEY,
    )
    assert proc.returncode == 0, proc.stderr
    return orjson.loads(proc.stdout)


def _same_continuation(alone: Path, forked: Path) -> None:
    one = orjson.loads((alone / "result.json").read_bytes())
    many = orjson.loads((forked / "result.json").read_bytes())
    for field in ("after_step", "boundary_call_ids", "degradations"):
        assert many[field] == one[field], field
    assert [(d["call_id"], d["status"]) for d in many["divergences"]] == [
        (d["call_id"], d["status"]) for d in one["divergences"]
    ]
    assert many["request"]["continuation"] == one["request"]["continuation"]
    a, b = one["continuation"], many["continuation"]
    for field in (
        "gate",
        "agent_status",
        "input_condition",
        "steps_used",
        "mock",
        "agent_exit_code",
        "files",
    ):
        assert b[field] == a[field], field
    assert b["gate"] == "accepted" and b["agent_status"] == "completed"
    for name in ("expected_prefix.json", "continuation.json", "reruns.json"):  # the prefix the gate proved
        assert _content((forked / name).read_bytes()) == _content((alone / name).read_bytes()), name
    assert [_renewed(n) for n in many["native_files"]] == [_renewed(n) for n in one["native_files"]]
    for native in one["native_files"]:  # the rebuilt session
        mine = next(n for n in many["native_files"] if _renewed(n) == _renewed(native))
        assert _content((forked / mine).read_bytes()) == _content((alone / native).read_bytes()), native
    # the continued session, the agent's output files and the state as the continuation left them
    assert _tree(forked / "continued", contents=False) == _tree(alone / "continued", contents=False)
    assert _tree(forked / "state" / "workspace") == _tree(alone / "state" / "workspace")
    for place in ("agent", "bridge"):
        assert sorted(p.name for p in (forked / place).iterdir()) == sorted(
            p.name for p in (alone / place).iterdir()
        )


def test_continuations_at_several_boundaries_fork_from_one_replay(tmp_path: Path) -> None:
    many = _run("-n", ",".join(map(str, BOUNDARIES)), "-o", str(tmp_path / "many"), "--continue")
    shown = many["boundaries"]
    assert sorted(shown) == sorted(str(k) for k in BOUNDARIES)
    assert len({r["container"] for r in shown.values()}) == 1, "one replay, in one container"
    for k in BOUNDARIES:
        _run("-n", str(k), "-o", str(tmp_path / f"alone-{k}"), "--continue")
        _same_continuation(tmp_path / f"alone-{k}", tmp_path / "many" / f"after-{k}")
    # the boundaries' snapshot images are gone with the run
    assert not docker.from_env().images.list(filters={"label": FANOUT_LABEL})


def test_a_batch_continues_the_boundaries_of_a_trajectory_from_one_replay(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.jsonl"
    line = {
        "trajectory": str(SESSION),
        "boundaries": list(BOUNDARIES),
        "mode": "continue",
        "workspace": str(FIXTURE / "workspace"),
        "continuation": {"upstream": "mock"},
    }
    manifest.write_bytes(orjson.dumps(line) + b"\n")
    out = tmp_path / "out"
    proc = replayer("batch", str(manifest), "-o", str(out), "--json", env=NO_KEY)
    assert proc.returncode == 0, proc.stderr
    assert orjson.loads(proc.stdout)["done"] == len(BOUNDARIES)
    jobs = sorted((out / "jobs").iterdir())
    results = [orjson.loads((job / "result.json").read_bytes()) for job in jobs]
    assert sorted(r["after_step"] for r in results) == list(BOUNDARIES), "a directory a job"
    assert len({r["container"] for r in results}) == 1, "one replay for the trajectory's continue jobs"
    assert all(r["continuation"]["agent_status"] == "completed" for r in results)
    # a batch that lost one boundary's directory redoes that boundary only
    lost = next(j for j, r in zip(jobs, results, strict=True) if r["after_step"] == BOUNDARIES[0])
    shutil.rmtree(lost)
    again = replayer("batch", str(manifest), "-o", str(out), "--json", env=NO_KEY)
    assert again.returncode == 0, again.stderr
    summary = orjson.loads(again.stdout)
    assert (summary["done"], summary["skipped"]) == (1, len(BOUNDARIES) - 1)
    redone = orjson.loads((lost / "result.json").read_bytes())
    assert redone["after_step"] == BOUNDARIES[0] and redone["continuation"]["agent_status"] == "completed"
    kept = [r for r in results if r["after_step"] != BOUNDARIES[0]]
    assert all(redone["container"] != r["container"] for r in kept), "a new replay for the missing one"


def test_a_refused_boundary_does_not_sink_the_others_continuations(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / f"after-{BOUNDARIES[0]}").mkdir(parents=True)  # its directory exists: that boundary is refused
    args = [
        "-n",
        ",".join(map(str, BOUNDARIES)),
        "-o",
        str(out),
        "--continue",
        "--upstream",
        "mock",
        "--json",
    ]
    proc = replayer("run", str(SESSION), "-w", str(FIXTURE / "workspace"), *args, env=NO_KEY)
    assert proc.returncode == 7, proc.stderr
    shown = orjson.loads(proc.stdout)["boundaries"]
    assert shown[str(BOUNDARIES[0])]["error_kind"] == "output"
    assert shown[str(BOUNDARIES[1])]["continuation"]["agent_status"] == "completed"
    assert not any((out / f"after-{BOUNDARIES[0]}").iterdir()), "the existing directory is left as it was"
