"""`replayer batch`: every job of a manifest into DIR, resumable, on a local process pool or Ray; the counts
into DIR/batch.json. The parts: the manifest (batch_manifest.py), the jobs (batch_jobs.py), DIR (batch_dir.py),
running them (batch.py, executors.py), the tally (batch_tally.py)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from replayer.floor import settings as user_settings
from replayer.floor.errors import BadInput
from replayer.floor.events import JobEnded, OnEvent, Stage, ignore
from replayer.verbs import batch_output
from replayer.verbs.batch import groups, interrupted, pending, start_token_budget
from replayer.verbs.batch_dir import batch_labels, clean_partials, locked, prepare_dir, remove_left
from replayer.verbs.batch_jobs import expand, image_ids
from replayer.verbs.batch_manifest import read_manifest
from replayer.verbs.batch_tally import BatchCounts, JobOutcome, Tally
from replayer.verbs.executors import run_local, run_ray

logger = logging.getLogger(__name__)


def run_batch(
    manifest: Path,
    out: Path,
    *,
    workers: int | None = None,
    ray: str | None = None,
    retry_failed: bool = False,
    trust_manifest: bool = False,
    on_event: OnEvent = ignore,
    containers_ahead: bool = True,
    max_output: int | None = None,
    max_tokens: int | None = None,
) -> BatchCounts:
    """`replayer.api.batch` (its docstring says what each argument does)."""
    found = user_settings.load()  # a bad or untrusted settings file refuses a batch before anything starts
    if workers is not None and workers < 1:
        raise BadInput(f"workers: at least 1 (got {workers})")
    if max_tokens is not None and max_tokens < 1:
        raise BadInput(f"max_tokens: at least 1 (got {max_tokens})")
    max_tokens = max_tokens or found.max_tokens  # the max_tokens setting, REPLAYER_MAX_TOKENS
    entries = read_manifest(Path(manifest), trusted=trust_manifest)
    images = {e.image for _, e in entries if e.mode != "prepare"}  # None: the default image
    jobs = expand(entries, image_ids(images))
    containers = any(e.mode != "prepare" for _, e in entries)  # prepare-only batches need no Docker
    prepare_dir(out)
    tally = Tally(entries)
    with locked(out):
        if containers:  # those of a dead run on this DIR (its workers died with it; none of ours runs now)
            left = remove_left(out)
            if left:
                logger.warning("removed %d container(s) and snapshot image(s) a killed batch left", len(left))
        clean_partials(out)
        batch_output.start(out, max_output or found.sandbox_limits().output_total())
        released = start_token_budget(out, max_tokens)
        if released:
            logger.warning("released %d token(s) of the lines' budgets a killed batch had reserved", released)
        todo = pending(jobs, out, retry_failed, tally)
        workers = workers or found.workers or os.cpu_count() or 1
        labels = batch_labels(out)
        logger.debug("batch: %d job(s), %d to run, %d worker(s)", len(jobs), len(todo), workers)
        on_event(Stage("runs", len(todo)))
        ran = 0

        def on_done(outcome: JobOutcome) -> None:
            nonlocal ran
            tally.add(outcome)
            ran += 1
            on_event(JobEnded(outcome.key, outcome.status, ran, len(todo)))

        try:
            units = groups(todo)  # the boundaries of one trajectory: one replay
            if ray:
                run_ray(units, out.absolute(), ray, workers, on_done, labels, containers_ahead)
            else:
                run_local(units, out.absolute(), workers, on_done, labels, containers_ahead)
        except BaseException:  # Ctrl-C, SIGTERM: the executors ended the workers and removed their containers
            interrupted(todo, tally, out, containers)
            raise
        finally:
            tally.write(out / "batch.json")
        if containers:  # those of jobs whose worker died mid-job
            remove_left(out)
    return tally.counts
