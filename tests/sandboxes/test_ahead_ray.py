"""Containers ahead of need on Ray (replayer/verbs/executors.py, `run_ray`), on the two-node local cluster
(tests/support/ray_cluster.py): each node's actor takes the spare it started for its next job; the results
equal those of the same batch without spares; and nothing is left on the engine, in the slots or in the
states, whether the batch ends, is interrupted (Ctrl-C of the driver) or loses an actor (kill -9)."""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import psutil
import pytest

from replayer import api
from replayer.floor.owner import orphans
from replayer.sandboxes.quota import STATE_ROOT
from replayer.sandboxes.slots import SLOT_ROOT
from replayer.verbs.batch_dir import BATCH_LABEL, batch_id
from tests.conftest import ROOT
from tests.sandboxes.test_ahead import _batch_containers, _by_trajectory, _manifest
from tests.support.ray_cluster import RayCluster, ray_nodes

pytestmark = pytest.mark.docker

_COUNTS = re.compile(
    r"containers ahead on node (\w+): (\d+) start\(s\) took a spare, (\d+) started their own"
)


def _left() -> set[Path]:
    """Slots and states whose owner is gone (what an actor that did not clean up leaves)."""
    return {p for root in (SLOT_ROOT, STATE_ROOT) for p in orphans(root)}


@pytest.fixture(scope="module")
def cluster() -> Iterator[RayCluster]:
    """One two-node cluster for the module's batches (each batch's actors end with it)."""
    with ray_nodes() as nodes:
        yield nodes


