"""Containers ahead of need (sandboxes/ahead.py), on the real engine: the next run of the same shape gets the
container started while the run before it went on, with the same results as a container started for it; a
run of another shape gets its own; nothing is left, neither by the backend's close nor by a batch."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from replayer import api
from replayer.floor.limits import SandboxLimits
from replayer.floor.owner import orphans
from replayer.floor.requests import ReplayRequest
from replayer.pipeline.engine import execute
from replayer.sandboxes.ahead import AheadBackend
from replayer.sandboxes.docker import DockerBackend, DockerSandbox
from replayer.sandboxes.slots import SLOT_ROOT
from replayer.verbs.batch_dir import BATCH_LABEL, batch_id
from tests.conftest import CODEX, ROOT, replayer_argv

pytestmark = pytest.mark.docker

SOURCE = CODEX.fixture("patch")
"""Its first four steps are patches the CLI applies in its own process (added, updated, deleted, moved files of
the workspace): their outputs do not depend on the machine's load. An `exec_command`'s may: the CLI waits at most
50 ms after the command's exit for its output, and on a busy machine reports it empty (seen in CI)."""
AFTER = 4


def _copies(tmp_path: Path, n: int) -> list[Path]:
    """`n` copies of the recorded rollout, each its own session (so its own batch job)."""
    text = (SOURCE / "rollout.jsonl").read_text()
    old = orjson.loads(text.splitlines()[0])["payload"]["id"]
    paths = []
    for i in range(n):
        path = tmp_path / f"rollout-{i}.jsonl"
        path.write_text(text.replace(old, str(uuid.UUID(int=i + 1))))
        paths.append(path)
    return paths


def _request(source: Path, out: Path, **extra: Any) -> ReplayRequest:
    return ReplayRequest(
        mode="run", trajectory=source, after_step=AFTER, out=out, workspace=SOURCE / "workspace", **extra
    )


def _outcome(result_dir: Path) -> tuple[object, ...]:
    """What a run's result must share with the same run in a container started for it."""
    result = orjson.loads((result_dir / "result.json").read_bytes())
    statuses = [(d["call_id"], d["status"]) for d in result["divergences"]]
    native = sorted(str(p.relative_to(result_dir)) for p in (result_dir / "native").rglob("*"))
    return result["after_step"], statuses, native, result["sandbox"]["container_disk_limited"]


def _exists(docker_client, name: str) -> bool:
    return bool(docker_client.api.containers(all=True, filters={"name": f"^/{name}$"}))


class _Counting(AheadBackend):
    """The backend, keeping each container it returned and the spare it holds after each start."""

    def __init__(self) -> None:
        super().__init__()
        self.boxes: list[DockerSandbox] = []

    def start(self, spec: Any) -> DockerSandbox:
        box = super().start(spec)
        self.boxes.append(box)
        return box


def test_the_next_run_gets_the_container_started_ahead(tmp_path: Path, docker_client) -> None:
    sources = _copies(tmp_path, 3)
    backend = _Counting()
    try:
        ahead = [
            execute(_request(s, tmp_path / f"ahead-{i}"), backend=backend) for i, s in enumerate(sources)
        ]
        assert (backend.started, backend.served) == (1, 2), "the second and third run took the spare"
        spare = backend.spare()
        assert spare is not None and spare.slot is not None and _exists(docker_client, spare.name)
        assert spare.name not in {box.name for box in backend.boxes}
        # a run of another shape (other limits) gets a container of its own; the spare is removed
        other = execute(
            _request(sources[0], tmp_path / "other", limits=SandboxLimits(pids=512)), backend=backend
        )
        assert (backend.started, backend.served) == (2, 2)
        assert not _exists(docker_client, spare.name) and not spare.slot.path.exists()
        last = backend.spare()
        assert last is not None and last.slot is not None and _exists(docker_client, last.name)
    finally:
        backend.close()
    assert not _exists(docker_client, last.name) and not last.slot.path.exists(), "closed: none left"
    assert all(not _exists(docker_client, box.name) for box in backend.boxes), "every run removed its own"
    assert len({r.container for r in [*ahead, other]}) == 4
    cold = [
        execute(_request(s, tmp_path / f"cold-{i}"), backend=DockerBackend()) for i, s in enumerate(sources)
    ]
    assert [r.container for r in cold] != [r.container for r in ahead]
    for i in range(len(sources)):
        assert _outcome(tmp_path / f"ahead-{i}") == _outcome(tmp_path / f"cold-{i}")


def _manifest(tmp_path: Path, n: int) -> Path:
    lines = [
        {
            "trajectory": str(p),
            "mode": "replay",
            "boundaries": [AFTER],
            "workspace": str(SOURCE / "workspace"),
        }
        for p in _copies(tmp_path, n)
    ]
    path = tmp_path / "manifest.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def _batch_containers(docker_client, out: Path) -> list[str]:
    listed = docker_client.api.containers(all=True, filters={"label": f"{BATCH_LABEL}={batch_id(out)}"})
    return [c["Names"][0] for c in listed]


def _by_trajectory(out: Path) -> dict[str, tuple[object, ...]]:
    found = {}
    for job in (out / "jobs").iterdir():
        request = orjson.loads((job / "result.json").read_bytes())["request"]
        found[Path(request["trajectory"]).name] = _outcome(job)
    return found


def test_a_batch_with_containers_ahead_gives_the_same_results_and_leaves_nothing(
    tmp_path: Path, docker_client
) -> None:
    manifest = _manifest(tmp_path, 4)
    slots_before = set(orphans(SLOT_ROOT)) if SLOT_ROOT.is_dir() else set()
    outs = {ahead: tmp_path / f"out-{ahead}" for ahead in (False, True)}
    for ahead, out in outs.items():
        counts = api.batch(manifest, out, workers=1, containers_ahead=ahead, trust_manifest=True)
        assert (counts.jobs, counts.done) == (4, 4), counts
        assert not _batch_containers(docker_client, out), "no container of the batch is left"
    assert _by_trajectory(outs[True]) == _by_trajectory(outs[False])
    left = (set(orphans(SLOT_ROOT)) if SLOT_ROOT.is_dir() else set()) - slots_before
    assert not left, f"slots left by the workers: {left}"


def test_an_interrupted_batch_removes_its_containers_at_once(tmp_path: Path, docker_client) -> None:
    """Ctrl-C of the batch (its parent alone): the workers end, and their jobs' containers and the
    containers ahead go with them, without waiting for the next batch on the directory."""
    manifest = _manifest(tmp_path, 6)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        replayer_argv("batch", "--trust-manifest", str(manifest), "-o", str(out), "-j", "1"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=os.environ.copy(),
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(_batch_containers(docker_client, out)) < 2:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    assert len(_batch_containers(docker_client, out)) >= 2, "a job's container and the one ahead"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert not _batch_containers(docker_client, out), "nothing left for the next batch to remove"
    resumed = orjson.loads(
        subprocess.run(
            replayer_argv("batch", "--trust-manifest", str(manifest), "-o", str(out), "--json"),
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout
    )
    assert resumed["done"] + resumed["skipped"] == 6 and resumed["failed"] == 0, resumed
