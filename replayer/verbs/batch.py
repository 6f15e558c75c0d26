"""`replayer batch`'s jobs run: each by the ordinary engine into its own result directory (the replay and
continue jobs of one trajectory and options as one replay), whatever it raises kept as its outcome; the
jobs still to run, the batch's token budget, and a stopped batch's jobs counted. The manifest
(batch_manifest.py), the jobs and their keys (batch_jobs.py), DIR (batch_dir.py) and the tally
(batch_tally.py) are apart; the executors (executors.py) run the units this module gives them.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import orjson
from pydantic import ValidationError

from replayer.floor import signals
from replayer.floor.errors import BadInput, Interrupted, ReplayError, excerpt
from replayer.floor.foreign import Folder
from replayer.floor.io import write_bytes_atomic
from replayer.floor.results import ReplayResult
from replayer.floor.trajectory import Trajectory
from replayer.verbs import batch_output, containers_ahead
from replayer.verbs.batch_dir import clean_partials, job_dir, outcome_path, remove_left
from replayer.verbs.batch_jobs import LINE_LEDGERS, TOKEN_LEDGER, Job
from replayer.verbs.batch_manifest import check_trajectory
from replayer.verbs.batch_tally import JobOutcome, JobStatus, Tally, outcome_of

REFUSALS = ("bad_input", "plan_refused", "confinement", "workspace", "cassette")
"""Error kinds that are refusals (the input asks for something impossible), not failures."""
CRASH = "crash"
"""The error kind of a job that raised something unexpected (a bug, not a refusal of its input)."""


_PARSED: dict[tuple[str, int, int, str | None, str | None, str | None], tuple[Any, Trajectory]] = {}
"""This process's last parses: the jobs of one trajectory that land in one worker share its parse."""
_PARSED_MAX = 2


def _parsed(path: Path, task: str | None, cwd: str | None, session: str | None) -> tuple[Any, Trajectory]:
    from replayer.pipeline.engine import load

    st = check_trajectory(path)  # replaced by a FIFO since the expansion: a refusal, not a hang
    key = (str(path), st.st_size, st.st_mtime_ns, task, cwd, session)
    if key not in _PARSED:
        while len(_PARSED) >= _PARSED_MAX:
            _PARSED.pop(next(iter(_PARSED)))
        _PARSED[key] = load(path, task, cwd, session)
    return _PARSED[key]


def run_job(job: Job, out: Path, labels: dict[str, str], node: str | None = None) -> JobOutcome:
    """One job with the ordinary engine (in a worker process or a Ray task on `node`); `labels` go on its
    container. The image the job was keyed with is made present first (`replayer.provision`).

    Whatever the job raises is its outcome, never the batch's end: a ReplayError is a refusal or a failure of
    its kind, anything else (a bug the job's input hit) a failure of kind `crash` with a one-line reason."""
    from replayer.floor.pins import load_pins
    from replayer.pipeline.continue_run import continuation_error
    from replayer.pipeline.engine import execute
    from replayer.pipeline.provision import ensure_image

    directory = job_dir(out, job.key)
    try:
        if job.image_id is not None:
            ensure_image(job.entry.image or load_pins().base_image.tag, job.image_id, out)
        adapter, traj = _parsed(job.trajectory, job.entry.task, job.entry.cwd, job.entry.session)
        # a retried job that failed after writing its directory (its continuation) replaces it
        again = outcome_path(out, job.key).is_file()
        request = job.request(directory, labels, force=again, batch=out)
        result = execute(request, adapter=adapter, trajectory=traj, backend=containers_ahead.backend())
        failure = continuation_error(result.continuation, directory)
        if failure is not None:
            raise failure
    except Interrupted:
        raise  # the batch is stopping: the job is lost, not failed
    except ReplayError as exc:
        outcome = outcome_of(job, "refused" if exc.kind in REFUSALS else "failed", exc.kind, str(exc), node)
    except Exception as exc:
        outcome = outcome_of(job, "failed", CRASH, crash_reason(exc), node)
    else:
        outcome = _ended(job, result, out, node)
        if outcome.status == "done":
            return outcome
    with contextlib.suppress(OSError):  # not stored: the summary still has it, and the next run retries it
        write_bytes_atomic(outcome_path(out, job.key), orjson.dumps(outcome.model_dump(mode="json")))
    return outcome


