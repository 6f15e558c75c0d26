"""The semantic oracle of a cassette: what a continuation produced, in a form two runs can be compared in.

An outcome is {"agent_status", "workspace_changes", "session"}: the files the continuation changed in the
workspace (path -> SHA-256, null when removed; git's own metadata left out, its index records file
times; a file with holes hashed by its data segments, `sparse:...`; the read bounded, `workspace_cut` saying
why when a bound cut it), and the continued native session with ids alpha-renamed, times and the nonce normalized
(bridges/playback.py, `Normalizer`) as one document (an id in a file name is the id inside the file), a JSON
or JSONL file as JSON, a file of another kind by its SHA-256. A replay is verified when its outcome equals
the recording's.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import stat
import time
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from replayer.bridges.difference import Mismatch, first_difference
from replayer.bridges.playback import normalized
from replayer.floor.limits import SandboxLimits
from replayer.floor.redact import redact
from replayer.floor.safecopy import Entry, data_extents, shown, walk

_SKIPPED_DIRS = frozenset({".git"})
STATE_S = 300.0
"""The longest the host spends reading one workspace state (a bound that cuts is recorded)."""
_CHUNK = 1 << 20


class WorkspaceState(NamedTuple):
    """Every entry under a workspace by relative path (as the OS gives it; `outcome` escapes): a regular
    file's digest, a link's target (`link:...`), another kind's name; and why the read stopped early
    (None: it read everything)."""

    entries: dict[str, str]
    cut: str | None


class _Cut(Exception):
    pass


class _Budget:
    def __init__(self, limits: SandboxLimits, seconds: float):
        self.files, self.bytes, self.limits = 0, 0, limits
        self.deadline = time.monotonic() + seconds
        self.seconds = seconds

    def take(self, files: int, data: int) -> None:
        self.files += files
        self.bytes += data
        if self.files > self.limits.copy_files:
            raise _Cut(f"more than {self.limits.copy_files} entries (see --limits files=)")
        if self.bytes > self.limits.disk_bytes:
            raise _Cut(f"more than {self.limits.disk_bytes} bytes of data (see --limits disk=)")
        if time.monotonic() > self.deadline:
            raise _Cut(f"longer than {self.seconds:g} s")


def workspace_state(
    root: Path, limits: SandboxLimits | None = None, seconds: float = STATE_S
) -> WorkspaceState:
    """The state of the tree at `root`, which the sandbox wrote (and may still be writing): read by the
    descriptor-based walk of the copies, which follows no link and never leaves the tree; a regular
    file's holes are skipped, not read; bounded in entries and data bytes (`limits`) and in time."""
    budget = _Budget(limits or SandboxLimits(), seconds)
    state: dict[str, str] = {}
    try:
        for entry in walk(root, skip_top=_SKIPPED_DIRS):
            budget.take(1, 0)  # a directory too: a tree of empty ones costs time
            if not entry.entered:
                state[entry.path] = _entry_state(entry, budget)
    except _Cut as cut:
        return WorkspaceState(state, f"the workspace state was read only in part: {cut}")
    return WorkspaceState(state, None)


def is_file(value: str) -> bool:
    """Whether a workspace state's value is a regular file's digest."""
    return not value.startswith(("link:", "special", "unreadable", "too_deep"))


def _entry_state(entry: Entry, budget: _Budget) -> str:
    mode = entry.stat.st_mode
    if stat.S_ISLNK(mode):
        try:
            return "link:" + shown(os.readlink(entry.name, dir_fd=entry.dir_fd))
        except OSError:
            return "unreadable"
    if stat.S_ISDIR(mode):
        return "too_deep"  # not entered: past the depth bound
    if stat.S_ISREG(mode):
        return _file_digest(entry, budget)
    return "special"


def workspace_changes(before: dict[str, str], after: dict[str, str]) -> dict[str, str | None]:
    paths = sorted(before.keys() | after.keys())
    return {p: after.get(p) for p in paths if before.get(p) != after.get(p)}


def cut_of(before: WorkspaceState, after: WorkspaceState) -> str | None:
    """Why the workspace changes are partial (either read was cut), or None."""
    return before.cut or after.cut


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


def outcome(
    agent_status: str, changes: dict[str, str | None], session: dict[str, Any], cut: str | None = None
) -> dict[str, Any]:
    """`cut`: why the workspace was read only in part; then it is part of the outcome (compared like the
    rest: a partial read verifies only against the same partial read)."""
    shown_changes = {shown(path): value for path, value in changes.items()}  # JSON holds no raw bytes
    found = {"agent_status": agent_status, "workspace_changes": shown_changes, "session": session}
    return found if cut is None else {**found, "workspace_cut": cut}


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


def _file_digest(entry: Entry, budget: _Budget) -> str:
    """A file's SHA-256 (hex). A file with holes: "sparse:" and the SHA-256 of its size, then each data
    segment's offset, length and bytes, so a hole costs its length, not a read. Opened without following
    a link or blocking on a FIFO swapped in since the walk saw a file."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(entry.name, flags, dir_fd=entry.dir_fd)
    except OSError:
        return "unreadable"
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "special"
        extents = data_extents(fd, st.st_size)
        first = next(extents, None)
        digest = hashlib.sha256()
        sparse = st.st_size > 0 and first != (0, st.st_size)
        if sparse:
            digest.update(f"{st.st_size}\n".encode())
        for start, end in itertools.chain([first] if first else [], extents):
            if sparse:
                digest.update(f"{start} {end - start}\n".encode())
            while start < end:
                chunk = os.pread(fh.fileno(), min(_CHUNK, end - start), start)
                if not chunk:
                    break  # shrank while we read
                budget.take(0, len(chunk))
                digest.update(chunk)
                start += len(chunk)
        return ("sparse:" if sparse else "") + digest.hexdigest()
