from __future__ import annotations

import atexit
import contextlib
import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support import forkserver

ROOT = Path(__file__).resolve().parent.parent


def _suite_dir(prefix: str) -> str:
    """A directory of this process's own, removed when it exits."""
    path = tempfile.mkdtemp(prefix=prefix)
    atexit.register(shutil.rmtree, path, True)
    return path


# No verdict of `replayer verify` (the user's or the shipped ones) counts in the suite unless a test says
# so: which versions are verified is then the pins alone, as the tests expect.
os.environ["REPLAYER_VERDICTS"] = _suite_dir("replayer-test-verdicts-")
# Repositories a test checks out (`--workspace git+URL@REV`) go to a cache of the suite's own.
os.environ["REPLAYER_WORKSPACES"] = _suite_dir("replayer-test-workspaces-")
# The user's own settings (~/.config/replayer/config.toml) never reach the suite; a test writes its own.
os.environ["XDG_CONFIG_HOME"] = _suite_dir("replayer-test-config-")
for _name in ("UPSTREAM", "UPSTREAM_KEY_ENV", "IMAGE", "LIMITS", "WORKERS"):  # the bundle cache stays
    os.environ.pop(f"REPLAYER_{_name}", None)
# The project's bytecode goes to a cache of the suite's own, out of the source tree: under
# PYTHONDONTWRITEBYTECODE (which a sandboxed shell may set) every `replayer` a test starts compiled its 160
# modules again, a quarter of its start.
if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) and "PYTHONPYCACHEPREFIX" not in os.environ:
    os.environ["PYTHONPYCACHEPREFIX"] = _suite_dir("replayer-test-bytecode-")


@dataclass(frozen=True)
class AgentFixtures:
    """An agent's recordings: each scenario a folder of tests/fixtures/<folder> holding `marker` (the native
    file) and upstream.jsonl (every request the real CLI sent while it was recorded, in order)."""

    folder: str
    marker: str

    @property
    def root(self) -> Path:
        return ROOT / "tests" / "fixtures" / self.folder

    @property
    def scenarios(self) -> list[str]:
        return sorted(p.name for p in self.root.iterdir() if (p / self.marker).exists())

    def fixture(self, name: str) -> Path:
        return self.root / name

    def requests(self, name: str) -> list[dict]:
        """The requests of the agent's main thread (side calls such as a title left out), in order."""
        lines = (self.fixture(name) / "upstream.jsonl").read_bytes().splitlines()
        return [r for r in map(orjson.loads, lines) if r["main_thread"]]


CLAUDE = AgentFixtures("claude_code", "session.jsonl")
CODEX = AgentFixtures("codex", "rollout.jsonl")
MINI = AgentFixtures("mini_swe_agent", "trajectory.traj.json")
OPENCODE = AgentFixtures("opencode", "export.json")
PI = AgentFixtures("pi", "session.jsonl")
GEMINI = AgentFixtures("gemini_cli", "session.jsonl")
OPENHANDS = AgentFixtures("openhands", "conversation")
OPENHANDS_V0 = AgentFixtures("openhands", "trajectory.json")
OPENCODE_FORMS = {"export": "export.json", "events": "events.jsonl", "sqlite": "opencode.db"}


def replayer_argv(*args: str) -> list[str]:
    """The argv of the real console entry point (for a test that starts it and signals it)."""
    return [sys.executable, "-m", "replayer.cli", *args]


_FORKS = forkserver.Client(ROOT, Path(_suite_dir("replayer-test-forks-")))