def groups(jobs: list[Job]) -> list[list[Job]]:
    """The units a batch runs: the replay (or continue) jobs of one trajectory and options together (one
    replay passes all their boundaries, and each continuation forks from its boundary, `run_group`), every
    other job alone; in the order of their first job."""
    units: dict[str, list[Job]] = {}
    for job in jobs:
        grouped = job.mode in ("replay", "continue") and job.replay
        units.setdefault(job.replay if grouped else job.key, []).append(job)
    return list(units.values())


def run_group(
    jobs: list[Job], out: Path, labels: dict[str, str], node: str | None = None
) -> list[JobOutcome]:
    """A unit of `groups`: one job by `run_job`; the boundaries of one replay by one replay
    (replayer/pipeline/multiboundary.py; continuations forked from it, fanout.py), each job its own
    directory and outcome, as `run_job` would give it."""
    refused = batch_output.refusal(out)
    if refused is not None:
        return [_recorded(job, refused, out, node) for job in jobs]
    if jobs[0].mode == "continue":  # a unit's jobs share a mode; the others spend no tokens
        used_up = _tokens_used_up(out)
        if used_up is not None:
            return [outcome_of(job, "cut", "max_tokens", used_up, node) for job in jobs]
    if len(jobs) == 1:
        outcome = run_job(jobs[0], out, labels, node)
        batch_output.charge(out, job_dir(out, jobs[0].key))
        return [outcome]
    from replayer.floor.pins import load_pins
    from replayer.pipeline.engine import execute_many
    from replayer.pipeline.provision import ensure_image

    first = jobs[0]
    again = any(outcome_path(out, job.key).is_file() for job in jobs)
    request = first.request(job_dir(out, first.key), labels, force=again, batch=out)
    results: dict[int, ReplayResult | ReplayError | str]
    try:
        if first.image_id is not None:
            ensure_image(first.entry.image or load_pins().base_image.tag, first.image_id, out)
        adapter, traj = _parsed(first.trajectory, first.entry.task, first.entry.cwd, first.entry.session)
        outs = {job.boundary: job_dir(out, job.key) for job in jobs}
        with batch_output.drawing(out):
            results = dict(execute_many(request, outs, adapter, traj, backend=containers_ahead.backend()))
    except Interrupted:
        raise
    except ReplayError as exc:
        results = {job.boundary: exc for job in jobs}
    except Exception as exc:  # the boundaries the replay wrote before it are done all the same
        results = {job.boundary: crash_reason(exc) for job in jobs}
    return [_recorded(job, results[job.boundary], out, node) for job in jobs]


def _recorded(
    job: Job, result: ReplayResult | ReplayError | str | None, out: Path, node: str | None
) -> JobOutcome:
    """A grouped job's outcome from its boundary's result, error or crash reason, stored as `run_job` does."""
    if not isinstance(result, ReplayResult) and _has_result(out, job.key):
        result = None  # written before the replay stopped
    if isinstance(result, ReplayResult):  # a continuation refused or failed: its directory is complete
        from replayer.pipeline.continue_run import continuation_error

        result = continuation_error(result.continuation, job_dir(out, job.key)) or result
    if isinstance(result, ReplayError):
        status: JobStatus = "refused" if result.kind in REFUSALS else "failed"
        outcome = outcome_of(job, status, result.kind, str(result), node)
    elif isinstance(result, str):
        outcome = outcome_of(job, "failed", CRASH, result, node)
    else:
        outcome = _ended(job, result, out, node)
        if outcome.status == "done":
            return outcome
    with contextlib.suppress(OSError):
        write_bytes_atomic(outcome_path(out, job.key), orjson.dumps(outcome.model_dump(mode="json")))
    return outcome


def _ended(job: Job, result: ReplayResult | None, out: Path, node: str | None) -> JobOutcome:
    """A job whose result directory is complete: `done`, or `cut` when a token budget ended its continuation
    (kept as an outcome, so that a resumed batch reports it again and `--retry-failed` runs it again)."""
    cont = result.continuation if result is not None else None
    if cont is None or cont.agent_status != "max_tokens":
        outcome_path(out, job.key).unlink(missing_ok=True)
        return outcome_of(job, "done", node=node)
    said = [r.detail for r in cont.refusals if r.reason == "max_tokens"]
    why = said[-1] if said else "the continuation's token budget was used up"
    return outcome_of(job, "cut", "max_tokens", f"{why}; the result is complete up to there", node)


