"""A batch's outcomes: one a job, counted as they arrive, and DIR/batch.json, the summary written one
outcome at a time."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

import orjson
from pydantic import BaseModel, ConfigDict

from replayer.floor.io import write_bytes_atomic
from replayer.verbs.batch_jobs import Job
from replayer.verbs.batch_manifest import ManifestEntry, Mode

JobStatus = Literal["done", "skipped", "refused", "failed", "cut", "interrupted"]
"""`cut`: a continuation a token budget ended (the batch's, or its own), its result complete; `interrupted`:
a job the batch was stopped (Ctrl-C, SIGTERM) before it ended, run again by the next start."""


class JobOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid")
    key: str
    line: int
    trajectory: str
    boundary: int
    mode: Mode
    status: JobStatus
    error_kind: str | None = None
    error: str | None = None
    node: str | None = None
    """The Ray node that ran the job (its node id); None in the local pool and for a skipped job."""


class BatchCounts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    jobs: int
    done: int
    skipped: int
    refused: dict[str, int]
    """Refused jobs by reason (the error text without job-specific numbers)."""
    failed: int
    cut: int = 0
    """Continuations a token budget ended (`--max-tokens`: the batch's, or a line's own)."""
    interrupted: int = 0
    """Jobs in flight or not started when the batch was stopped."""


class BatchSummary(BatchCounts):
    """DIR/batch.json (written by `Tally.write`, one outcome at a time)."""

    outcomes: list[JobOutcome]


def outcome_of(
    job: Job, status: JobStatus, kind: str | None = None, error: str | None = None, node: str | None = None
) -> JobOutcome:
    return JobOutcome(
        key=job.key,
        line=job.line,
        trajectory=str(job.entry.shown),
        boundary=job.boundary,
        mode=job.mode,
        status=status,
        error_kind=kind,
        error=error,
        node=node,
    )


class Tally:
    """The outcomes of a run as they arrive, counted. A done or skipped job is kept as a small tuple (its
    trajectory and mode are its manifest line's), a refused or failed one with its outcome: a batch of a
    million jobs does not hold a million outcome models, and batch.json is written one outcome at a time."""

    def __init__(self, entries: list[tuple[int, ManifestEntry]]) -> None:
        self.entries = dict(entries)
        self.rows: list[tuple[int, int, str, JobStatus, str | None, JobOutcome | None]] = []
        self.counts = BatchCounts(jobs=0, done=0, skipped=0, refused={}, failed=0)

    def add(self, o: JobOutcome) -> None:
        plain = o.status in ("done", "skipped") and o.error_kind is None and o.error is None
        self.rows.append((o.line, o.boundary, o.key, o.status, o.node, None if plain else o))
        c = self.counts
        c.jobs += 1
        if o.status == "refused":
            reason = _reason(o.error or "")
            c.refused[reason] = c.refused.get(reason, 0) + 1
        else:
            setattr(c, o.status, getattr(c, o.status) + 1)

    def __len__(self) -> int:
        return len(self.rows)

    def outcomes(self) -> Iterator[JobOutcome]:
        """Sorted by manifest line, boundary and key."""
        self.rows.sort(key=lambda row: row[:3])
        for line, boundary, key, status, node, outcome in self.rows:
            if outcome is None:
                entry = self.entries[line]
                outcome = JobOutcome(
                    key=key,
                    line=line,
                    trajectory=str(entry.shown),
                    boundary=boundary,
                    mode=entry.mode,
                    status=status,
                    node=node,
                )
            yield outcome

    def write(self, path: Path) -> None:
        """DIR/batch.json: the bytes of `orjson.dumps(BatchSummary, OPT_INDENT_2)`, written atomically."""
        write_bytes_atomic(path, self._chunks())

    def _chunks(self) -> Iterator[bytes]:
        head = orjson.dumps({**self.counts.model_dump(), "outcomes": []}, option=orjson.OPT_INDENT_2)
        if not self.rows:
            yield head
            return
        yield head.removesuffix(b"[]\n}") + b"[\n"
        for n, outcome in enumerate(self.outcomes()):
            body = orjson.dumps(outcome.model_dump(mode="json"), option=orjson.OPT_INDENT_2)
            yield (b",\n    " if n else b"    ") + body.replace(b"\n", b"\n    ")
        yield b"\n  ]\n}"


def _reason(error: str) -> str:
    """The refusal without its job-specific details (numbers, call ids), so that reasons group."""
    text = re.sub(r"\b(steps?|boundary|call|line) [\w.-]+", r"\1 N", error.split(";")[0])
    return re.sub(r"\(\d+(; last complete: \d+)?\)", "(N)", text)
