"""The batch of every recorded source (every valid boundary of each agent's recordings that `prepare` reads),
which tests/replayer/verbs/test_batch.py and test_export.py both read: made once for the whole test run."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replayer.pipeline.engine import load
from replayer.verbs.boundaries import valid_boundaries
from tests.conftest import CLAUDE, CODEX, MINI, OPENCODE, PI, made_once, replayer

SOURCES = (
    [CLAUDE.fixture(n) / "session.jsonl" for n in CLAUDE.scenarios]
    + [CODEX.fixture(n) / "rollout.jsonl" for n in CODEX.scenarios]
    + [MINI.fixture(n) / "trajectory.traj.json" for n in MINI.scenarios]
    + [OPENCODE.fixture(n) / "export.json" for n in OPENCODE.scenarios]
    + [PI.fixture(n) / "session.jsonl" for n in PI.scenarios]
)


CHEAP_SOURCES = [p for p in SOURCES if not p.is_relative_to(OPENCODE.fixture(""))]
"""The sources whose `prepare` runs no agent CLI (OpenCode's imports each boundary's session with its CLI on
the host, ~3 CPU-s a job): the runs that test a batch's mechanics, not an agent, read these."""


def manifest(tmp_path: Path, lines: list[dict]) -> Path:
    path = tmp_path / "manifest.jsonl"
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    return path


def all_sources(tmp_path: Path, sources: list[Path] = SOURCES) -> tuple[Path, int]:
    """A manifest of every source (or of `sources`), every valid boundary; its number of jobs."""
    lines = [{"trajectory": str(p)} for p in sources]
    expected = sum(len(valid_boundaries(load(p)[1])) for p in sources)
    return manifest(tmp_path, lines), expected


def _batch(folder: Path) -> None:
    listed, _ = all_sources(folder)
    proc = replayer("batch", "--trust-manifest", str(listed), "-o", str(folder / "out"), "-j", "2", "--json")
    assert proc.returncode == 0, proc.stderr
    (folder / "summary.json").write_text(proc.stdout)


CAPTURED = ("mini_swe_agent@1.15.0", "mini_swe_agent@1.17.5")
"""The recorded versions whose tool definitions the export captures by running their CLI (mini-swe-agent 1.x
sends none: test_export checks the finding is kept): installed first, so that what the export finds does not
depend on whether another module installed them already."""


def _export(folder: Path, batch: Path) -> None:
    replayer("bundles", "add", *CAPTURED, check=True)
    replayer("export", str(batch), "--format", "chat", "-o", str(folder / "records.jsonl"), check=True)


def every_source_batch(factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    """One uninterrupted local batch of every source (`-j 2`): its output folder (read it, never write in it)
    and its `--json` summary."""
    folder = made_once(factory, "every-source-batch", _batch)
    return folder / "out", orjson.loads((folder / "summary.json").read_bytes())


def every_source_records(factory: pytest.TempPathFactory) -> Path:
    """That batch exported (`export --format chat`, the default format): the records file (read-only)."""
    out, _ = every_source_batch(factory)
    return made_once(factory, "every-source-records", lambda folder: _export(folder, out)) / "records.jsonl"
