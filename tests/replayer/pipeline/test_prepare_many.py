"""`prepare -n all` (and `3,7`, ranges, samples): one parse, each boundary's directory OUT/after-K/ as
`prepare -n K` writes it alone, byte for byte but for where it is and how long it took. Checked for an
agent whose rebuild is in Python (Claude Code) and one whose rebuild runs its CLI on the host (OpenCode's
`import`, whose database stamps rows with the time of the import); the prefix matrices of the agents'
tests read `-n all`'s directories (tests/support/prefixes.py)."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

import orjson
import pytest

from replayer.floor.results import ReplayResult
from tests.conftest import CLAUDE, OPENCODE, importing, replayer

SOURCES = {  # the file, and the boundaries asked (each OpenCode boundary runs its `import`)
    "claude_code": (CLAUDE.fixture("parallel") / "session.jsonl", "all"),
    "opencode": (OPENCODE.fixture("tools") / "export.json", "0,2-3"),
}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _result(data: bytes) -> dict:
    result = orjson.loads(data)
    del result["timings"], result["request"]["out"]
    return result


def _rows(path: Path, since_ms: int, until_ms: int) -> list[str]:
    """The database's rows, the times of this test's own imports masked."""
    with sqlite3.connect(path) as db:
        lines = list(db.iterdump())
    now = lambda m: "NOW" if since_ms <= int(m.group()) <= until_ms else m.group()  # noqa: E731
    return [re.sub(r"\b\d{13}\b", now, line) for line in lines]


@pytest.mark.parametrize("agent", [importing(a) for a in sorted(SOURCES)])
def test_every_boundary_from_one_parse_is_what_a_prepare_of_it_alone_writes(
    agent: str, tmp_path: Path
) -> None:
    (path, spec), since_ms = SOURCES[agent], int(time.time() * 1000)
    many = tmp_path / "many"
    proc = replayer("prepare", str(path), "-n", spec, "-o", str(many), "--json")
    assert proc.returncode == 0, proc.stderr
    shown = orjson.loads(proc.stdout)["boundaries"]
    asked = [0, 2, 3] if spec != "all" else list(range(len(shown)))
    assert len(shown) >= 3 and sorted(map(int, shown)) == asked
    assert sorted(p.name for p in many.iterdir()) == sorted(f"after-{k}" for k in shown)
    assert all(
        shown[k]["out"] == str(many / f"after-{k}") and shown[k]["after_step"] == int(k) for k in shown
    )
    for k in (min(shown, key=int), max(shown, key=int)):  # each boundary's own prefix: the matrices
        alone = tmp_path / f"alone-{k}"
        replayer("prepare", str(path), "-n", k, "-o", str(alone), check=True)
        until_ms = int(time.time() * 1000)
        made, expected = _files(many / f"after-{k}"), _files(alone)
        assert made.keys() == expected.keys(), k
        for name, data in expected.items():
            if name == "result.json":
                assert _result(made[name]) == _result(data), k
            elif name.endswith(".db"):
                rows = _rows(many / f"after-{k}" / name, since_ms, until_ms)
                assert rows == _rows(alone / name, since_ms, until_ms), f"after-{k}/{name}"
            else:
                assert made[name] == data, f"after-{k}/{name}"


def test_the_boundaries_are_written_within_one_output_total(tmp_path: Path) -> None:
    """A file's prefixes grow with every boundary (K of them, each up to the whole session): `prepare` at
    several boundaries writes them within the output total a run's boundaries share (`--limits output=`
    of `run`); once it is used up, the boundaries after are refused, not written, and said so."""
    from replayer.floor.limits import SandboxLimits
    from replayer.floor.output_budget import OverBudget
    from replayer.floor.requests import ReplayRequest
    from replayer.pipeline.engine import prepare_many

    path = CLAUDE.fixture("parallel") / "session.jsonl"
    outs = {k: tmp_path / "out" / f"after-{k}" for k in range(3)}
    alone = prepare_many(
        ReplayRequest(mode="prepare", trajectory=path, after_step=2, out=tmp_path / "o"), outs
    )
    sizes = [sum(f.stat().st_size for f in outs[k].rglob("*") if f.is_file()) for k in range(3)]
    assert all(isinstance(r, ReplayResult) for r in alone.values())
    limits = SandboxLimits(output_bytes=sizes[0] + sizes[1] // 2)  # the first boundary fits, not the second
    bounded = {k: tmp_path / "bounded" / f"after-{k}" for k in range(3)}
    request = ReplayRequest(mode="prepare", trajectory=path, after_step=2, out=tmp_path / "b", limits=limits)
    outcomes = prepare_many(request, bounded)
    assert isinstance(outcomes[0], ReplayResult)
    assert all(isinstance(outcomes[k], OverBudget) for k in (1, 2)), outcomes
    assert sorted(p.name for p in (tmp_path / "bounded").iterdir()) == ["after-0"]
