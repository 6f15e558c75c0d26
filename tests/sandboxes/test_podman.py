"""Podman as the second engine (sandboxes/podman.py), a representative slice on it: `run`, `run --continue`
against the mock model, `compare` with forks and a batch pass. The module sets Podman up the way a user
does (`replayer setup --engine podman`: podman_up.sh, the base image); each test asks Podman's own event
log that its containers ran there."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import docker.errors
import orjson
import pytest

from replayer.sandboxes.base import LABEL
from tests.conftest import CLAUDE, replayer

pytestmark = [pytest.mark.agent, pytest.mark.podman]

FIXTURE = CLAUDE.fixture("write_edit")
TRAJ = str(FIXTURE / "session.jsonl")
WORKSPACE = str(FIXTURE / "workspace")


@pytest.fixture(scope="module")
def podman() -> Iterator[object]:
    """Podman's API, set up by the project's own setup (idempotent: a second call only checks)."""
    replayer("setup", "--engine", "podman", "--no-bundles", check=True)
    from replayer.sandboxes.podman import connect

    client = connect()
    yield client
    client.close()


def created_on_podman(client: object, since: float) -> set[str]:
    """The names of the replayer's containers Podman created since `since`. Asked with `stream=false` and no
    `until`: Podman's file event log stops reading at `until` even when it has not yet reached the end of the
    file, which lost the newest events on a loaded machine."""
    api = client.api  # type: ignore[attr-defined]
    params = {"since": int(since) - 1, "stream": "false", "filters": orjson.dumps({"type": ["container"]})}
    reply = api._get(api._url("/events"), params=params)
    reply.raise_for_status()
    events = [orjson.loads(line) for line in reply.content.splitlines() if line.strip()]
    return {
        e["Actor"]["Attributes"].get("name", "")
        for e in events
        if e.get("Action") == "create" and LABEL in e["Actor"]["Attributes"]
    }


def test_run_and_continue_against_the_mock_on_podman(podman: object, tmp_path: Path) -> None:
    started = time.time()
    out = tmp_path / "run"
    replayer(
        "run", TRAJ, "-n", "2", "-w", WORKSPACE, "-o", str(out), "--engine", "podman",
        "--continue", "--upstream", "mock", check=True,
    )  # fmt: skip
    result = orjson.loads((out / "result.json").read_bytes())
    assert [d["status"] for d in result["divergences"]] == ["exact", "exact"]
    assert result["continuation"]["agent_status"] == "completed"
    assert result["container"] in created_on_podman(podman, started)


def test_compare_forks_on_podman_and_says_they_started_cold(podman: object, tmp_path: Path) -> None:
    started = time.time()
    out = tmp_path / "cmp"
    replayer(
        "compare", TRAJ, "-n", "2", "-w", WORKSPACE, "-o", str(out), "--upstream", "mock",
        "--variant", "a=", "--variant", "b=", check=True, env={"REPLAYER_ENGINE": "podman"},
    )  # fmt: skip
    report = orjson.loads((out / "compare.json").read_bytes())
    runs = report["runs"]
    assert sorted(r["variant"] for r in runs) == ["a", "b"]
    assert all(r["continuation"]["agent_status"] == "completed" for r in runs)
    assert {r["fork_path"] for r in runs} == {"cold"}
    assert {r["fork_fallback"] for r in runs} == {
        "the engine starts no fork before its boundary (Docker only)"
    }
    assert {r["container"] for r in runs} <= created_on_podman(podman, started)
    assert report["snapshot_image"].startswith("sha256:") and not report["snapshot_kept"]
    with pytest.raises(docker.errors.ImageNotFound):  # removed from Podman's store once the forks ran
        podman.images.get(report["snapshot_image"])


def test_a_batch_pass_on_podman(podman: object, tmp_path: Path) -> None:
    started = time.time()
    manifest = tmp_path / "manifest.jsonl"
    line = {"trajectory": TRAJ, "workspace": WORKSPACE, "mode": "replay", "boundaries": [1, 2]}
    manifest.write_bytes(orjson.dumps(line) + b"\n")
    out = tmp_path / "out"
    proc = replayer(
        "batch", "--trust-manifest", str(manifest), "-o", str(out), "-j", "2", "--json", "--engine", "podman"
    )
    assert proc.returncode == 0, proc.stderr
    assert orjson.loads(proc.stdout)["done"] == 2
    results = [orjson.loads(p.read_bytes()) for p in (out / "jobs").glob("*/result.json")]
    containers = {r["container"] for r in results}
    assert len(containers) == 1, "one replay, one container"
    assert containers <= created_on_podman(podman, started)


def test_setup_again_reuses_the_service_and_the_image(podman: object) -> None:
    proc = replayer("setup", "--engine", "podman", "--no-bundles", check=True)
    assert proc.stdout.splitlines()[0] == "engine: running"
    assert (
        proc.stdout.splitlines()[1].startswith("base image sandbox-replayer/base:")
        and "present" in proc.stdout
    )


def test_an_unknown_engine_is_a_usage_error() -> None:
    proc = replayer("gc", "--engine", "lxc")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "lxc" in proc.stderr and "podman" in proc.stderr
