"""Copy a tree that a container could write (or a user's workspace) without trusting anything in it.

The walk goes by directory file descriptors opened with O_NOFOLLOW, so no symlink is ever followed;
files are opened O_NOFOLLOW | O_NONBLOCK and checked with fstat, so a FIFO never blocks and a device
is never read. Symlinks are either re-created as links (their target never resolved) or skipped;
FIFOs, sockets and devices are skipped; every skip is recorded. The copy is bounded in bytes, files
and depth; past a bound it refuses. Set-user-ID and set-group-ID bits are never copied.

`walk` is the same descriptor-based, link-refusing walk for a reader (the cassette oracle, compare's
workspace diff): it yields what a tree holds without ever leaving it. Names are bytes: one that is not
UTF-8 is shown with its bytes escaped (`shown`), never a crash.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from replayer.floor.errors import SandboxError
from replayer.floor.limits import SandboxLimits
from replayer.floor.output_budget import Earlier

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_DEPTH = 256
_MAX_SKIPS_LISTED = 100
_CHUNK = 1 << 24

Links = Literal["keep", "skip"]
Holes = Literal["keep", "count"]


class Skipped(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    kind: Literal["symlink", "fifo", "socket", "device", "too_deep", "other"]


class CopyReport(BaseModel):
    """What a copy took and what it left out."""

    model_config = ConfigDict(extra="forbid")
    files: int = 0
    bytes: int = 0
    skipped: list[Skipped] = Field(default_factory=list)
    """The first entries left out (at most 100); `skipped_count` counts them all."""
    skipped_count: int = 0
    shared_bytes: int = 0
    """Of `bytes`, those shared with an earlier boundary's output instead of written."""

    def listing(self, where: str) -> list[str]:
        return [f"{where}/{s.path} ({s.kind})" for s in self.skipped]

    def skip(self, path: str, kind: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < _MAX_SKIPS_LISTED:
            self.skipped.append(Skipped(path=shown(path), kind=kind))


def shown(name: str) -> str:
    """A file name as text JSON can hold: the bytes of a name that is not UTF-8 (which Python carries as
    lone surrogates) as visible `\\xNN` escapes."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symlink"
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "other"


def _safe_mode(mode: int) -> int:
    return stat.S_IMODE(mode) & ~(stat.S_ISUID | stat.S_ISGID)


@contextlib.contextmanager
def _fd(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


def copy_untrusted(
    src: Path,
    dest: Path,
    *,
    links: Links,
    limits: SandboxLimits | None = None,
    what: str = "the sandbox",
    merge: bool = False,
    holes: Holes = "keep",
    earlier: Earlier | None = None,
) -> CopyReport:
    """Copy the tree at `src` to `dest` (created; with `merge`, an existing directory is filled).

    `holes`: "keep" counts a file's data against the disk bound and keeps its holes; "count" counts its
    apparent size (holes as data): for a tree whose files the host will read whole (an agent home's
    sessions), where a 64 GB sparse file would become 64 GB read.
    `earlier`: the same tree in an earlier boundary's output (floor/output_budget.py): an unchanged file is
    shared with it, any other is charged to the run's output budget before it is written.
    Raises SandboxError when `src` is not a directory or the copy would pass a limit; `what` names
    the source in that message."""
    limits = limits or SandboxLimits()
    report = CopyReport()
    try:
        src_fd = os.open(src, _DIR_FLAGS)
    except OSError as exc:
        raise SandboxError(f"cannot copy {what}: {src} is not a directory ({exc.strerror})") from None
    with _fd(src_fd):
        dest.mkdir(parents=True, exist_ok=merge)
        with _fd(os.open(dest, _DIR_FLAGS)) as dest_fd:
            _copy_dir(src_fd, dest_fd, "", 0, links, limits, report, what, holes, earlier)
            st = os.fstat(src_fd)
            if not merge:
                _set_meta(dest_fd, st)
    return report


def _copy_dir(
    src_fd: int,
    dest_fd: int,
    rel: str,
    depth: int,
    links: Links,
    limits: SandboxLimits,
    report: CopyReport,
    what: str,
    holes: Holes,
    earlier: Earlier | None = None,
) -> None:
    with os.scandir(src_fd) as entries:
        names = [e.name for e in entries]
    for name in names:
        path = f"{rel}/{name}" if rel else name
        try:
            st = os.stat(name, dir_fd=src_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed while we walk (the container may still run)
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            if depth + 1 >= _MAX_DEPTH:
                report.skip(path, "too_deep")
                continue
            try:
                child = os.open(name, _DIR_FLAGS, dir_fd=src_fd)
            except OSError:  # replaced by a link or removed since the stat
                report.skip(path, "other")
                continue
            below = earlier.child(name) if earlier is not None else contextlib.nullcontext()
            with _fd(child), below as sub:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=dest_fd)
                with _fd(os.open(name, _DIR_FLAGS, dir_fd=dest_fd)) as dest_child:
                    _copy_dir(child, dest_child, path, depth + 1, links, limits, report, what, holes, sub)
                    _set_meta(dest_child, os.fstat(child))
        elif stat.S_ISREG(mode):
            _copy_file(src_fd, dest_fd, name, path, limits, report, what, holes, earlier)
        elif stat.S_ISLNK(mode) and links == "keep":
            target = os.readlink(name, dir_fd=src_fd)
            _count(report, limits, 0, what)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dest_fd)
            os.symlink(target, name, dir_fd=dest_fd)
            with contextlib.suppress(OSError):
                os.chown(name, st.st_uid, st.st_gid, dir_fd=dest_fd, follow_symlinks=False)
                os.utime(name, ns=(st.st_atime_ns, st.st_mtime_ns), dir_fd=dest_fd, follow_symlinks=False)
        else:
            report.skip(path, _kind(mode))


def _count(report: CopyReport, limits: SandboxLimits, size: int, what: str, holes: Holes = "keep") -> None:
    report.files += 1
    report.bytes += size
    if report.files > limits.copy_files:
        raise SandboxError(
            f"{what} holds more than {limits.copy_files} files; refused to copy it (see --limits files=)"
        )
    if report.bytes > limits.disk_bytes:
        counted = " (holes counted: the host reads these files whole)" if holes == "count" else ""
        raise SandboxError(
            f"{what} holds more than {limits.disk_bytes} bytes{counted}; refused to copy it (see --limits disk=)"
        )


def _copy_file(
    src_fd: int,
    dest_fd: int,
    name: str,
    path: str,
    limits: SandboxLimits,
    report: CopyReport,
    what: str,
    holes: Holes,
    earlier: Earlier | None = None,
) -> None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=src_fd)
    except OSError:  # swapped for a link, a FIFO or removed since the stat
        report.skip(path, "other")
        return
    with _fd(fd):
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            report.skip(path, _kind(st.st_mode))
            return
        data = min(st.st_size, st.st_blocks * 512)  # holes cost nothing ...
        _count(report, limits, st.st_size if holes == "count" else data, what, holes)  # ... unless read whole
        if earlier is not None:
            if earlier.share(fd, st, name, dest_fd, lambda out: _set_meta(out, st)):
                report.shared_bytes += data
                return
            earlier.charge(data)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dest_fd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with _fd(os.open(name, flags, 0o600, dir_fd=dest_fd)) as out:
            _copy_data(fd, out, st.st_size)
            _set_meta(out, st)


def _copy_data(src: int, out: int, size: int) -> None:
    """The data segments of `src` up to `size` (its size when opened: growth is not copied), holes kept."""
    for start, end in data_extents(src, size):
        os.lseek(out, start, os.SEEK_SET)
        while start < end:
            sent = os.sendfile(out, src, start, min(end - start, _CHUNK))
            if sent == 0:
                return  # shrank while we copied
            start += sent
    os.ftruncate(out, size)


def _set_meta(fd: int, st: os.stat_result) -> None:
    with contextlib.suppress(OSError):
        os.fchown(fd, st.st_uid, st.st_gid)
    os.fchmod(fd, _safe_mode(st.st_mode))
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))


class Entry(NamedTuple):
    """An entry `walk` found: `name` in the open directory `dir_fd` (valid until the walk goes on), its
    path relative to the root (as the OS gives it: `shown` makes it text) and its lstat; `entered`: a
    directory the walk goes into next (False for any other entry, and for a directory past the depth
    bound or swapped for something else meanwhile)."""

    path: str
    dir_fd: int
    name: str
    stat: os.stat_result
    entered: bool = False


def walk(root: Path, *, skip_top: frozenset[str] = frozenset()) -> Iterator[Entry]:
    """Every entry under `root`, in sorted order (a directory before what it holds), by directory
    descriptors opened O_NOFOLLOW: a link is yielded, never followed; a directory swapped for a link while
    the walk goes is yielded as that link; an entry removed meanwhile is left out; past the depth bound a
    directory is yielded but not entered. `skip_top`: names left out at the root (e.g. `.git`).
    Raises SandboxError when `root` is not a directory."""
    try:
        fd = os.open(root, _DIR_FLAGS)
    except OSError as exc:
        raise SandboxError(f"cannot read {root}: not a directory ({exc.strerror})") from None
    with _fd(fd):
        yield from _walk_dir(fd, "", 0, skip_top)


def _walk_dir(dir_fd: int, rel: str, depth: int, skip: frozenset[str]) -> Iterator[Entry]:
    with os.scandir(dir_fd) as entries:
        names = sorted(e.name for e in entries if e.name not in skip)
    for name in names:
        path = f"{rel}/{name}" if rel else name
        try:
            st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            continue  # removed while we walk
        if not stat.S_ISDIR(st.st_mode) or depth + 1 >= _MAX_DEPTH:
            yield Entry(path, dir_fd, name, st)
            continue
        try:
            child = os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
        except OSError:  # swapped for a link (or another kind) or removed since the stat: as it is now
            with contextlib.suppress(FileNotFoundError):
                yield Entry(path, dir_fd, name, os.stat(name, dir_fd=dir_fd, follow_symlinks=False))
            continue
        with _fd(child):
            yield Entry(path, dir_fd, name, os.fstat(child), entered=True)
            yield from _walk_dir(child, path, depth + 1, frozenset())


def data_extents(fd: int, size: int) -> Iterator[tuple[int, int]]:
    """The (start, end) of each data segment of the open file `fd` below `size`: holes are skipped, never
    read (a file system without SEEK_DATA gives one segment, the whole file)."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # only a hole is left
                return
            yield pos, size  # no SEEK_DATA here: all of it is data
            return
        if start >= size:
            return
        end = min(os.lseek(fd, start, os.SEEK_HOLE), size)
        yield start, end
        pos = end
