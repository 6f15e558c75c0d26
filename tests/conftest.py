from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson
import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "claude_code"
SCENARIOS = sorted(p.name for p in FIXTURES.iterdir() if (p / "session.jsonl").exists())
# No verdict of `replayer verify` (the user's or the shipped ones) counts in the suite unless a test says
# so: which versions are verified is then the pins alone, as the tests expect.
os.environ["REPLAYER_VERDICTS"] = tempfile.mkdtemp(prefix="replayer-test-verdicts-")
# Repositories a test checks out (`--workspace git+URL@REV`) go to a cache of the suite's own.
os.environ["REPLAYER_WORKSPACES"] = tempfile.mkdtemp(prefix="replayer-test-workspaces-")
# The user's own settings (~/.config/replayer/config.toml) never reach the suite; a test writes its own.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="replayer-test-config-")
for _name in ("UPSTREAM", "UPSTREAM_KEY_ENV", "IMAGE", "LIMITS", "WORKERS"):  # the bundle cache stays
    os.environ.pop(f"REPLAYER_{_name}", None)


def fixture_dir(name: str) -> Path:
    return FIXTURES / name


def main_requests(name: str) -> list[dict]:
    lines = (fixture_dir(name) / "upstream.jsonl").read_bytes().splitlines()
    return [r for r in map(orjson.loads, lines) if r["main_thread"]]


def replayer(
    *args: str, env: dict[str, str] | None = None, check: bool = False
) -> subprocess.CompletedProcess[str]:
    """The real console entry point, as a user runs it."""
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "replayer.cli", *args], capture_output=True, text=True, env=full_env, cwd=ROOT
    )
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


@pytest.fixture(scope="session")
def docker_client():
    from sandboxes.docker import connect

    return connect()


MINI_FIXTURES = ROOT / "tests" / "fixtures" / "mini_swe_agent"
MINI_SCENARIOS = sorted(p.name for p in MINI_FIXTURES.iterdir() if (p / "trajectory.traj.json").exists())


def mini_fixture(name: str) -> Path:
    return MINI_FIXTURES / name


def mini_requests(name: str) -> list[dict]:
    """The chat-completions requests the real mini-swe-agent sent while it was recorded, in order."""
    lines = (mini_fixture(name) / "upstream.jsonl").read_bytes().splitlines()
    return [r for r in map(orjson.loads, lines) if r["main_thread"]]


CODEX_FIXTURES = ROOT / "tests" / "fixtures" / "codex"
CODEX_SCENARIOS = sorted(p.name for p in CODEX_FIXTURES.iterdir() if (p / "rollout.jsonl").exists())


def codex_fixture(name: str) -> Path:
    return CODEX_FIXTURES / name


def codex_requests(name: str) -> list[dict]:
    """The Responses requests the real Codex CLI sent while it was recorded, in order."""
    lines = (codex_fixture(name) / "upstream.jsonl").read_bytes().splitlines()
    return [r for r in map(orjson.loads, lines) if r["main_thread"]]


OPENCODE_FIXTURES = ROOT / "tests" / "fixtures" / "opencode"
OPENCODE_SCENARIOS = sorted(p.name for p in OPENCODE_FIXTURES.iterdir() if (p / "export.json").exists())
OPENCODE_FORMS = {"export": "export.json", "events": "events.jsonl", "sqlite": "opencode.db"}


def opencode_fixture(name: str) -> Path:
    return OPENCODE_FIXTURES / name


def opencode_requests(name: str) -> list[dict]:
    """The main requests the CLI sent while recording, in order (the title side call left out)."""
    log = [
        orjson.loads(line) for line in (opencode_fixture(name) / "upstream.jsonl").read_bytes().splitlines()
    ]
    return [r for r in log if r["main_thread"]]


PI_FIXTURES = ROOT / "tests" / "fixtures" / "pi"
PI_SCENARIOS = sorted(p.name for p in PI_FIXTURES.iterdir() if (p / "session.jsonl").exists())


def pi_fixture(name: str) -> Path:
    return PI_FIXTURES / name


def pi_requests(name: str) -> list[dict]:
    """The chat-completions requests the real Pi sent while recording, in order."""
    log = [orjson.loads(line) for line in (pi_fixture(name) / "upstream.jsonl").read_bytes().splitlines()]
    return [r for r in log if r["main_thread"]]