def test_ray_actors_take_their_spares_with_equal_results_and_leave_nothing(
    cluster: RayCluster,
    tmp_path: Path,
    docker_client,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    manifest = _manifest(tmp_path, 6)
    before = _left()
    outs = {ahead: tmp_path / f"out-{ahead}" for ahead in (False, True)}
    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    for ahead, out in outs.items():
        caplog.clear()
        with caplog.at_level(logging.DEBUG, logger="replayer.verbs.executors"):
            counts = api.batch(
                manifest, out, ray=cluster.address, containers_ahead=ahead, trust_manifest=True
            )
        assert (counts.jobs, counts.done) == (6, 6), counts
        assert not _batch_containers(docker_client, out), "no container of the batch is left"
        found = {m[1]: (int(m[2]), int(m[3])) for m in _COUNTS.finditer(caplog.text)}
        if ahead:
            assert set(found) == set(cluster.nodes.values()), ("an actor on each node", found)
            assert sum(s + o for s, o in found.values()) == 6, found
            assert all(served >= 1 for served, _ in found.values()), ("each took a spare", found)
        else:
            assert all(served == 0 for served, _ in found.values()), found
    nodes = {o["node"] for o in orjson.loads((outs[True] / "batch.json").read_bytes())["outcomes"]}
    assert nodes == set(cluster.nodes.values()), "both nodes ran jobs"
    assert _by_trajectory(outs[True]) == _by_trajectory(outs[False])
    assert not _left() - before, "slots or states left by the actors"


def _driver(manifest: Path, out: Path, address: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "replayer.cli", "batch", "--trust-manifest", str(manifest), "-o", str(out), "--ray", address,
         "--json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={**os.environ, **env},
    )  # fmt: skip


def _resumed(manifest: Path, out: Path, cluster: RayCluster) -> dict[str, Any]:
    """The summary of the batch run again on `out` (its exit 0)."""
    proc = _driver(manifest, out, cluster.address, cluster.env)
    stdout, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    return dict(orjson.loads(stdout))


def _wait_for(docker_client, out: Path, proc: subprocess.Popen[bytes], n: int) -> None:
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and len(_batch_containers(docker_client, out)) < n:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    assert len(_batch_containers(docker_client, out)) >= n


def test_an_interrupted_ray_batch_leaves_nothing(cluster: RayCluster, tmp_path: Path, docker_client) -> None:
    """Ctrl-C of the driver: the actors end at once, and each node removes the batch's containers (jobs'
    and spares') and the slots and states the actors held."""
    manifest = _manifest(tmp_path, 8)
    out = tmp_path / "out"
    before = _left()
    proc = _driver(manifest, out, cluster.address, cluster.env)
    _wait_for(docker_client, out, proc, 3)  # jobs' containers and at least one spare
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert not _batch_containers(docker_client, out), "nothing left for the next batch to remove"
    assert not _left() - before, "slots or states left by the actors"
    summary = _resumed(manifest, out, cluster)
    assert summary["done"] + summary["skipped"] == 8 and summary["failed"] == 0, summary


def _running_unit(proc: psutil.Process, env: dict[str, str]) -> bool:
    """An actor of this test's cluster (its auth token) running a unit."""
    try:
        mine = proc.environ().get("RAY_AUTH_TOKEN") == env["RAY_AUTH_TOKEN"]
    except psutil.Error:
        return False
    return mine and "_NodeWorker.run" in " ".join(proc.info["cmdline"] or [])


def test_a_killed_ray_actor_loses_only_its_jobs_and_leaves_nothing(
    cluster: RayCluster, tmp_path: Path, docker_client
) -> None:
    manifest = _manifest(tmp_path, 8)
    out = tmp_path / "out"
    before = _left()
    proc = _driver(manifest, out, cluster.address, cluster.env)
    _wait_for(docker_client, out, proc, 3)
    actors = [p for p in psutil.process_iter(["cmdline"]) if _running_unit(p, cluster.env)]
    assert actors, "the units run in Ray actors"
    actors[0].kill()
    stdout, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert stdout, err
    first = orjson.loads(stdout)
    assert 1 <= first["failed"] <= 2 and first["done"] == 8 - first["failed"], first
    assert not _batch_containers(docker_client, out), "the killed actor's container and spare removed"
    assert not _left() - before, "slots or states left by the actors"
    again = _resumed(manifest, out, cluster)
    assert again["done"] == first["failed"] and again["failed"] == 0, again


@pytest.mark.agent
@pytest.mark.timeout(900)
def test_ctrl_c_of_a_ray_batch_with_continuations_in_flight_leaves_nothing_and_says_so(
    cluster: RayCluster, tmp_path: Path, docker_client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 43, item 7, on Ray: Ctrl-C of the driver (its process group) while a continue job's
    continuation runs from its boundary's snapshot on an actor: exit 130, no container or snapshot image of
    the batch left, no partial folder, and batch.json counts both jobs `interrupted`; the next start on the
    directory runs them."""
    from tests.replayer.verbs import test_batch_interrupt as local

    for key, value in cluster.env.items():
        monkeypatch.setenv(key, value)
    local._setup(tmp_path)
    manifest = local._manifest(tmp_path, f"mock:{local._busy_script(tmp_path)}")
    out = tmp_path / "out"
    label = f"{BATCH_LABEL}={batch_id(out)}"
    before = _left()

    def continuing(_: int) -> bool:  # both boundaries snapshotted, a continuation runs from one
        containers, images = local._left(docker_client, label)
        return len(images) == 2 and local._from_snapshot(docker_client, containers)

    args = ["batch", str(manifest), "-o", str(out), "--trust-manifest", "--ray", cluster.address]
    log = tmp_path / "batch.log"
    code = local._signalled(args, log, continuing, signal.SIGINT, group=True)
    assert code == 130, log.read_text()
    assert local._left(docker_client, label) == ([], []), (
        "no container or snapshot image of the batch is left"
    )
    assert not [p.name for p in (out / "jobs").iterdir() if p.name.startswith(".")], "no partial folder left"
    summary = orjson.loads((out / "batch.json").read_bytes())
    assert (summary["jobs"], summary["done"], summary["interrupted"]) == (2, 0, 2), summary
    assert not _left() - before, "slots or states left by the actors"
    quick = local._manifest(tmp_path, "mock")  # the next start: jobs that end at once
    proc = _driver(quick, out, cluster.address, {**cluster.env, **local.NO_KEY})
    stdout, err = proc.communicate(timeout=600)
    assert proc.returncode == 0 and orjson.loads(stdout)["done"] == 2, err
