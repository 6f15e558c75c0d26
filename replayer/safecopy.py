"""Copy a tree that a container could write (or a user's workspace) without trusting anything in it.

The walk goes by directory file descriptors opened with O_NOFOLLOW, so no symlink is ever followed;
files are opened O_NOFOLLOW | O_NONBLOCK and checked with fstat, so a FIFO never blocks and a device
is never read. Symlinks are either re-created as links (their target never resolved) or skipped;
FIFOs, sockets and devices are skipped; every skip is recorded. The copy is bounded in bytes, files
and depth; past a bound it refuses. Set-user-ID and set-group-ID bits are never copied.
"""

from __future__ import annotations

import contextlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from replayer.errors import SandboxError
from replayer.models import SandboxLimits

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_MAX_DEPTH = 256
_MAX_SKIPS_LISTED = 100
_CHUNK = 1 << 24

Links = Literal["keep", "skip"]


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

    def listing(self, where: str) -> list[str]:
        return [f"{where}/{s.path} ({s.kind})" for s in self.skipped]

    def skip(self, path: str, kind: str) -> None:
        self.skipped_count += 1
        if len(self.skipped) < _MAX_SKIPS_LISTED:
            self.skipped.append(Skipped(path=path, kind=kind))


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
) -> CopyReport:
    """Copy the tree at `src` to `dest` (created; with `merge`, an existing directory is filled).

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
            _copy_dir(src_fd, dest_fd, "", 0, links, limits, report, what)
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
            with _fd(child):
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o700, dir_fd=dest_fd)
                with _fd(os.open(name, _DIR_FLAGS, dir_fd=dest_fd)) as dest_child:
                    _copy_dir(child, dest_child, path, depth + 1, links, limits, report, what)
                    _set_meta(dest_child, os.fstat(child))
        elif stat.S_ISREG(mode):
            _copy_file(src_fd, dest_fd, name, path, limits, report, what)
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


def _count(report: CopyReport, limits: SandboxLimits, size: int, what: str) -> None:
    report.files += 1
    report.bytes += size
    if report.files > limits.copy_files:
        raise SandboxError(
            f"{what} holds more than {limits.copy_files} files; refused to copy it (see --limits files=)"
        )
    if report.bytes > limits.disk_bytes:
        raise SandboxError(
            f"{what} holds more than {limits.disk_bytes} bytes; refused to copy it (see --limits disk=)"
        )


def _copy_file(
    src_fd: int, dest_fd: int, name: str, path: str, limits: SandboxLimits, report: CopyReport, what: str
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
        _count(report, limits, min(st.st_size, st.st_blocks * 512), what)  # holes cost nothing
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name, dir_fd=dest_fd)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with _fd(os.open(name, flags, 0o600, dir_fd=dest_fd)) as out:
            _copy_data(fd, out, st.st_size)
            _set_meta(out, st)


def _copy_data(src: int, out: int, size: int) -> None:
    """The data segments of `src` up to `size` (its size when opened: growth is not copied), holes kept."""
    pos = 0
    while pos < size:
        try:
            start = os.lseek(src, pos, os.SEEK_DATA)
        except OSError:  # ENXIO: only a hole is left
            break
        end = min(os.lseek(src, start, os.SEEK_HOLE), size)
        os.lseek(out, start, os.SEEK_SET)
        while start < end:
            sent = os.sendfile(out, src, start, min(end - start, _CHUNK))
            if sent == 0:
                return  # shrank while we copied
            start += sent
        pos = end
    os.ftruncate(out, size)


def _set_meta(fd: int, st: os.stat_result) -> None:
    with contextlib.suppress(OSError):
        os.fchown(fd, st.st_uid, st.st_gid)
    os.fchmod(fd, _safe_mode(st.st_mode))
    os.utime(fd, ns=(st.st_atime_ns, st.st_mtime_ns))
