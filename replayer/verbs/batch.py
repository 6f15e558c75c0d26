"""`replayer batch`: a manifest of job sources, expanded to (trajectory, boundary, mode) jobs, each run by
the ordinary engine into its own result directory, keyed by content so that nothing is computed twice.

DIR/jobs/<key>/        the ordinary result directory of one job (present only when complete)
DIR/outcomes/<key>.json  a refused or failed job: why (a done job needs no outcome file)
DIR/batch.json         the summary of the last run
DIR/.lock              held (flock) by the batch running on DIR: one batch per directory at a time

Every container a job starts carries the label `sandbox-replayer.batch=<batch_id(DIR)>`: a batch that was
killed (even by SIGKILL) leaves no worker behind, and the next batch on DIR removes its containers.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from replayer.floor import signals
from replayer.floor.errors import BadInput, Interrupted, OutputError, ReplayError, excerpt
from replayer.floor.foreign import Folder
from replayer.floor.io import write_bytes_atomic
from replayer.floor.results import ReplayResult
from replayer.floor.trajectory import Trajectory
from replayer.verbs import batch_output, containers_ahead
from replayer.verbs.batch_jobs import TOKEN_LEDGER, Job
from replayer.verbs.batch_manifest import ManifestEntry, Mode, check_trajectory

if TYPE_CHECKING:
    pass

JobStatus = Literal["done", "skipped", "refused", "failed", "cut", "interrupted"]
"""`cut`: a continuation a token budget ended (the batch's, or its own), its result complete; `interrupted`:
a job the batch was stopped (Ctrl-C, SIGTERM) before it ended, run again by the next start."""
REFUSALS = ("bad_input", "plan_refused", "confinement", "workspace", "cassette")
"""Error kinds that are refusals (the input asks for something impossible), not failures."""
BATCH_LABEL = "sandbox-replayer.batch"
"""The container label of a batch's jobs; its value is `batch_id(DIR)`."""
CRASH = "crash"
"""The error kind of a job that raised something unexpected (a bug, not a refusal of its input)."""


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


# running -------------------------------------------------------------------------------------
def job_dir(out: Path, key: str) -> Path:
    return out / "jobs" / key


def outcome_path(out: Path, key: str) -> Path:
    return out / "outcomes" / f"{key}.json"


def outcome_of(
    job: Job, status: JobStatus, kind: str | None = None, error: str | None = None, node: str | None = None
) -> JobOutcome:
    return JobOutcome(
        key=job.key,
        line=job.line,
        trajectory=str(job.trajectory),
        boundary=job.boundary,
        mode=job.mode,
        status=status,
        error_kind=kind,
        error=error,
        node=node,
    )


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
    from replayer.pipeline.continuation import continuation_error
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
        from replayer.pipeline.continuation import continuation_error

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


# the batch directory ----------------------------------------------------------------------------
def prepare_dir(out: Path) -> None:
    """DIR, DIR/jobs and DIR/outcomes as directories, or an OutputError naming the one in the way (a file
    there would otherwise fail every job, one by one)."""
    for path in (out, out / "jobs", out / "outcomes"):
        try:
            path.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise OutputError(f"{path} exists and is not a directory") from None
        except OSError as exc:
            raise OutputError(f"cannot create {path}: {exc.strerror}") from None
    summary = out / "batch.json"
    if summary.exists() and not summary.is_file():
        raise OutputError(f"{summary} exists and is not a file")


@contextlib.contextmanager
def locked(out: Path) -> Iterator[None]:
    """DIR held exclusively (flock on DIR/.lock) while the block runs: a second batch on DIR is refused.
    The kernel drops the lock when the holder dies, so a killed batch never blocks the next one."""
    path = out / ".lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise OutputError(f"cannot open the batch lock {path}: {exc.strerror}") from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise OutputError(
                f"another batch{who} is running on {out}; wait for it or use another --out"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def batch_id(out: Path) -> str:
    """A stable id of DIR (its real path, hashed): the value of its containers' BATCH_LABEL."""
    return hashlib.sha256(os.fsencode(os.path.realpath(out))).hexdigest()[:16]


def batch_labels(out: Path) -> dict[str, str]:
    return {BATCH_LABEL: batch_id(out)}


def remove_left(out: Path) -> list[str]:
    """Remove every container and snapshot image carrying DIR's label; returns their names. Called with the
    lock held and no job of DIR in flight, so that they are what a killed batch, or a worker that died
    mid-job, left behind."""
    from replayer.sandboxes import engines

    engine, label = engines.chosen(), f"{BATCH_LABEL}={batch_id(out)}"
    return engine.remove_containers(label) + engine.remove_images(label)


def clean_partials(out: Path) -> None:
    """Result directories a killed worker left half-written never count: remove them."""
    jobs = out / "jobs"
    if jobs.is_dir():
        for entry in jobs.iterdir():
            if entry.name.startswith("."):
                shutil.rmtree(entry, ignore_errors=True)


def start_token_budget(out: Path, max_tokens: int | None) -> None:
    """DIR's ledger of the batch's token budget written anew (none charged), or removed when this start sets
    none: a budget spans one `replayer batch` run, as the output total does."""
    from replayer.bridges.budget import Ledger

    if max_tokens is None:
        (out / TOKEN_LEDGER).unlink(missing_ok=True)
    else:
        Ledger.create(out / TOKEN_LEDGER, max_tokens)


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
                    trajectory=str(entry.trajectory),
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