def replayer(
    *args: str, env: dict[str, str] | None = None, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """The real console entry point, as a user runs it: a process of its own, forked from an interpreter
    that has imported the libraries (tests/support/forkserver.py; REPLAYER_TEST_EXEC=1: a fresh one)."""
    full_env = {**os.environ, **(env or {})}
    if os.environ.get("REPLAYER_TEST_EXEC"):
        proc = subprocess.run(replayer_argv(*args), capture_output=True, text=True, env=full_env, cwd=ROOT)
    else:
        proc = _FORKS.run(args, full_env)
    if check and proc.returncode != 0:
        raise AssertionError(f"replayer {' '.join(args)} exited {proc.returncode}: {proc.stderr}")
    return proc


def first_and_last(boundaries: list[tuple[str, int]], every: tuple[str, ...] = ()) -> list[tuple[str, int]]:
    """A run-in-a-container matrix: each scenario's boundaries 1 and last (a rerun to the last boundary
    reruns every call of the scenario), every boundary of the scenarios in `every`. The prefix at every
    boundary of every scenario is checked without Docker, by the prepare tests."""
    last: dict[str, int] = {}
    for name, n in boundaries:
        last[name] = max(n, last.get(name, 0))
    return [(name, n) for name, n in boundaries if name in every or n in (min(1, last[name]), last[name])]


def made_once(factory: pytest.TempPathFactory, name: str, make: Callable[[Path], None]) -> Path:
    """A folder `make` fills once per test run, for every module that asks (the parallel run's workers share
    it: the first makes it under a lock while the others wait for it). Read it, never write in it."""
    base = factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):  # each worker's is a folder of the run's own, which they share
        base = base.parent
    folder, made = base / name, base / f"{name}.made"
    with (base / f"{name}.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir()
            make(folder)
            made.touch()
    return folder


def importing(param: str) -> Any:
    """A test parameter naming an OpenCode trajectory, marked `docker`: its rebuild imports the session with
    the CLI in a sandbox (adapters/opencode/cli_box.py). Any other, as it is."""
    return pytest.param(param, marks=pytest.mark.docker) if "opencode" in param else param


def bundle_cache(folder: Path) -> Path:
    """An empty bundle cache of a test's own (every install into it a real one, from the registry) whose npm
    downloads are the suite's: npm's cache, content-addressed and safe to share, holds the tarballs the
    prefetch fetched, so that an install into it unpacks rather than downloads them again."""
    from replayer.floor.pins import bundles_root

    shared = bundles_root() / ".npm-cache"
    shared.mkdir(parents=True, exist_ok=True)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".npm-cache").symlink_to(shared)
    return folder


QUICK_INSTALL = "codex@0.142.5"
"""A version whose install into a `bundle_cache` takes seconds, for the tests of installing itself: one native
binary, its packages in the suite's npm cache (a test runs that version). Pi 0.70.0's dependencies took 13 s
and 12 CPU-s each time, this 3.6."""


@pytest.fixture(autouse=True)
def _environment_kept():
    """A test that sets a variable in this process (an in-process run's upstream key) leaves the next tests
    of its worker the environment they started with: a key left behind let a later refusal test run on."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="session")
def docker_client():
    from replayer.sandboxes.docker import connect

    return connect()


def pytest_sessionstart(session: pytest.Session) -> None:
    """What `replayer setup` (`make test` runs it first) does for bundles an earlier replayer installed
    without a digest manifest: record their digests (refused for a bundle with someone else's files), so
    that the suite runs on a machine set up before manifests as on a bare one."""
    from replayer import installer
    from replayer.floor import bundles, bundletrust

    for agent, version in bundles.installed_specs():
        path = bundles.bundle_dir(agent, version)
        if not bundletrust.has_manifest(path) and os.access(path, os.W_OK):
            with contextlib.suppress(bundles.BundleUnavailable):  # a test using it says why, exit 10
                installer.ensure(agent, version, adopt=True)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A module that needs the engine says so (`pytestmark = pytest.mark.docker`, with `agent` when it runs a
    pinned agent CLI); the agent CLIs run in the sandbox, so `agent` implies `docker`, and so does asking for
    the engine's client. `pytest -m "not docker"` is then the part that runs without an engine."""
    for item in items:
        if item.get_closest_marker("agent") or "docker_client" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.docker)
    longest_modules_first(items)


MODULE_SECONDS = ROOT / "tests" / "module_seconds.json"
"""Seconds each module took in a whole run (`python -m tests.support.module_seconds LOG` writes it from the
`--durations=0` output `make test` prints). Only an order: a module not in it counts as short."""


def longest_modules_first(items: list[pytest.Item]) -> None:
    """The parallel run hands out whole modules (`--dist loadfile`) in collection order: the longest go
    first, so that the run does not end with one worker on a long module while the other idles."""
    seconds = orjson.loads(MODULE_SECONDS.read_bytes()) if MODULE_SECONDS.exists() else {}
    items.sort(key=lambda item: -seconds.get(item.nodeid.partition("::")[0], 0.0))
