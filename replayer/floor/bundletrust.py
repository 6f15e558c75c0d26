"""Whether a bundle folder is the code its installation left: owned by root or this user and writable by
nobody else (the folder, its parents, everything in it), and, before anything from it runs on the host,
every file as the digest manifest written at installation says. Links are never followed. docs/reliability.md,
"Trust model"."""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from replayer.floor.io import write_bytes_atomic

MANIFEST = ".manifest.json"
"""In a bundle folder: the digest of every file in it, written when it was installed."""
STAMP = ".verified.json"
"""In a bundle folder: the identity, size and change times of each file when it last matched the manifest,
so that a later process hashes only what changed since (as git's index does). A file changed since has a
new change time, which no one can set back; whoever could write the stamp could write the manifest too."""
MAX_MANIFEST_BYTES = 64 << 20
_VERIFIED: dict[tuple[str, int, int, int, int, int], str] = {}
"""This process's digests of files it hashed, keyed by (path, device, inode, size, mtime, ctime): a file
whose identity, size and change time are unchanged has the same content (ctime cannot be set back)."""


class FileDigest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    size: int
    sha256: str


class Manifest(BaseModel):
    """Every entry of a bundle folder but the manifest and the `.installed` marker (`unlisted`)."""

    model_config = ConfigDict(extra="forbid")
    format: int = 1
    files: dict[str, FileDigest]
    links: dict[str, str]
    """A link's target, as written (a virtual environment's bin/python names the host's interpreter)."""
    dirs: list[str]


def unsafe_owner(path: Path) -> str | None:
    """Why `path` and its parents may hold code someone else put there (None: they may not): each one owned
    by root or this user and not writable by group or others (a root-owned sticky folder such as /tmp is
    fine); a link is judged by its owner, then its target's folders too."""
    real = Path(os.path.realpath(path))
    for each in dict.fromkeys([path, *path.parents, real, *real.parents]):
        try:
            st = os.lstat(each)
        except OSError as exc:
            return f"{each}: {exc.strerror}"
        sticky = st.st_uid == 0 and st.st_mode & stat.S_ISVTX
        problem = _unsafe(st, allow_shared=each != path and each != real and bool(sticky))
        if problem:
            return f"{each} {problem}"
    return None


def build(root: Path) -> Manifest:
    """The manifest of the bundle at `root`; ValueError naming the first entry someone else could change
    (owned by another user, writable by group or others) or that a bundle cannot hold (a device, a FIFO)."""
    files: dict[str, FileDigest] = {}
    links: dict[str, str] = {}
    dirs: list[str] = []
    for name, st in _entries(root):
        problem = _unsafe(st)
        if problem:
            raise ValueError(f"{name} {problem}")
        if stat.S_ISDIR(st.st_mode):
            dirs.append(name)
        elif stat.S_ISLNK(st.st_mode):
            links[name] = os.readlink(root / name)
        elif stat.S_ISREG(st.st_mode):
            files[name] = FileDigest(size=st.st_size, sha256=_digest(root / name, st))
        else:
            raise ValueError(f"{name} is not a file, a folder or a link")
    return Manifest(files=files, links=links, dirs=sorted(dirs))


def foreign(root: Path) -> str | None:
    """Why the bundle at `root`, installed without a manifest, may hold what someone else put there (None:
    it may not): an entry owned by another user, or writable by group or others and not empty (uv leaves
    its empty `.lock` writable by all)."""
    for name, st in _entries(root):
        problem = _unsafe(st)
        if problem and not (stat.S_ISREG(st.st_mode) and st.st_size == 0 and st.st_uid in (0, os.geteuid())):
            return f"{name} {problem}"
    return None


def write(root: Path, manifest: Manifest) -> None:
    from replayer.floor.io import write_bytes_atomic

    write_bytes_atomic(root / MANIFEST, orjson.dumps(manifest.model_dump(), option=orjson.OPT_SORT_KEYS))
    os.chmod(root / MANIFEST, 0o644)  # read by every user the bundle serves, as the bundle is


def has_manifest(root: Path) -> bool:
    return os.path.lexists(root / MANIFEST)


