"""Output bounded as a whole: what every boundary of one run (`run -n all`, a batch job's boundaries), or
every run of a compare, writes to its outputs together, and the files they share.

Each boundary's result directory holds its own copy of the workspace and the agent home; without a bound
on the whole, K boundaries of a 200 MiB workspace write K times 200 MiB, each copy within `disk` on its
own. `OutputBudget` is the run's total (SandboxLimits.output_total): a file is charged before it is
written, and what a boundary wrote besides its copies is charged before the boundary is committed, so a
committed set of boundaries never passes it; the boundary that would is refused (`OverBudget`) and the
run stops there, saying so.

`Earlier` is the same tree in the boundary written before: a file whose bytes did not change since is
shared with it instead of copied, as a reflink where the file system clones (a file of its own: a write
to either leaves the other as it was), else as a hard link made read-only (the mode without its write
bits, on both names), so that a write through one result does not change the other.

The files a boundary writes whole share their common beginning with the earlier boundary's where the file
system dedupes (replayer/floor/dedupe.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Callable
from pathlib import Path

from replayer.floor.errors import OutputError

FICLONE = 0x40049409
SHARED_CHUNK = 64 << 20
"""How much a run draws from a batch's total at a time."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20
_WRITE_BITS = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH


class OverBudget(OutputError):
    """The outputs would pass the run's total output budget: this boundary and the ones after it are not
    written."""


def _record(used: int, total: int) -> bytes:
    """`USED TOTAL` of one fixed length, so that an update is one write over the last, never a truncation
    first: a worker SIGKILLed between a truncation and its write left an empty file, which reads as a total
    used up, and every later job of the batch failed with kind `output`."""
    return f"{used:020d} {total:020d}\n".encode()


