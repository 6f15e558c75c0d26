"""The one way to read a file the replayer did not write: a results folder (downloaded or not), a cassette,
a batch's jobs/, the files beside a trajectory.

A folder is opened once as a handle (O_DIRECTORY | O_NOFOLLOW). Every name read below it is relative (never
absolute, never `..`) and resolved one component at a time by openat with O_NOFOLLOW, so no link is followed
anywhere on the way; the file itself is opened O_NONBLOCK (a FIFO never blocks) and checked with fstat
(regular files only: no device, no FIFO, no socket); reads are bounded, and a bound that cuts is a one-line
`BadInput`, never a partial read. A name a foreign file gives (a result's prefix file, a manifest's entry)
is refused the same way when it points outside the folder.
"""

from __future__ import annotations

import contextlib
import os
import re
import resource
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import orjson

from replayer.floor.errors import BadInput

MAX_FILE_BYTES = 64 * 1024 * 1024
"""What one read takes at most unless the caller says (a result, a prefix, a report's input)."""

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC

Kind = Literal["file", "dir", "link", "missing", "other"]


def kind_of(mode: int) -> str:
    """A file type in words, for a refusal."""
    for test, name in (
        (stat.S_ISLNK, "a link"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def parts(name: str) -> list[str]:
    """The components of a relative name inside a folder; BadInput for an absolute name or one with `..`."""
    if "/" not in name and name not in ("", ".", ".."):
        return [name]
    if name.startswith("/"):
        raise BadInput(f"{name}: an absolute name, not a name inside the folder (refused)")
    found = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in found:
        raise BadInput(f"{name}: a name that leaves the folder (`..`; refused)")
    if not found:
        raise BadInput(f"{name!r}: not a file name inside the folder")
    return found


class Folder:
    """A folder someone else made, held open; every read goes through it (see the module's doc)."""

    def __init__(self, fd: int, path: Path):
        self.fd = fd
        self.path = path

    @classmethod
    def open(cls, path: Path, *, given: bool = False) -> Folder:
        """`path` as a folder: a link there is refused, unless `given`: the user named `path` themselves (an
        argument, a flag), and a link they typed is theirs, followed as for their input files. Nothing
        below the folder is ever followed."""
        follow = given or pinned_folder(path)  # a folder held open, reached without a link
        try:
            return cls(os.open(path, _DIR & ~os.O_NOFOLLOW if follow else _DIR), path)
        except OSError as exc:
            raise BadInput(f"cannot read {path} as a folder: {_why(exc, path)}") from None

    def _names(self, name: str) -> list[str]:
        try:
            return parts(name)
        except BadInput as exc:
            raise BadInput(f"cannot read {self.path}: {exc}") from None

    @property
    def pinned_path(self) -> Path:
        """A path to this very folder (`/proc/self/fd/N`) for a reader that takes a path, while it is open."""
        return Path(f"/proc/self/fd/{self.fd}")

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _parent(self, names: list[str]) -> Iterator[int]:
        """The descriptor of the folder holding `names[-1]`, reached without following a link."""
        if len(names) == 1:  # the common case, thousands of times for a conversation: no dup
            yield self.fd
            return
        fd = os.dup(self.fd)
        try:
            for n, name in enumerate(names[:-1]):
                try:
                    child = os.open(name, _DIR, dir_fd=fd)
                except OSError as exc:
                    where = self.path.joinpath(*names[: n + 1])
                    raise BadInput(f"cannot read {where}: {_why(exc, where, fd, name)}") from None
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def sub(self, name: str) -> Folder:
        """The folder `name` below this one (no link followed on the way)."""
        names = self._names(name)
        with self._parent(names) as dfd:
            try:
                return Folder(os.open(names[-1], _DIR, dir_fd=dfd), self.path / name)
            except OSError as exc:
                raise BadInput(
                    f"cannot read {self.path / name} as a folder: {_why(exc, self.path / name, dfd, names[-1])}"
                ) from None

    def kind(self, name: str) -> Kind:
        """What `name` is, without following a link (a link on the way makes it "link")."""
        names = self._names(name)
        try:
            with self._parent(names) as dfd:
                mode = os.stat(names[-1], dir_fd=dfd, follow_symlinks=False).st_mode
        except BadInput:
            return "link" if self._link_on_way(names) else "missing"
        except OSError:
            return "missing"
        if stat.S_ISREG(mode):
            return "file"
        if stat.S_ISDIR(mode):
            return "dir"
        return "link" if stat.S_ISLNK(mode) else "other"

    def _link_on_way(self, names: list[str]) -> bool:
        """A folder on the way to `names[-1]` is a link (rather than missing, or not a folder)."""
        fd = os.dup(self.fd)
        try:
            for name in names[:-1]:
                if stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                    return True
                child = os.open(name, _DIR, dir_fd=fd)
                os.close(fd)
                fd = child
        except OSError:
            pass
        finally:
            os.close(fd)
        return False

    def names(self) -> list[str]:
        """The names this folder holds, sorted."""
        return sorted(os.listdir(self.fd))

    def _open(self, name: str, max_bytes: int) -> tuple[int, int]:
        """The descriptor and size of the regular file `name`, refused before any read when larger."""
        names = self._names(name)
        if len(names) == 1:  # a file of this folder: thousands of them for a conversation, kept lean
            fd = self._open_in(self.fd, name, name)
        else:
            with self._parent(names) as dfd:
                fd = self._open_in(dfd, name, names[-1])
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise BadInput(f"cannot read {self.path / name}: it is {kind_of(st.st_mode)} (refused)")
            if st.st_size > max_bytes:
                raise BadInput(
                    f"cannot read {self.path / name}: {st.st_size} bytes, more than the {max_bytes}-byte bound"
                )
        except BaseException:
            os.close(fd)
            raise
        return fd, st.st_size

    def _open_in(self, dir_fd: int, name: str, last: str) -> int:
        try:
            return os.open(last, _FILE, dir_fd=dir_fd)
        except OSError as exc:
            where = self.path / name
            raise BadInput(f"cannot read {where}: {_why(exc, where, dir_fd, last)}") from None

    def read(self, name: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
        """The whole of the regular file `name`; BadInput when it is anything else or passes `max_bytes`."""
        fd, size = self._open(name, max_bytes)
        return read_whole(
            fd, size, max_bytes, f"cannot read {self.path / name}: it grew past the {max_bytes}-byte bound"
        )

    def maybe_read(self, name: str, max_bytes: int = MAX_FILE_BYTES) -> bytes | None:
        """`read`, or None when `name` is missing, not a regular file, unreadable or too large (a file that
        may be there: a subagent's parent, an index's entry)."""
        try:
            return self.read(name, max_bytes)
        except BadInput:
            return None

    def json(self, name: str, max_bytes: int = MAX_FILE_BYTES) -> Any:
        """The JSON document `name`, read within `max_bytes`."""
        data = self.read(name, max_bytes)
        try:
            return orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise BadInput(f"{self.path / name} cannot be read as JSON: {exc}") from None

    @contextlib.contextmanager
    def pinned(self, name: str, max_bytes: int = MAX_FILE_BYTES) -> Iterator[Path]:
        """A path to the regular file `name` as opened here (`/proc/self/fd/N`), for a parser that takes a
        path: whatever the folder holds meanwhile, the parser reads that very file."""
        fd, _ = self._open(name, max_bytes)
        pinned = f"/proc/self/fd/{fd}"
        try:
            yield Path(pinned)
        except BadInput as exc:  # the parser's refusal names the file, not the descriptor
            raise BadInput(str(exc).replace(pinned, str(self.path / name))) from None
        finally:
            os.close(fd)


_HELD: dict[tuple[int, int], int] = {}
"""The folders `hold` keeps open for this process, by (device, inode): one descriptor each, however often
they are named, so that what is held is bounded by the folders there are."""


_KEPT_FREE = 256
"""Descriptors left to the run itself (its sockets, pipes, output files) however many folders are held."""


def _room_to_hold() -> None:
    """Room for one more held folder: the soft limit on open files raised to the hard one first (a desktop's
    soft 1,024 would stop a manifest of a thousand conversation folders midway), else a one-line BadInput."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and len(_HELD) + min(_KEPT_FREE, soft // 2) >= soft and soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
    if soft == resource.RLIM_INFINITY:  # -1 here: no limit
        return
    kept = min(_KEPT_FREE, soft // 2)
    if len(_HELD) + kept >= soft:
        raise BadInput(
            f"the manifest names files in more folders than this process may hold open (open files are "
            f"limited to {soft}, {kept} of them kept for the run): raise `ulimit -n`, "
            "split the manifest, or pass --trust-manifest if it is yours"
        )


def hold(folder: Folder, name: str, *, itself: bool = False) -> Path:
    """A path to `name` in `folder` that stays bound to what is there now: the folder holding it, reached
    without a link, is kept open (`/proc/PID/fd/N/NAME`), so a folder on the way swapped for a link later is
    never followed; its readers follow no link at its end either (`pinned_name`; safecopy and `Folder.open`
    never do). `itself`: a folder `name` is held itself (`/proc/PID/fd/N`), for a reader that opens names
    below it by path (an OpenHands conversation). The path stays good in this process's children and in
    other processes of its user on this host (a pool's workers), not on another host (a Ray node): there it
    does not exist."""
    _room_to_hold()
    names = folder._names(name)
    target = folder.sub(name) if itself and folder.kind(name) == "dir" else None
    holder = target or (
        folder.sub("/".join(names[:-1])) if len(names) > 1 else Folder(os.dup(folder.fd), folder.path)
    )
    st = os.fstat(holder.fd)
    fd = _HELD.setdefault((st.st_dev, st.st_ino), holder.fd)
    if fd != holder.fd:
        holder.close()
    base = Path(f"/proc/{os.getpid()}/fd/{fd}")
    return base if target is not None else base / names[-1]


_PROC_FD = re.compile(r"/proc/\d+/fd/\d+")


def pinned_folder(path: Path | str) -> bool:
    """`path` is a folder `hold` keeps open (`/proc/PID/fd/N`)."""
    return _PROC_FD.fullmatch(str(path)) is not None


def pinned_name(path: Path | str) -> bool:
    """`path` is a name in a folder `hold` keeps open: opened, it follows no link at its end."""
    head, _, last = str(path).rpartition("/")
    return pinned_folder(head) and last not in ("", ".", "..")


def read_beside(folder: Path, name: str, max_bytes: int = MAX_FILE_BYTES) -> bytes | None:
    """The regular file `name` of `folder` (a file found beside a user's input), None when it is anything
    else, missing or larger than `max_bytes`."""
    try:
        with Folder.open(folder) as found:
            return found.maybe_read(name, max_bytes)
    except BadInput:
        return None


def read_fd(fd: int, size: int, max_bytes: int) -> bytes:
    """Up to `max_bytes + 1` bytes of the open file `fd` of `size` bytes, read straight from the descriptor
    (one more than the bound tells a file that grew past it); a first read that stops at the size found the
    end: no second read (a system call per file: a conversation is thousands)."""
    chunks: list[bytes] = []
    left, want = max_bytes + 1, size + 1
    while left > 0:
        chunk = os.read(fd, min(left, want))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
        if len(chunks) == 1 and len(chunk) == size:
            break
        want = 1 << 20
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def read_whole(fd: int, size: int, max_bytes: int, grew: str) -> bytes:
    """The whole of the open file `fd` of `size` bytes, closed once read (`read_fd`); BadInput `grew` when it
    grew past `max_bytes` while it was read."""
    try:
        data = read_fd(fd, size, max_bytes)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise BadInput(grew)
    return data


def _why(exc: OSError, where: Path, dir_fd: int | None = None, name: str | None = None) -> str:
    """An open's failure in words: a link is said as one (O_NOFOLLOW gives ELOOP or ENOTDIR for it)."""
    try:
        mode = os.stat(name if name is not None else where, dir_fd=dir_fd, follow_symlinks=False).st_mode
    except OSError:
        return exc.strerror or str(exc)
    if stat.S_ISLNK(mode):
        return "it is a link (links in a folder someone else made are not followed; refused)"
    return f"it is {kind_of(mode)}" if not stat.S_ISREG(mode) else (exc.strerror or str(exc))
