"""`--repeat R` (run, verify): the same prefix rerun R times, each in a fresh container, and the rate at which
the reruns reproduce the recorded observations (replayer/floor/determinism.py).

The first repeat is the run the user asked for (its result directory stays as it is); the others rerun
the prefix only (no continuation) into folders that are removed once their reruns are read.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path

import orjson
from pydantic import TypeAdapter

from replayer.floor.determinism import DETERMINISM, Determinism, determinism
from replayer.floor.errors import BadInput
from replayer.floor.events import OnEvent, ignore
from replayer.floor.io import write_bytes_atomic
from replayer.floor.requests import ReplayRequest
from replayer.floor.results import RerunRecord

_RECORDS = TypeAdapter(list[RerunRecord])
MAX_REPEATS = 100


def check_repeats(repeats: int) -> None:
    if not 1 <= repeats <= MAX_REPEATS:
        raise BadInput(f"--repeat takes 1 to {MAX_REPEATS} runs, not {repeats}")


def reruns_of(out: Path) -> list[RerunRecord]:
    """A result directory's reruns (the replayer's own reruns.json)."""
    from replayer.pipeline.steps import RERUNS

    return _RECORDS.validate_json((out / RERUNS).read_bytes())


def repeated(
    request: ReplayRequest,
    first: Sequence[RerunRecord],
    repeats: int,
    work: Path | None = None,
    on_event: OnEvent = ignore,
) -> Determinism:
    """Rerun `request`'s prefix `repeats - 1` more times, each in a fresh container, and rate the reruns
    together with the first run's (`first`)."""
    from replayer.pipeline.engine import execute

    check_repeats(repeats)
    runs = [list(first)]
    for _ in range(repeats - 1):
        with tempfile.TemporaryDirectory(prefix="replayer-repeat-", dir=work) as tmp:
            again = request.model_copy(
                update={"mode": "run", "out": Path(tmp) / "out", "continuation": None, "force": False}
            )
            execute(again, on_event=on_event)
            runs.append(reruns_of(again.out))
    return determinism(runs)


def write_determinism(out: Path, found: Determinism) -> Path:
    path = out / DETERMINISM
    write_bytes_atomic(path, orjson.dumps(found.model_dump(mode="json"), option=orjson.OPT_INDENT_2) + b"\n")
    return path
