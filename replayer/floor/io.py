"""Confined, budgeted file access inside a workspace, and atomic writes of outputs.

Every path is opened by walking directory file descriptors from the workspace root with
O_NOFOLLOW, so a symlink (or a `..`) can never lead outside it; the final open is nonblocking and
the opened inode is checked with fstat, so FIFOs, devices and directories are refused.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import os
import posixpath
import shutil
import stat
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel, ConfigDict

from replayer.floor.errors import BadInput, ConfinementError, OutputError
from replayer.floor.foreign import kind_of, pinned_name, read_fd, read_whole
from replayer.floor.limits import ReadBudget

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotFound(ConfinementError):
    """The path does not exist inside the workspace."""


class NotRegular(ConfinementError):
    """The path exists but is not a regular file (directory, FIFO, device, symlink)."""

    def __init__(self, message: str, is_dir: bool = False):
        super().__init__(message)
        self.is_dir = is_dir


class ReadResult(BaseModel):
    model_config = ConfigDict(extra="forbid")
    data: bytes
    size: int
    """st_size of the opened inode."""
    truncated: bool
    mtime_ns: int


class Workspace:
    """A host directory that stands for `cwd` inside the sandbox."""

    def __init__(self, root: Path, cwd: str):
        self.root = root
        self.cwd = cwd.rstrip("/") or "/"

    def relative(self, path: str) -> list[str]:
        """Components of an absolute sandbox path (or one relative to cwd) below the workspace root."""
        full = posixpath.normpath(path if path.startswith("/") else posixpath.join(self.cwd, path))
        if full == self.cwd:
            return []
        prefix = self.cwd if self.cwd.endswith("/") else self.cwd + "/"
        if not full.startswith(prefix):
            raise ConfinementError(f"{path} is outside the workspace {self.cwd}")
        return [part for part in full[len(prefix) :].split("/") if part]

    @contextlib.contextmanager
    def _parent_fd(self, parts: list[str], create: bool = False) -> Iterator[int]:
        fd = os.open(self.root, _DIR_FLAGS)
        try:
            for name in parts[:-1]:
                try:
                    nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        raise NotFound(f"{name} does not exist") from None
                    os.mkdir(name, 0o755, dir_fd=fd)
                    nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
                except (NotADirectoryError, OSError) as exc:
                    raise NotRegular(f"{name} is not a directory ({exc.strerror})") from None
                os.close(fd)
                fd = nfd
            yield fd
        finally:
            os.close(fd)

    def _open_file(self, parts: list[str], flags: int, create: bool = False) -> int:
        if not parts:
            raise NotRegular("the workspace root is a directory", is_dir=True)
        with self._parent_fd(parts, create=create) as dfd:
            try:
                fd = os.open(
                    parts[-1], flags | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644, dir_fd=dfd
                )
            except FileNotFoundError:
                raise NotFound(f"{parts[-1]} does not exist") from None
            except IsADirectoryError:
                raise NotRegular(f"{parts[-1]} is a directory", is_dir=True) from None
            except OSError as exc:  # ELOOP for a symlink, ENXIO for a FIFO opened for writing
                raise NotRegular(f"{parts[-1]} is not a regular file ({exc.strerror})") from None
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise NotRegular(f"{parts[-1]} is not a regular file", is_dir=stat.S_ISDIR(st.st_mode))
        return fd

    def kind(self, path: str) -> str:
        """'file', 'dir', 'missing' or 'other', without following symlinks."""
        parts = self.relative(path)
        if not parts:
            return "dir"
        try:
            with self._parent_fd(parts) as dfd:
                st = os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False)
        except (NotFound, FileNotFoundError):
            return "missing"
        except NotRegular:
            return "other"
        if stat.S_ISREG(st.st_mode):
            return "file"
        return "dir" if stat.S_ISDIR(st.st_mode) else "other"

    def read(self, path: str, budget: ReadBudget, offset: int = 0) -> ReadResult:
        """Up to `budget.max_scan_bytes` from byte `offset` on."""
        fd = self._open_file(self.relative(path), os.O_RDONLY)
        try:
            st = os.fstat(fd)
            os.lseek(fd, offset, os.SEEK_SET)
            data = read_fd(fd, max(st.st_size - offset, 0), budget.max_scan_bytes)  # one byte over: a cut
        finally:
            os.close(fd)
        truncated = len(data) > budget.max_scan_bytes
        return ReadResult(
            data=data[: budget.max_scan_bytes], size=st.st_size, truncated=truncated, mtime_ns=st.st_mtime_ns
        )

    def mtime_ns(self, path: str) -> int:
        """The modification time of a regular file, opened the confined way, without reading it."""
        fd = self._open_file(self.relative(path), os.O_RDONLY)
        try:
            return os.fstat(fd).st_mtime_ns
        finally:
            os.close(fd)

    def write(self, path: str, data: bytes) -> None:
        """Create or truncate a regular file (parents are created, as the agents' write tools do)."""
        fd = self._open_file(self.relative(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, create=True)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)

    def remove(self, path: str) -> None:
        """Delete a regular file (never a directory, never through a symlink)."""
        parts = self.relative(path)
        os.close(self._open_file(parts, os.O_RDONLY))  # refuses directories, symlinks and special files
        with self._parent_fd(parts) as dfd:
            os.unlink(parts[-1], dir_fd=dfd)


MAX_INPUT_BYTES = 512 * 1024 * 1024
"""The largest native file read (a trajectory, an event file, an export)."""


def _open_input(path: Path | str, max_bytes: int) -> tuple[int, int]:
    """The descriptor and size of a user's input file: a regular file of at most `max_bytes`, else refused
    before any read (a FIFO would block, a device never ends). O_NONBLOCK (a FIFO's open would block) stays
    set: a regular file's reads ignore it, and a conversation opens thousands (two fcntl calls each)."""
    # a name in a folder held for a foreign manifest (foreign.hold) is someone else's: no link at its end
    nofollow = os.O_NOFOLLOW if pinned_name(path) else 0
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | nofollow)
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{path} is {kind_of(st.st_mode)}, not a trajectory file")
        if st.st_size > max_bytes:
            raise BadInput(f"{path} is {st.st_size} bytes, more than the {max_bytes}-byte limit")
    except BaseException:
        os.close(fd)
        raise
    return fd, st.st_size


