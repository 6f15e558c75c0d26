"""Blocks shared between two boundaries' outputs where the file system dedupes (btrfs, XFS).

The files a boundary writes whole that hold every step so far (its rebuilt session, `reruns.json`,
`expected_prefix.json`) begin with the earlier boundary's bytes: the kernel checks that the ranges hold the
same bytes (FIDEDUPERANGE) and shares their blocks copy-on-write, so K boundaries of a long session take
space linear in its steps, not quadratic. Elsewhere each boundary's file is its own (`--limits output=`
bounds them)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import struct
from pathlib import Path

FIDEDUPERANGE = 0xC0189436
_DEDUPE_MAX = 16 << 20
"""The most one FIDEDUPERANGE call takes (btrfs's bound)."""
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CHUNK = 1 << 20


def share_prefixes(earlier: Path | None, tmp: Path, skip: tuple[str, ...] = ()) -> int:
    """Where the file system dedupes: the block-aligned bytes each file under `tmp` (but the folders `skip`)
    has in common, from its start, with the file of the same name under `earlier`, shared with it; the
    bytes shared (0 elsewhere)."""
    if earlier is None:
        return 0
    shared = 0
    for folder, dirs, names in os.walk(tmp):
        dirs[:] = [d for d in dirs if str((Path(folder) / d).relative_to(tmp)) not in skip]
        for name in names:
            path = Path(folder) / name
            try:
                shared += _dedupe(earlier / path.relative_to(tmp), path)
            except _NoDedupe:
                return shared
    return shared


class _NoDedupe(Exception):
    """The file system does not dedupe."""


def _dedupe(old_path: Path, new_path: Path) -> int:
    with contextlib.ExitStack() as stack:
        try:
            old = os.open(old_path, _FILE_FLAGS)
            stack.callback(os.close, old)
            new = os.open(new_path, _FILE_FLAGS)
            stack.callback(os.close, new)
        except OSError:  # no file of that name in the earlier boundary
            return 0
        ost, nst = os.fstat(old), os.fstat(new)
        if not (stat.S_ISREG(ost.st_mode) and stat.S_ISREG(nst.st_mode)) or ost.st_ino == nst.st_ino:
            return 0
        block = max(nst.st_blksize, 4096)
        length = _common_prefix(old, new, min(ost.st_size, nst.st_size)) // block * block
        done = 0
        while done < length:
            size = min(_DEDUPE_MAX, length - done)
            arg = bytearray(struct.pack("=QQHHIqQQiI", done, size, 1, 0, 0, new, done, 0, 0, 0))
            try:
                fcntl.ioctl(old, FIDEDUPERANGE, arg)
            except OSError as exc:
                raise _NoDedupe from exc
            deduped, status = struct.unpack_from("=Qi", arg, 40)
            if status != 0 or deduped == 0:  # the kernel found other bytes there
                break
            done += deduped
        return done


def _common_prefix(one: int, other: int, size: int) -> int:
    """How many bytes the two open files have in common from their start (up to `size`)."""
    pos = 0
    while pos < size:
        a, b = os.pread(one, min(_CHUNK, size - pos), pos), os.pread(other, min(_CHUNK, size - pos), pos)
        if a != b or not a:
            same = min(len(a), len(b))
            return pos + next((i for i in range(same) if a[i] != b[i]), same)
        pos += len(a)
    return pos
