"""`replayer batch` over the recorded trajectories of every agent that has landed: every valid
boundary once, resumable after an interrupt with nothing duplicated or missing, invalid manifests
refused before anything starts, replay jobs in real containers, and the same batch on a local Ray cluster."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from tests.conftest import CLAUDE, MINI, ROOT, replayer, replayer_argv
from tests.support import batches
from tests.support.batches import CHEAP_SOURCES, all_sources, every_source_batch, every_source_records


def _prefixes(out: Path) -> dict[str, bytes]:
    return {d.name: (d / "expected_prefix.json").read_bytes() for d in (out / "jobs").iterdir()}


def _clean_prefixes(clean: Path, like: Path) -> dict[str, bytes]:
    """The uninterrupted batch's prefixes of the jobs `like` holds (a job's key is its content's: the same
    job of a smaller manifest has the same key)."""
    every = _prefixes(clean)
    return {name: every.get(name, b"not in the clean batch") for name in _prefixes(like)}


def _clean_records(records: Path, keys: set[str]) -> bytes:
    """The lines of the uninterrupted batch's export whose job is one of `keys` (records are sorted: the
    export of those jobs alone is these lines)."""
    lines = records.read_bytes().splitlines(keepends=True)
    return b"".join(line for line in lines if orjson.loads(line)["metadata"]["job"] in keys)


@pytest.fixture(scope="module")
def clean(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One uninterrupted local batch of every source, its output and summary: what the other runs equal (made
    once for the test run: test_export.py exports it)."""
    return every_source_batch(tmp_path_factory)


@pytest.mark.docker  # an OpenCode import runs in a sandbox
def test_every_boundary_of_every_agent_once(clean: tuple[Path, dict], tmp_path: Path) -> None:
    manifest, expected = all_sources(tmp_path)
    out, summary = clean
    assert (summary["jobs"], summary["done"], summary["failed"], summary["refused"]) == (
        expected,
        expected,
        0,
        {},
    )
    agents = {orjson.loads((d / "result.json").read_bytes())["agent"] for d in (out / "jobs").iterdir()}
    assert agents == {"claude_code", "codex", "mini_swe_agent", "opencode", "pi"}
    # a job's output is the ordinary `prepare` output for its boundary
    job = next((out / "jobs").iterdir())
    result = orjson.loads((job / "result.json").read_bytes())
    direct = tmp_path / "direct"
    args = ["prepare", result["request"]["trajectory"], "-n", str(result["after_step"]), "-o", str(direct)]
    replayer(*args, "--allow-degraded", check=True)
    assert (job / "expected_prefix.json").read_bytes() == (direct / "expected_prefix.json").read_bytes()
    kept = shutil.copytree(out, tmp_path / "kept")  # the clean output is shared: resumed in a copy
    again = replayer("batch", "--trust-manifest", str(manifest), "-o", str(kept), "--json")
    assert orjson.loads(again.stdout)["skipped"] == expected, "nothing is recomputed"