@contextlib.contextmanager
def open_input(path: Path, max_bytes: int = MAX_INPUT_BYTES) -> Iterator[BinaryIO]:
    """A user's input file opened for reading (see `_open_input`). Links the user gave are followed: the
    input is theirs, not the sandbox's."""
    fd, _ = _open_input(path, max_bytes)
    try:
        fh = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with fh:
        yield fh


def read_input(path: Path | str, max_bytes: int = MAX_INPUT_BYTES) -> bytes:
    """The whole of a user's input file (see `open_input`), reading at most `max_bytes` even if it grows."""
    fd, size = _open_input(path, max_bytes)
    return read_whole(fd, size, max_bytes, f"{path} grew past the {max_bytes}-byte limit while it was read")


_PRIVATE: dict[str, Path] = {}
_PRIVATE_DIR: list[Path] = []


def private_copy(name: str, data: bytes) -> Path:
    """`data` in a private file named `name`, made once for the same name and bytes in this process and
    removed when it ends: what the replay reads in place of a user's file it derived (one session of a
    file that holds several, a Windows session's paths mapped)."""
    digest = sha256_hex(data)
    key = f"{digest}/{name}"
    if key not in _PRIVATE:
        if not _PRIVATE_DIR:
            _PRIVATE_DIR.append(Path(tempfile.mkdtemp(prefix="replayer-derived-")))
            atexit.register(shutil.rmtree, _PRIVATE_DIR[0], True)
        folder = _PRIVATE_DIR[0] / digest[:16]
        folder.mkdir(exist_ok=True)
        (folder / name).write_bytes(data)
        _PRIVATE[key] = folder / name
    return _PRIVATE[key]


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def sha256_soon(data: bytes) -> Callable[[], str]:
    """`sha256_hex(data)` taken on another thread while the caller parses `data` (hashlib lets go of the
    GIL for a buffer this size, so the two use two cores); the call returned waits for it."""
    if len(data) < _HASH_AHEAD_BYTES:
        digest = sha256_hex(data)
        return lambda: digest
    found: list[str | BaseException] = []

    def take() -> None:
        try:
            found.append(sha256_hex(data))
        except BaseException as exc:  # MemoryError: raised where the digest is read
            found.append(exc)

    thread = threading.Thread(target=take, name="sha256", daemon=True)
    thread.start()

    def result() -> str:
        thread.join()
        if isinstance(found[0], BaseException):
            raise found[0]
        return found[0]

    return result


