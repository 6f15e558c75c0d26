"""Code on the host through the working directory (issue 42, Why 1), rebuilt from its description: a
downloaded dataset folder, the user's working directory, holds a `uv.toml` (no index, its own wheels
folder) with an sdist whose in-tree build backend runs at build time, and `replayer/`, `multiprocessing/`,
`venv/`, `pip/` and `compileall/` packages that run at import. Every host process the replayer starts from
there (bundle installs, compare's runs, the batch pool's workers) starts elsewhere, isolated: nothing of the
folder runs. Real processes, the real uv (and the pip that installs it), the real registry (the versions asked for are not on it)."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from replayer.floor import bundles, hostproc
from replayer.floor.compare_results import RunRecord
from replayer.floor.requests import ContinueRequest, Variant
from replayer.pipeline.fork import ForkJob
from replayer.pipeline.forkpool import ForkPool
from replayer.verbs import executors
from tests.conftest import bundle_cache

PLANTED = ("replayer", "multiprocessing", "venv", "pip", "compileall")
ABSENT = "0.0.2"
"""A version of openhands-ai that PyPI does not have (the dataset's sdist claims it)."""


def _sdist(wheels: Path, name: str, marker: Path) -> None:
    """`name`-ABSENT.tar.gz whose build backend (in the tree, needing nothing) writes `marker` on import."""
    files = {
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\nbackend-path = ["."]\n'
        f'[project]\nname = "{name}"\nversion = "{ABSENT}"\n',
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {name}\nVersion: {ABSENT}\n",
        "backend.py": f"open({str(marker)!r}, 'w').close()\nraise SystemExit('built')\n",
    }
    with tarfile.open(wheels / f"{name.replace('-', '_')}-{ABSENT}.tar.gz", "w:gz") as tar:
        for rel, text in files.items():
            info = tarfile.TarInfo(f"{name.replace('-', '_')}-{ABSENT}/{rel}")
            info.size = len(text.encode())
            tar.addfile(info, io.BytesIO(text.encode()))


@pytest.fixture
def uv_dataset(tmp_path: Path) -> Path:
    """The folder the user works in, with its uv configuration; what of it runs leaves a file in
    tmp_path/markers."""
    folder, markers = tmp_path / "dataset", tmp_path / "markers"
    (folder / "wheels").mkdir(parents=True)
    markers.mkdir()
    (folder / "uv.toml").write_text(f'no-index = true\nfind-links = ["{folder / "wheels"}"]\n')
    for name in ("openhands-ai", "jupyter-kernel-gateway"):
        _sdist(folder / "wheels", name, markers / f"built-{name}")
    return folder


@pytest.fixture
def dataset(uv_dataset: Path) -> Path:
    """The same folder, with packages of the names the replayer's Python children import."""
    for name in PLANTED:
        (uv_dataset / name).mkdir()
        (uv_dataset / name / "__init__.py").write_text(
            f"open({str(uv_dataset.parent / 'markers' / name)!r}, 'w').close()\n"
        )
    return uv_dataset


def _ran(dataset: Path) -> list[str]:
    return sorted(p.name for p in (dataset.parent / "markers").iterdir())


def _replayer(dataset: Path, *args: str, cache: Path) -> subprocess.CompletedProcess[str]:
    """The replayer run from `dataset` (itself isolated, as its console script is: the attack is on what
    it starts)."""
    return subprocess.run(
        [sys.executable, "-I", "-m", "replayer.cli", *args],
        cwd=dataset,
        env={**os.environ, "REPLAYER_BUNDLES": str(cache)},
        capture_output=True,
        text=True,
    )


@pytest.mark.parametrize("packages", [False, True], ids=["uv-config", "and-packages"])
def test_a_bundle_install_takes_nothing_from_the_working_directory(
    uv_dataset: Path, tmp_path: Path, packages: bool, request: pytest.FixtureRequest
) -> None:
    """uv reads no configuration of the folder (its own index, its sdist's build backend), and the pip that
    installs uv and the `python -m venv` that makes uv's home import nothing from it: the version is looked
    for on PyPI, which lacks it."""
    dataset = request.getfixturevalue("dataset") if packages else uv_dataset
    proc = _replayer(dataset, "bundles", "add", f"openhands_v0@{ABSENT}", cache=tmp_path / "bundles")
    assert _ran(dataset) == []
    assert proc.returncode == 10 and "not in the PyPI registry" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not list((tmp_path / "bundles").glob(f"openhands_v0-{ABSENT}*"))


def test_a_cached_bundles_compile_imports_nothing_from_the_working_directory(
    dataset: Path, tmp_path: Path
) -> None:
    """A bundle an older replayer cached uncompiled, adopted: its own interpreter's `-m compileall`."""
    cache = tmp_path / "bundles"
    folder = cache / "openhands_v0-0.0.1"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    (folder / bundles.INSTALLED).write_text("openhands-ai==0.0.1\n")
    proc = _replayer(dataset, "bundles", "add", "openhands_v0@0.0.1", cache=cache)
    assert proc.returncode == 0, proc.stderr
    assert (folder / bundles.BYTECODE).is_file()
    assert _ran(dataset) == []


SCRIPTED = "2.1.121"
"""A Claude Code release whose `postinstall` (`node install.cjs`) hard-links its 247 MB native binary over
the package's `bin/claude.exe`, a 500-byte stub as published."""


def test_an_npm_install_runs_no_install_script(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The version is the trajectory's choice: nothing of the release runs on the host when it is installed,
    not even when the folder's `.npmrc` asks for scripts; the CLI is found in the platform package."""
    (dataset / ".npmrc").write_text("ignore-scripts=false\n")
    cache = bundle_cache(tmp_path / "bundles")
    proc = _replayer(dataset, "bundles", "add", f"claude_code@{SCRIPTED}", cache=cache)
    assert proc.returncode == 0, proc.stderr
    package = cache / f"claude_code-{SCRIPTED}" / "node_modules" / "@anthropic-ai"
    assert (package / "claude-code" / "bin" / "claude.exe").stat().st_size < 1000
    monkeypatch.setenv("REPLAYER_BUNDLES", str(cache))
    cli = bundles.cli_path("claude_code", SCRIPTED)
    assert (cli.path, cli.needs_node) == ("node_modules/@anthropic-ai/claude-code-linux-x64/claude", False)
    assert _ran(dataset) == []


def test_compares_runs_import_nothing_from_the_working_directory(
    dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run's process (`python -m replayer.pipeline.fork`), started ahead for a job whose replay is not
    there, runs the real module: it records the run as failed."""
    job = ForkJob(
        compare_id="c",
        trajectory=tmp_path / "t.jsonl",
        task=None,
        cwd=None,
        session=None,
        replay_dir=tmp_path / "replay",
        boundary_state=tmp_path / "state",
        run_dir=tmp_path / "runs" / "a-1",
        dir="runs/a-1",
        variant=Variant(name="a"),
        repeat=1,
        continuation=ContinueRequest(upstream=""),
        check=None,
        check_timeout_s=1.0,
        agent="claude_code",
        agent_version="2.1.197",
        after_step=1,
    )
    monkeypatch.chdir(dataset)
    pool = ForkPool([job], parallel=1)
    pool.start_ahead()
    proc = pool.waiting[0]
    assert proc.stdin is not None
    proc.stdin.close()
    assert proc.wait(timeout=120) == 0, (job.run_dir / "fork.log").read_text()
    assert _ran(dataset) == []
    record = RunRecord.model_validate_json((job.run_dir / "run.json").read_bytes())
    assert record.status == "failed" and record.variant == "a", record


def test_the_batch_pools_workers_import_nothing_from_the_working_directory(
    dataset: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A spawned worker starts as `python -c 'from multiprocessing.spawn import ...'`: isolated, it finds the
    real multiprocessing, then works in the batch's working directory (for its relative paths)."""
    monkeypatch.chdir(dataset)
    pool = executors._pool(1, ahead=False)
    try:
        assert pool.submit(os.getcwd).result(timeout=120) == str(dataset)
    finally:
        pool.shutdown(wait=True)
    assert _ran(dataset) == []


def test_ray_workers_import_nothing_from_the_working_directory(dataset: Path) -> None:
    """Ray puts the driver's working directory on every worker's path (a worker imported the folder's
    `replayer/`); the batch starts Ray from a folder of its own. The driver is a process of its own: Ray
    keeps a cluster's auth token for the life of the process that started it, which would refuse the next
    cluster a test of this worker connects to."""
    driver = (
        "import ray, replayer\n"
        "from replayer.floor import hostproc\n"
        "hostproc.start_ray(ray, num_cpus=1, include_dashboard=False, log_to_driver=False)\n"
        "try:\n"
        "    found = ray.get(ray.remote(lambda: __import__('replayer').__file__).remote(), timeout=300)\n"
        "finally:\n"
        "    ray.shutdown()\n"
        "print(found == replayer.__file__, found)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run(
        [sys.executable, "-I", "-c", driver],
        cwd=dataset,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[0] == "True", done.stdout
    assert _ran(dataset) == []


def test_a_host_process_runs_in_a_private_folder_with_only_the_named_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not the working directory, not the user's other variables (a key), not a program found through a
    relative PATH entry (`.` is the working directory)."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-secret")
    monkeypatch.setenv("PATH", f".:{os.environ['PATH']}")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "env").write_text("#!/bin/sh\ntouch MARK\n")
    (tmp_path / "env").chmod(0o755)
    done = hostproc.run(["env"], env={"NAMED": "1"}, capture_output=True, text=True, check=True)
    assert sorted(done.stdout.split()) == ["NAMED=1", f"PATH=/usr/bin:{hostproc.PATH}"]
    where = hostproc.run(["pwd"], capture_output=True, text=True, check=True).stdout.strip()
    assert where == str(hostproc.folder()) != str(tmp_path)
    assert hostproc.folder().stat().st_mode & 0o777 == 0o700 and not any(hostproc.folder().iterdir())
    assert not (tmp_path / "MARK").exists()


def test_the_folders_of_processes_gone_are_removed_by_the_next_one_made(tmp_path: Path) -> None:
    """A Ray actor killed at a batch's end never runs its exit: its folder stays until a process of the
    replayer makes its own. A live process's folder, a link and another name are left alone."""
    temp = Path(tempfile.gettempdir())
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    dead = int(gone.stdout)
    left = temp / f"{hostproc.FOLDER_PREFIX}{dead}-left"
    (left / "sub").mkdir(parents=True)
    (left / "sub" / "file").write_text("x")
    target = tmp_path / "target"
    target.mkdir()
    (target / "kept").write_text("x")
    link = temp / f"{hostproc.FOLDER_PREFIX}{dead}-link"
    link.symlink_to(target)
    alive = temp / f"{hostproc.FOLDER_PREFIX}{os.getpid()}-alive"
    alive.mkdir()
    # anyone names entries of /tmp: numbers no pid has, digits int() does not take
    odd = [temp / f"{hostproc.FOLDER_PREFIX}{n}-odd-{os.getpid()}" for n in ("9" * 30, "\u00b2")]
    for folder in odd:
        folder.mkdir()
    try:
        made = subprocess.run(
            [sys.executable, "-c", "from replayer.floor import hostproc; print(hostproc.folder())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert not left.exists()
        assert link.is_symlink() and (target / "kept").is_file() and alive.is_dir()
        assert all(folder.is_dir() for folder in odd)
        assert not Path(made).exists(), "its own is gone at its exit"
    finally:
        shutil.rmtree(left, ignore_errors=True)
        link.unlink(missing_ok=True)
        alive.rmdir()
        for folder in odd:
            folder.rmdir()
