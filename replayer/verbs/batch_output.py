"""A batch's total output budget: every job of one `replayer batch` writes within one total (`--max-output`,
else the `[limits] output` setting, else 4 times `disk`), kept in DIR/.output-total, which the batch writes
anew at each start and its workers draw on (replayer/floor/output_budget.py, `SharedTotal`).

A replay's boundaries draw on it before each file is written (replayer/pipeline/boundary_outputs.py); a job
run alone is charged what it wrote when it ends. A unit of jobs that finds the total used up is not run:
each of its jobs fails with kind `output` and the line that says so (`--retry-failed` runs it later)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from replayer.floor.output_budget import OverBudget, SharedTotal, tree_bytes
from replayer.pipeline.boundary_outputs import BATCH_TOTAL

FILE = ".output-total"


def start(out: Path, total: int) -> None:
    SharedTotal.create(out / FILE, total)


def _total(out: Path) -> SharedTotal | None:
    """None where the batch directory holds none (a Ray node that does not see it)."""
    path = out / FILE
    return SharedTotal(path) if path.is_file() else None


def refusal(out: Path) -> OverBudget | None:
    """Why a unit of jobs may not start: the batch's total is used up."""
    total = _total(out)
    if total is None or total.left() > 0:
        return None
    return OverBudget(
        "the batch's outputs reached its total output budget; the jobs not started are not run "
        "(see replayer batch --max-output)"
    )


def charge(out: Path, written: Path) -> None:
    """Charge to the batch's total what a job wrote to `written` (its directory) without drawing on it."""
    total = _total(out)
    if total is not None and written.is_dir():
        total.draw(tree_bytes(written), force=True)


@contextlib.contextmanager
def drawing(out: Path) -> Iterator[None]:
    """The replays run in the block draw on the batch's total."""
    token = BATCH_TOTAL.set(_total(out))
    try:
        yield
    finally:
        BATCH_TOTAL.reset(token)