_HASH_AHEAD_BYTES = 1 << 20
"""Below this a thread costs more than the hash it takes off the parse."""


def input_sha256(*paths: Path | None) -> str:
    """One digest of a user's input files read in turn (streamed, each within `open_input`'s limit);
    None entries are skipped."""
    digest = hashlib.sha256()
    for path in paths:
        if path is None:
            continue
        try:
            with open_input(path) as fh:
                while chunk := fh.read(1 << 20):
                    digest.update(chunk)
        except OSError as exc:
            raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    return digest.hexdigest()


def write_bytes_atomic(path: Path, data: bytes | Iterable[bytes]) -> None:
    """Write a file by temp + rename in the same directory; `data` may come in chunks."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as fh:
            for chunk in (data,) if isinstance(data, bytes) else data:
                fh.write(chunk)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def check_output(out: Path, inputs: Iterable[Path | None]) -> None:
    """Refuse an output path equal to, inside or containing an input: with --force the output would
    replace (delete) it, and without it the outputs would mix with the inputs."""
    final = out.resolve()
    for given in inputs:
        if given is None:
            continue
        source = given.resolve()
        if final == source or final in source.parents:
            raise OutputError(f"the output {out} would replace the input {given} (choose another --out)")
        if source in final.parents and source.is_dir():
            raise OutputError(f"the output {out} is inside the input {given} (choose another --out)")


class OutputDir:
    """An output directory built in a sibling temp directory and renamed into place when complete."""

    def __init__(self, final: Path, force: bool = False, inputs: Iterable[Path | None] = ()):
        self.final = final.absolute()
        if len(self.final.name.encode()) > 255:
            raise OutputError(f"the output name is {len(self.final.name.encode())} bytes, more than 255")
        check_output(self.final, inputs)
        if (self.final.exists() or self.final.is_symlink()) and not force:
            raise OutputError(f"output directory {final} exists (use --force to replace it)")
        stem = self.final.name[:64]  # the temp names stay within NAME_MAX whatever the output's name
        try:
            self.final.parent.mkdir(parents=True, exist_ok=True)
            self.tmp = Path(tempfile.mkdtemp(dir=self.final.parent, prefix=f".{stem}.partial-"))
        except OSError as exc:
            raise OutputError(f"cannot create the output directory: {exc.strerror}") from None
        self._old = self.final.with_name(f".{stem}.old-{os.getpid()}")

    def commit(self) -> Path:
        replaced = self.final.exists() or self.final.is_symlink()
        if replaced:
            os.replace(self.final, self._old)
        os.chmod(self.tmp, 0o755)
        os.replace(self.tmp, self.final)
        if replaced:
            remove_entry(self._old)
        return self.final

    def discard(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def remove_entry(path: Path) -> None:
    """Remove a file, a link (not its target) or a directory tree."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


_ALIASES: set[int] = set()
"""The directory descriptors `short_alias` holds open (so that `remove_alias` closes only its own)."""


def short_alias(directory: Path) -> Path:
    """A short path for `directory`, `/proc/self/fd/N` of a descriptor held on it until `remove_alias`:
    AF_UNIX socket paths are limited to 108 bytes. Valid in this process only; nothing is made on disk, so
    a process killed before `remove_alias` leaves nothing behind (a symlink under /tmp did)."""
    fd = os.open(directory, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    _ALIASES.add(fd)
    return Path(f"/proc/self/fd/{fd}")


def remove_alias(alias: Path) -> None:
    fd = int(alias.name)
    if fd in _ALIASES:
        _ALIASES.discard(fd)
        os.close(fd)