class SharedTotal:
    """A total that several processes draw on (a batch's workers, each a run of its own; a compare and its
    runs' processes): a file of the batch's (the compare's) own holding `USED TOTAL`, changed under an
    exclusive lock. A worker that dies keeps what it drew: counted as written. `whose` and `see` name the
    total and the option that sets it in a refusal."""

    def __init__(self, path: Path, whose: str = "the batch's", see: str = "replayer batch --max-output"):
        self.path = path
        self.whose = whose
        self.see = see

    @classmethod
    def create(
        cls, path: Path, total: int, whose: str = "the batch's", see: str = "replayer batch --max-output"
    ) -> SharedTotal:
        path.write_bytes(_record(0, total))
        return cls(path, whose, see)

    def _locked(self, change: Callable[[int, int], int | None]) -> tuple[int, int] | None:
        """Under the lock: (used, total) as found, `used` then replaced by what `change` returns (None: kept);
        None when the file is not what `create` wrote (nothing is left)."""
        fd = os.open(self.path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                used, total = (int(n) for n in os.pread(fd, 64, 0).split())
            except ValueError:
                return None
            new = change(used, total)
            if new is not None:  # one write of the same length: a process killed here leaves old or new
                os.pwrite(fd, _record(new, total), 0)
            return used, total
        finally:
            os.close(fd)

    def draw(self, nbytes: int, force: bool = False) -> bool:
        """Take `nbytes` if they are left (`force`: in any case: what was written already)."""
        found = self._locked(lambda used, total: used + nbytes if force or used + nbytes <= total else None)
        return found is not None and (force or found[0] + nbytes <= found[1])

    def give_back(self, nbytes: int) -> None:
        self._locked(lambda used, _: max(used - nbytes, 0))

    def left(self) -> int:
        found = self._locked(lambda used, total: None)
        return max(found[1] - found[0], 0) if found is not None else 0


class OutputBudget:
    """The bytes a run may still write to its outputs; with `shared`, also within a batch's total, drawn
    from it SHARED_CHUNK at a time (what is not written is given back at `close`)."""

    def __init__(self, total: int, shared: SharedTotal | None = None, after: str = "boundaries"):
        self.total = total
        self.after = after
        """What a refusal says is not written after the refused write (a compare's runs: "runs")."""
        self.used = 0
        self.shared = shared
        self.drawn = 0
        self.refused: OverBudget | None = None
        """Set once a charge was refused: the run writes nothing more."""

    def take(self, nbytes: int, where: str) -> None:
        """Charge `nbytes` about to be written for `where`, or raise OverBudget (nothing charged)."""
        if self.refused is None and self.used + nbytes > self.total:
            self.refused = OverBudget(
                f"{where} would pass the run's total output budget of {self.total} bytes "
                f"({self.used} written); it and the {self.after} after it are not written "
                "(see --limits output=)"
            )
        if self.refused is None and self.shared is not None and self.used + nbytes > self.drawn:
            need = self.used + nbytes - self.drawn
            for amount in (max(need, SHARED_CHUNK), need):
                if self.shared.draw(amount):
                    self.drawn += amount
                    break
            else:
                self.refused = OverBudget(
                    f"{where} would pass {self.shared.whose} total output budget; it and the "
                    f"{self.after} after it are not written (see {self.shared.see})"
                )
        if self.refused is not None:
            raise self.refused
        self.used += max(nbytes, 0)

    def close(self) -> None:
        """Give back to the batch's total what was drawn and not written."""
        if self.shared is not None and self.drawn > self.used:
            self.shared.give_back(self.drawn - self.used)
            self.drawn = self.used


def data_bytes(st: os.stat_result) -> int:
    """A file's data on disk (its holes cost nothing)."""
    return min(st.st_size, st.st_blocks * 512)


def tree_bytes(root: Path) -> int:
    """The data bytes of the regular files under `root` (links not followed)."""
    total = 0
    for folder, _, names in os.walk(root):
        for name in names:
            st = os.lstat(os.path.join(folder, name))
            if stat.S_ISREG(st.st_mode):
                total += data_bytes(st)
    return total


class Earlier:
    """The same tree in the boundary written before this one (None where it has none), walked by directory
    descriptors opened O_NOFOLLOW as the copy walks its source; and the budget the copy charges."""

    def __init__(self, root: Path | None, budget: OutputBudget | None, where: str, hard_links: bool = True):
        self.budget = budget
        self.where = where
        self.hard_links = hard_links
        """False: reflinks only (a tree whose modes something reads on: compare forks from it)."""
        self.fd: int | None = None
        if root is not None:
            with contextlib.suppress(OSError):
                self.fd = os.open(root, _DIR_FLAGS)

    def child(self, name: str) -> Earlier:
        """The subdirectory `name` (one without a counterpart shares nothing); close it after use."""
        sub = Earlier(None, self.budget, self.where, self.hard_links)
        if self.fd is not None:
            with contextlib.suppress(OSError):
                sub.fd = os.open(name, _DIR_FLAGS, dir_fd=self.fd)
        return sub

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> Earlier:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def charge(self, nbytes: int) -> None:
        if self.budget is not None:
            self.budget.take(nbytes, self.where)

    def share(
        self, src: int, st: os.stat_result, name: str, dest_fd: int, set_meta: Callable[[int], None]
    ) -> bool:
        """Make `name` in `dest_fd` the earlier boundary's file of that name, when its bytes are those of
        the open source file `src` (stat `st`): a reflink (its metadata set by `set_meta`), else a hard link
        where the earlier file has the same owner, mode and time. False: nothing shared, nothing made."""
        if self.fd is None:
            return False
        try:
            old = os.open(name, _FILE_FLAGS, dir_fd=self.fd)
        except OSError:
            return False
        try:
            ost = os.fstat(old)
            if not stat.S_ISREG(ost.st_mode) or ost.st_size != st.st_size or not _same_bytes(src, old, st):
                return False
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name, dir_fd=dest_fd)
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            out = os.open(name, flags, 0o600, dir_fd=dest_fd)
            try:
                fcntl.ioctl(out, FICLONE, old)
            except OSError:  # no reflinks on this file system (or across two)
                os.close(out)
                os.unlink(name, dir_fd=dest_fd)
            else:
                try:
                    set_meta(out)
                finally:
                    os.close(out)
                return True
            return self.hard_links and self._link(old, ost, st, name, dest_fd)
        finally:
            os.close(old)

    def _link(self, old: int, ost: os.stat_result, st: os.stat_result, name: str, dest_fd: int) -> bool:
        same = (ost.st_uid, ost.st_gid, ost.st_mtime_ns) == (st.st_uid, st.st_gid, st.st_mtime_ns)
        mode = stat.S_IMODE(st.st_mode) & ~(stat.S_ISUID | stat.S_ISGID)
        if not same or stat.S_IMODE(ost.st_mode) & ~_WRITE_BITS != mode & ~_WRITE_BITS:
            return False
        assert self.fd is not None
        try:
            os.link(name, name, src_dir_fd=self.fd, dst_dir_fd=dest_fd, follow_symlinks=False)
        except OSError:  # another file system, or the link count is at its maximum
            return False
        os.fchmod(old, mode & ~_WRITE_BITS)  # both names: one inode
        return True


def _same_bytes(one: int, other: int, st: os.stat_result) -> bool:
    """Whether two open files hold the same bytes up to `st`'s size (read, never trusted by time)."""
    pos = 0
    while pos < st.st_size:
        size = min(_CHUNK, st.st_size - pos)
        a, b = os.pread(one, size, pos), os.pread(other, size, pos)
        if a != b or not a:
            return False
        pos += len(a)
    return True
