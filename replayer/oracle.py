"""The semantic oracle of a cassette: what a continuation produced, in a form two runs can be compared in.

An outcome is {"agent_status", "workspace_changes", "session"}: the files the continuation changed in the
workspace (path -> SHA-256, null when removed; git's own metadata left out, its index records file
times), and the continued native session with ids alpha-renamed, times and the nonce normalized
(bridges/cassette.py, `Normalizer`) as one document (an id in a file name is the id inside the file), a JSON
or JSONL file as JSON, a file of another kind by its SHA-256. A replay is verified when its outcome equals
the recording's.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

import orjson

from bridges.cassette import normalized
from bridges.core import Mismatch, first_difference
from replayer.redact import redact

_SKIPPED_DIRS = frozenset({".git"})


def workspace_state(root: Path) -> dict[str, str]:
    """Every entry under root by relative path: a regular file's SHA-256, a link's target, another kind's name.
    Nothing is followed: the sandbox wrote here."""
    state: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS or Path(dirpath) != root)
        for name in sorted(filenames) + [d for d in dirnames if (Path(dirpath) / d).is_symlink()]:
            full = Path(dirpath) / name
            rel = full.relative_to(root).as_posix()
            mode = full.lstat().st_mode
            if stat.S_ISLNK(mode):
                state[rel] = "link:" + os.readlink(full)
            elif stat.S_ISREG(mode):
                state[rel] = _file_sha(full)
            else:
                state[rel] = "special"
    return state


def workspace_changes(before: dict[str, str], after: dict[str, str]) -> dict[str, str | None]:
    paths = sorted(before.keys() | after.keys())
    return {p: after.get(p) for p in paths if before.get(p) != after.get(p)}


def session_state(continued: Path) -> dict[str, Any]:
    """The continued native session files under `continued` by relative path, secrets redacted (normalized
    only when compared: a cassette recorded before a normalization was added still verifies)."""
    state: dict[str, Any] = {}
    if not continued.is_dir():
        return state
    for path in sorted(p for p in continued.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(continued).as_posix()
        data = path.read_bytes()
        document = _document(data)
        if document is None:
            # upper case: the normalizations take lowercase hex for an id, and this is content
            state[rel] = {"sha256": hashlib.sha256(data).hexdigest().upper()}
        else:
            state[rel] = redact(document)[0]
    return state


def outcome(agent_status: str, changes: dict[str, str | None], session: dict[str, Any]) -> dict[str, Any]:
    return {"agent_status": agent_status, "workspace_changes": changes, "session": session}


def verify(recorded: dict[str, Any], replayed: dict[str, Any]) -> Mismatch | None:
    """The first path at which the replayed outcome differs from the recording's, or None (verified)."""
    found = first_difference(_normalized(recorded), _normalized(replayed))
    if found is None:
        return None
    return found.model_copy(
        update={"reason": "the replayed continuation's outcome differs from the recording"}
    )


def _normalized(outcome: dict[str, Any]) -> dict[str, Any]:
    """The session normalized as one document (an id in a file name is the id inside the file); the
    workspace digests never are: content, not an id."""
    return {**outcome, "session": normalized(outcome.get("session") or {})}


def _document(data: bytes) -> Any:
    """A JSON document, a JSONL file as the list of its records, or None for another kind of file."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return [orjson.loads(line) for line in data.splitlines() if line.strip()]
    except orjson.JSONDecodeError:
        return None


def _file_sha(path: Path) -> str:
    """Opened without following a link or blocking on a FIFO swapped in since the walk saw a file."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return "unreadable"
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return "special"
        digest = hashlib.sha256()
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
        return digest.hexdigest()
