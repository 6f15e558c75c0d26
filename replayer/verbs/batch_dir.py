"""A batch's output directory DIR: its folders made, held by one batch at a time (a lock), its id and the
label of its containers, and what a killed batch left there removed.

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
from collections.abc import Iterator
from pathlib import Path

from replayer.floor.errors import OutputError
from replayer.floor.io import remove_entry
from replayer.verbs.batch_jobs import LINE_LEDGERS

BATCH_LABEL = "sandbox-replayer.batch"
"""The container label of a batch's jobs; its value is `batch_id(DIR)`."""


def job_dir(out: Path, key: str) -> Path:
    return out / "jobs" / key


def outcome_path(out: Path, key: str) -> Path:
    return out / "outcomes" / f"{key}.json"


def prepare_dir(out: Path) -> None:
    """DIR, DIR/jobs and DIR/outcomes as directories, or an OutputError naming the one in the way (a file
    there would otherwise fail every job, one by one). DIR may be a folder from elsewhere, resumed: a folder
    of its own that is a link is refused, since a start writes there and removes the hidden entries a killed
    worker left (through a link to a home, its `.ssh`)."""
    for name in ("jobs", "outcomes", LINE_LEDGERS):
        if (out / name).is_symlink():
            raise OutputError(f"{out / name} is a link: a batch writes only into DIR's own folders")
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
                remove_entry(entry)
