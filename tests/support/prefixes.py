"""Every boundary's prefix of a recorded file, prepared once for all the tests of a worker that ask for it:
`replayer prepare FILE -n all` (one parse), whose OUT/after-K/ is what `prepare -n K` writes alone
(tests/replayer/pipeline/test_prepare_many.py). The prefix matrices read it; never write in it.
Likewise a recording's reruns at several boundaries: one `replayer run FILE -n a,b` (one replay), whose
OUT/after-K/ is what `run -n K` writes alone (tests/replayer/pipeline/test_fanout.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import replayer

_MADE: dict[tuple[str, ...], Path] = {}


def prepared(factory: pytest.TempPathFactory, source: Path, after_step: int, *extra: str) -> Path:
    """The directory `replayer prepare SOURCE -n AFTER_STEP EXTRA...` writes."""
    key = (str(source), *extra)
    if key not in _MADE:
        out = factory.mktemp("prepared") / "out"
        replayer("prepare", str(source), "-n", "all", "-o", str(out), *extra, check=True)
        _MADE[key] = out
    return _MADE[key] / f"after-{after_step}"


def replayed(
    factory: pytest.TempPathFactory, source: Path, boundaries: list[int], after_step: int, *extra: str
) -> Path:
    """The directory `replayer run SOURCE -n AFTER_STEP EXTRA...` writes, of one `run -n BOUNDARIES` made once
    for all the tests that ask (AFTER_STEP one of BOUNDARIES)."""
    key = (str(source), ",".join(map(str, boundaries)), *extra)
    if key not in _MADE:
        out = factory.mktemp("replayed") / "out"
        replayer("run", str(source), "-n", key[1], "-o", str(out), "--json", *extra, check=True)
        _MADE[key] = out
    return _MADE[key] / f"after-{after_step}" if len(boundaries) > 1 else _MADE[key]