def crash_reason(exc: BaseException) -> str:
    """An unexpected exception in one bounded line: its type and an excerpt of its message."""
    message = str(exc)
    return f"{type(exc).__name__}: {excerpt(message, 160)}" if message else type(exc).__name__


def pending(jobs: list[Job], out: Path, retry_failed: bool, tally: Tally) -> list[Job]:
    """Jobs still to run; the outcomes of those skipped (done before, or refused/failed and not retried) go
    to the tally."""
    todo: list[Job] = []
    for job in jobs:
        stored = _stored_outcome(out, job.key)  # a failed continuation's directory is complete: failed still
        if stored is not None and not retry_failed:
            tally.add(stored)
        elif stored is None and _has_result(out, job.key):
            tally.add(outcome_of(job, "skipped"))
        else:
            todo.append(job)
    return todo


def landed(job: Job, out: Path) -> JobOutcome | None:
    """What a job whose worker died in flight left on disk, as the next run reads it: the outcome it stored,
    else `done` when its result landed (written just before the worker died); None when nothing landed."""
    stored = _stored_outcome(out, job.key)
    if stored is None and _has_result(out, job.key):
        return outcome_of(job, "done")
    return stored


def _stored_outcome(out: Path, key: str) -> JobOutcome | None:
    """A refusal or failure recorded before; an unreadable record counts as none (the job runs again). DIR
    may be a copy from elsewhere: read the foreign way (no link, a regular file, bounded)."""
    try:
        with Folder.open(out, given=True) as folder:  # the user's --out
            raw = folder.maybe_read(f"outcomes/{key}.json", _OUTCOME_BYTES)
        return None if raw is None else JobOutcome.model_validate_json(raw)
    except (BadInput, ValidationError):
        return None


_OUTCOME_BYTES = 1 << 20
"""An outcome record is a line of error text and a few fields."""


def _has_result(out: Path, key: str) -> bool:
    """The job's result.json is there as a regular file, reached without a link (a done job)."""
    try:
        with Folder.open(out, given=True) as folder:
            return folder.kind(f"jobs/{key}/result.json") == "file"
    except BadInput:
        return False


def start_token_budget(out: Path, max_tokens: int | None) -> int:
    """DIR's ledger of the batch's token budget written anew (none charged), or removed when this start sets
    none: a budget spans one `replayer batch` run, as the output total does. The lines' own ledgers
    (DIR/ledgers/, a line's budget spans its jobs across starts) keep what was charged and give back what the
    processes of a killed batch had reserved (called with DIR's lock held: none of its jobs is in flight).
    Returns the tokens given back."""
    from replayer.bridges.budget import Ledger

    if max_tokens is None:
        (out / TOKEN_LEDGER).unlink(missing_ok=True)
    else:
        Ledger.create(out / TOKEN_LEDGER, max_tokens)
    lines = out / LINE_LEDGERS
    return sum(
        Ledger(0, path).release_dead() for path in (lines.glob("line-*.json") if lines.is_dir() else ())
    )


def _tokens_used_up(out: Path) -> str | None:
    """Why a continue job may not start: the batch's token budget is used up (`Ledger.used_up`), so its
    first model request would be held after its whole replay ran. Not stored: the next start runs it."""
    from replayer.bridges.budget import Ledger

    path = out / TOKEN_LEDGER
    if not path.is_file():  # no budget, or a Ray node that does not see DIR
        return None
    ledger = Ledger.opened(path)
    if not ledger.used_up():
        return None
    charged, _ = ledger.used()
    return (
        f"the batch's token budget of {ledger.limit} was used up before the job started ({charged} billed; "
        "replayer batch --max-tokens): it did not run, and the next start runs it"
    )


def interrupted(todo: list[Job], tally: Tally, out: Path, containers: bool) -> None:
    """A batch stopped (Ctrl-C, SIGTERM) once its workers are ended: every job of `todo` without an outcome
    counts as `interrupted` (in flight or not started; not stored, so the next start runs it), and what
    the ended workers left (half-written result directories; containers and snapshot images, which the
    executors remove too) is removed now rather than at the next start."""
    ended = {row[2] for row in tally.rows}
    for job in todo:
        if job.key not in ended:
            why = "the batch was stopped before the job ended; the next start runs it"
            tally.add(outcome_of(job, "interrupted", "interrupted", why))
    with signals.deferred():  # a second Ctrl-C does not cut the cleanup short
        clean_partials(out)
        if containers:
            with contextlib.suppress(ReplayError, OSError):  # no engine: the next start removes them
                remove_left(out)