def _jobs_written(out: Path, at_least: int) -> int:
    """Waits (two minutes at most) until `at_least` jobs of `out` are written; how many are."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(list((out / "jobs").glob("[!.]*"))) < at_least:
        time.sleep(0.05)
    return len(list((out / "jobs").glob("[!.]*")))


def test_an_interrupted_batch_resumes_without_duplicates_and_a_killed_worker_loses_only_its_jobs(
    clean: tuple[Path, dict], tmp_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """One batch of every source but OpenCode's (what is tested is the batch, not the agents: OpenCode's jobs
    run its CLI), three starts: interrupted (Ctrl-C) midway; resumed, one of its workers killed midway (the
    batch goes on); resumed again. Its output then equals the uninterrupted one's for the same jobs."""
    import psutil

    manifest, expected = all_sources(tmp_path, CHEAP_SOURCES)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        replayer_argv("batch", "--trust-manifest", str(manifest), "-o", str(out), "-j", "1"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=os.environ.copy(),
    )
    _jobs_written(out, 5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    partial = len(list((out / "jobs").glob("[!.]*")))
    assert 5 <= partial < expected, "interrupted midway"
    # resumed: a worker killed once three more jobs are written fails only the jobs in flight (two a worker)
    proc = subprocess.Popen(
        replayer_argv("batch", "--trust-manifest", str(manifest), "-o", str(out), "-j", "2", "--json"),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    _jobs_written(out, partial + 3)
    workers = [
        c for c in psutil.Process(proc.pid).children(recursive=True) if "spawn" in " ".join(c.cmdline())
    ]
    assert workers, "the pool runs in worker processes"
    workers[0].kill()
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    first = orjson.loads(stdout)
    assert first["jobs"] == expected and 1 <= first["failed"] <= 4, ("the jobs in flight failed", first)
    lost = first["failed"]
    assert (first["done"], first["skipped"], first["refused"]) == (expected - partial - lost, partial, {}), (
        "the batch went on",
        first,
    )
    assert not (out / "outcomes").exists() or not any(
        b"worker" in p.read_bytes() for p in (out / "outcomes").iterdir()
    ), "jobs the dead worker never finished are not recorded as failed on disk"
    resumed = replayer("batch", "--trust-manifest", str(manifest), "-o", str(out), "-j", "2", "--json")
    summary = orjson.loads(resumed.stdout)
    assert (summary["done"], summary["skipped"], summary["failed"]) == (lost, expected - lost, 0)
    assert len(_prefixes(out)) == expected and _prefixes(out) == _clean_prefixes(clean[0], out), (
        "same jobs, same bytes"
    )
    records = every_source_records(tmp_path_factory)  # first: it installs the versions the export captures
    replayer("export", str(out), "-o", str(tmp_path / "out.jsonl"), check=True)
    assert (tmp_path / "out.jsonl").read_bytes() == _clean_records(records, set(_prefixes(out))), (
        "byte-identical export"
    )
    assert not [p for p in (out / "jobs").iterdir() if p.name.startswith(".")], "no partial result left"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "manifest line 2: not JSON"),
        ('{"trajectory": "x.jsonl", "colour": 1}', "manifest line 2: colour: Extra inputs are not permitted"),
        ('{"trajectory": "missing.jsonl"}', "manifest line 2: trajectory"),
        ('{"trajectory": "TRAJ", "boundaries": [99]}', "manifest line 2: boundary 99 is not one of"),
        (
            '{"trajectory": "TRAJ", "mode": "replay"}',
            "manifest line 2: mode replay needs an existing workspace",
        ),
        (
            '{"trajectory": "TRAJ", "boundaries": {"sample": 0}}',
            "manifest line 2: boundaries.sample: Input should be greater than or equal to 1",
        ),
        (
            '{"trajectory": "TRAJ", "boundaries": "some"}',
            'manifest line 2: boundaries: Value error, must be "all", a list',
        ),
    ],
)
def test_invalid_manifests_are_refused_before_anything_starts(
    line: str, message: str, tmp_path: Path
) -> None:
    traj = str(MINI.fixture("toolcall") / "trajectory.traj.json")
    path = tmp_path / "manifest.jsonl"
    path.write_text(f'{{"trajectory": "{traj}"}}\n' + line.replace("TRAJ", traj) + "\n")
    proc = replayer("batch", "--trust-manifest", str(path), "-o", str(tmp_path / "out"))
    assert proc.returncode == 3, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "out").exists()