def mismatch(root: Path) -> str | None:
    """How the bundle at `root` differs from its manifest (None: it does not): the first entry added,
    missing, changed, or that someone else could change now."""
    try:
        fd = os.open(root / MANIFEST, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return f"{MANIFEST} is not a regular file"
            raw = fh.read(MAX_MANIFEST_BYTES + 1)
            manifest = Manifest.model_validate(orjson.loads(raw))
    except (OSError, orjson.JSONDecodeError, ValidationError) as exc:
        return f"its digest manifest {MANIFEST} cannot be read ({type(exc).__name__})"
    seen, identities = 0, {}
    digest = hashlib.sha256(raw).hexdigest()
    stamped = _stamp(root, digest)
    try:
        for name, st in _entries(root):
            seen += 1
            identities[name] = _identity(st)
            listed = stamped.get(name) == identities[name] or _as_listed(root, name, st, manifest)
            problem = _unsafe(st) or (None if listed else "is not what was installed")
            if problem:
                return f"{name} {problem}"
    except (OSError, ValueError) as exc:
        return f"it cannot be read whole ({exc})"
    if seen != len(manifest.files) + len(manifest.links) + len(manifest.dirs):
        return "files that were installed are missing"
    if identities != stamped:
        _write_stamp(root, digest, identities)
    return None


def _identity(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_mode, st.st_uid, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _stamp(root: Path, manifest_digest: str) -> dict[str, list[int]]:
    """The identities the stamp holds, when it is this manifest's and is a regular file no one else can
    change ({} otherwise: every file is hashed)."""
    try:
        fd = os.open(root / STAMP, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or _unsafe(st):
                return {}
            data = orjson.loads(fh.read(MAX_MANIFEST_BYTES + 1))
    except (OSError, orjson.JSONDecodeError):
        return {}
    if not isinstance(data, dict) or data.get("manifest") != manifest_digest:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def _write_stamp(root: Path, manifest_digest: str, identities: dict[str, list[int]]) -> None:
    """Best effort: a bundle folder this process may not write is hashed again by the next one."""
    text = orjson.dumps({"manifest": manifest_digest, "files": identities})
    with contextlib.suppress(OSError):
        write_bytes_atomic(root / STAMP, text)


def _as_listed(root: Path, name: str, st: os.stat_result, manifest: Manifest) -> bool:
    if stat.S_ISDIR(st.st_mode):
        return name in manifest.dirs
    if stat.S_ISLNK(st.st_mode):
        return manifest.links.get(name) == os.readlink(root / name)
    want = manifest.files.get(name)
    if not stat.S_ISREG(st.st_mode) or want is None or st.st_size != want.size:
        return False
    return _digest(root / name, st) == want.sha256


def unlisted(name: str) -> bool:
    """An entry of the bundle folder the manifest does not cover: itself and the completion marker."""
    return name in (MANIFEST, STAMP, ".installed")


def _entries(root: Path) -> Iterator[tuple[str, os.stat_result]]:
    """Every entry under `root` (its path relative to it, its lstat), links not followed, sorted."""
    stack = [""]
    while stack:
        rel = stack.pop()
        with os.scandir(root / rel if rel else root) as found:
            entries = sorted(found, key=lambda e: e.name)
        for entry in entries:
            name = f"{rel}/{entry.name}" if rel else entry.name
            if not rel and unlisted(name):
                continue
            st = entry.stat(follow_symlinks=False)
            yield name, st
            if stat.S_ISDIR(st.st_mode):
                stack.append(name)


def _unsafe(st: os.stat_result, allow_shared: bool = False) -> str | None:
    if st.st_uid not in (0, os.geteuid()):
        return f"is owned by another user (uid {st.st_uid})"
    if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022 and not allow_shared:
        return "is writable by group or others"
    return None


def _digest(path: Path, st: os.stat_result) -> str:
    key = (str(path), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    known = _VERIFIED.get(key)
    if known is not None:
        return known
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as fh:
        now = os.fstat(fd)
        if (now.st_dev, now.st_ino, now.st_ctime_ns) != (st.st_dev, st.st_ino, st.st_ctime_ns):
            raise ValueError(f"{path} changed while it was read")
        digest = hashlib.file_digest(fh, "sha256").hexdigest()
    _VERIFIED[key] = digest
    return digest
