"""Trust pinned to a file, as direnv pins it: a file the user trusted (`replayer trust`, which records its
content's sha256 in the user's own settings file) is honoured only while
- it is a regular file, read without following a link (a link is refused, not followed);
- it and every folder above it are owned by root or the user and writable by nobody else (a root-owned
  sticky folder such as /tmp is fine: there only an entry's owner may rename or remove it);
- its content is the one trusted: a changed file (an edit, a `git pull`) is asked about again.
docs/cli.md, "Project files"; docs/reliability.md, "Trust model"."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from replayer.floor.bundletrust import unsafe_owner
from replayer.floor.errors import BadInput, SettingsError
from replayer.floor.foreign import Folder
from replayer.floor.io import sha256_hex

_KINDS = {"link": "a link", "missing": "missing", "dir": "a directory", "file": "unreadable or too large"}


def key(path: Path) -> str:
    """The name a pin is kept under: the file's folder with its links resolved, then the file's own name
    (never resolved: a link is refused, not followed)."""
    return str(Path(os.path.realpath(path.parent)) / path.name)


def read(path: Path, max_bytes: int) -> bytes:
    """The bytes of `path`, a regular file of at most `max_bytes` that nobody but root or the user can change
    (nor any folder above it); SettingsError in one line otherwise."""
    real = Path(key(path))
    try:
        with Folder.open(real.parent) as folder:
            found = folder.kind(real.name)
            data = folder.read(real.name, max_bytes) if found == "file" else None
    except BadInput:
        found, data = "file", None
    if data is None:
        what = _KINDS.get(found, "not a regular file")
        raise SettingsError(
            f"{path}: {what}; a trusted file is read only as a regular file of at most {max_bytes} bytes, "
            "never through a link"
        )
    problem = unsafe_owner(real)
    if problem:
        raise SettingsError(f"{path}: {problem}, so someone else could change it; it is not trusted")
    return data


def check(path: Path, data: bytes, pins: Mapping[str, str]) -> None:
    """Refuse `data`, read from `path`, unless it is the content the user trusted."""
    want = pins.get(key(path))
    if want is None:
        raise SettingsError(
            f"{path}: its folder is trusted but not this file's content; run `replayer trust {path}` if it is yours"
        )
    if sha256_hex(data) != want:
        raise SettingsError(
            f"{path}: changed since you trusted it; run `replayer trust {path}` again if the change is yours"
        )


def read_trusted(path: Path, pins: Mapping[str, str], max_bytes: int) -> bytes:
    """`read` then `check`: the bytes of a file the user trusted, as they trusted it."""
    data = read(path, max_bytes)
    check(path, data, pins)
    return data