def _replay_manifest(tmp_path: Path) -> Path:
    line = {
        "trajectory": str(MINI.fixture("toolcall") / "trajectory.traj.json"),
        "boundaries": [1, 2, 3],
        "mode": "replay",
        "workspace": str(MINI.fixture("toolcall") / "workspace"),
    }
    return batches.manifest(tmp_path, [line])


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A batch of one trajectory's replay jobs (boundaries 1, 2, 3), run once: its manifest and its output
    (the tests resume copies of it)."""
    folder = tmp_path_factory.mktemp("replay-jobs")
    manifest, out = _replay_manifest(folder), folder / "out"
    proc = replayer("batch", "--trust-manifest", str(manifest), "-o", str(out), "-j", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    assert orjson.loads(proc.stdout)["done"] == 3
    return manifest, out


@pytest.mark.agent
def test_the_replay_jobs_of_a_trajectory_are_one_replay_and_resume_where_it_stopped(
    replayed: tuple[Path, Path], tmp_path: Path
) -> None:
    manifest, out = replayed[0], Path(shutil.copytree(replayed[1], tmp_path / "out", symlinks=True))
    dirs = {d.name: d for d in (out / "jobs").iterdir()}
    results = {n: orjson.loads((d / "result.json").read_bytes()) for n, d in dirs.items()}
    assert sorted(r["after_step"] for r in results.values()) == [1, 2, 3]
    assert len({r["container"] for r in results.values()}) == 1, "one replay, one container"
    assert all(d["status"] == "exact" for r in results.values() for d in r["divergences"])
    # a batch that stopped mid-replay: the boundaries it wrote stay, one more replay writes the others
    missing = sorted(results, key=lambda n: results[n]["after_step"])[1:]
    for name in missing:
        shutil.rmtree(dirs[name])
    again = orjson.loads(
        replayer("batch", "--trust-manifest", str(manifest), "-o", str(out), "--json").stdout
    )
    assert (again["done"], again["skipped"]) == (2, 1)
    redone = [orjson.loads((dirs[n] / "result.json").read_bytes()) for n in missing]
    assert [r["after_step"] for r in redone] == [2, 3]
    assert len({r["container"] for r in redone}) == 1
    assert redone[0]["container"] != results[missing[0]]["container"], "replayed again"


@pytest.mark.agent
def test_a_refused_boundary_does_not_sink_the_others_of_its_replay(
    replayed: tuple[Path, Path], tmp_path: Path
) -> None:
    manifest, out = replayed[0], Path(shutil.copytree(replayed[1], tmp_path / "out", symlinks=True))
    # boundary 2's directory replaced by a file: its job is refused, 1 and 3 are replayed together
    for d in (out / "jobs").iterdir():
        after = orjson.loads((d / "result.json").read_bytes())["after_step"]
        shutil.rmtree(d)
        if after == 2:
            d.write_text("in the way\n")
    again = orjson.loads(
        replayer("batch", "--trust-manifest", str(manifest), "-o", str(out), "--json").stdout
    )
    assert again["done"] == 2 and again["failed"] + sum(again["refused"].values()) == 1, again
    outcomes = orjson.loads((out / "batch.json").read_bytes())["outcomes"]
    failed = [o for o in outcomes if o["status"] != "done"]
    assert [(o["boundary"], o["error_kind"]) for o in failed] == [(2, "output")]


def test_the_same_batch_on_a_local_ray_cluster(clean: tuple[Path, dict], tmp_path: Path) -> None:
    manifest, expected = all_sources(tmp_path, CHEAP_SOURCES)
    local = clean[0]
    proc = replayer(
        "batch",
        "--trust-manifest",
        str(manifest),
        "-o",
        str(tmp_path / "ray"),
        "--ray",
        "local",
        "-j",
        "2",
        "--json",
    )
    assert proc.returncode == 0, proc.stderr
    assert orjson.loads(proc.stdout)["done"] == expected
    assert _prefixes(tmp_path / "ray") == _clean_prefixes(local, tmp_path / "ray")


def test_a_refusal_is_kept_and_retried_on_request(tmp_path: Path) -> None:
    session = str(CLAUDE.fixture("single") / "session.jsonl")
    line = {"trajectory": session, "boundaries": [1], "agent_version": "2.0.64", "require_verified": True}
    refused = batches.manifest(tmp_path, [line])  # an unverified version, refused when asked
    first = orjson.loads(
        replayer("batch", "--trust-manifest", str(refused), "-o", str(tmp_path / "r"), "--json").stdout
    )
    assert sum(first["refused"].values()) == 1
    outcome = next((tmp_path / "r" / "outcomes").iterdir())
    before = outcome.stat().st_mtime_ns
    again = orjson.loads(
        replayer("batch", "--trust-manifest", str(refused), "-o", str(tmp_path / "r"), "--json").stdout
    )
    assert sum(again["refused"].values()) == 1 and outcome.stat().st_mtime_ns == before, "not rerun"
    retried = orjson.loads(
        replayer(
            "batch", "--trust-manifest", str(refused), "-o", str(tmp_path / "r"), "--json", "--retry-failed"
        ).stdout
    )
    assert sum(retried["refused"].values()) == 1 and outcome.stat().st_mtime_ns > before, "rerun on request"
