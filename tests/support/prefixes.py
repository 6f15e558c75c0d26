"""Every boundary's prefix of a recorded file, prepared once for all the tests of a worker that ask for it:
`replayer prepare FILE -n all` (one parse), whose OUT/after-K/ is what `prepare -n K` writes alone
(tests/replayer/pipeline/test_prepare_many.py). The prefix matrices read it; never write in it."""

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
