"""Disk quotas for what a sandbox can write: btrfs subvolumes with a qgroup limit.

`replayer setup` (replayer/verbs/setup/docker_up.sh) mounts a btrfs file system (a loop image, quotas enabled) at FS_ROOT and puts the
Docker engine's data root on it. There, a run's state (workspace and agent home) is a subvolume with
its own limit, and so is each container's writable layer (its overlay upper directory, made a limited
subvolume between create and start). Elsewhere (no root, another file system) nothing is limited and
the result says so.

A limited state can be sealed (read-only) and cloned: a clone is a btrfs snapshot, made in constant time
whatever the tree's size, sharing the data until either side writes, with a limit of its own. That is
how compare forks the boundary's workspace and agent home (replayer/pipeline/fork.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from pathlib import Path

from replayer.floor import hostproc
from replayer.floor.owner import orphans, owner
from replayer.sandboxes.btrfs import FS_ROOT, is_btrfs
from replayer.sandboxes.slots import sweep_slots

STATE_ROOT = FS_ROOT / "runs"


def _btrfs(*args: str) -> bool:
    try:
        done = hostproc.run(["btrfs", "-q", *args], capture_output=True, timeout=60)
    except (OSError, hostproc.SubprocessError):
        return False
    return done.returncode == 0


def limited_dir(path: Path, limit_bytes: int) -> bool:
    """Make `path` (absent, or an empty directory) a directory whose contents are limited to
    `limit_bytes`; False (and a plain directory) where the file system cannot enforce it."""
    if not is_btrfs(path.parent):
        path.mkdir(exist_ok=True)
        return False
    with contextlib.suppress(FileNotFoundError):
        path.rmdir()
    if not _btrfs("subvolume", "create", str(path)):
        path.mkdir(exist_ok=True)
        return False
    return _btrfs("qgroup", "limit", str(limit_bytes), str(path))


def limit_layer(upper: Path, limit_bytes: int) -> bool:
    """Give a created, not yet started container's overlay layer (`upper` is its UpperDir) a quota.

    Overlay needs its upper and work directories on one file system, and a btrfs subvolume counts as
    another: the whole layer directory (diff/, work/, link, lower, all written by the engine at create
    time) is moved into a limited subvolume of the same name."""
    layer = upper.parent
    if upper.name != "diff" or not is_btrfs(layer):
        return False
    fresh, old = layer.with_name(layer.name + ".quota"), layer.with_name(layer.name + ".old")
    if not limited_dir(fresh, limit_bytes):
        shutil.rmtree(fresh, ignore_errors=True)
        return False
    copied = hostproc.run(["cp", "-a", "--", f"{layer}/.", str(fresh)], capture_output=True, timeout=60)
    if copied.returncode != 0:
        shutil.rmtree(fresh, ignore_errors=True)
        return False
    os.rename(layer, old)
    os.rename(fresh, layer)
    shutil.rmtree(old, ignore_errors=True)
    return True


_SUBVOLUME_INODE = 256
"""The inode number of every btrfs subvolume's root directory (BTRFS_FIRST_FREE_OBJECTID)."""


def nested_subvolumes(root: Path) -> list[Path]:
    """The subvolumes under `root` (not `root` itself), parents before children: a walk by lstat that
    follows no link and skips what it cannot read (a path past PATH_MAX)."""
    found: list[Path] = []
    pending = [root]
    while pending:
        folder = pending.pop()
        try:
            with os.scandir(folder) as entries:
                dirs = [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
        except OSError:
            continue
        for path in dirs:
            try:
                if path.lstat().st_ino == _SUBVOLUME_INODE:
                    found.append(path)
            except OSError:
                continue
            pending.append(path)
    return sorted(found, key=lambda p: len(p.parts))


def delete_subvolume(path: Path) -> bool:
    """Delete subvolume `path` with every subvolume a sandbox nested in it, read-only ones too (each
    made writable, outermost first, then deleted, deepest first); False where btrfs refuses."""
    nested = nested_subvolumes(path)
    for sub in [path, *nested]:
        _btrfs("property", "set", "-ts", str(sub), "ro", "false")
    for sub in reversed(nested):
        _btrfs("subvolume", "delete", str(sub))
    return _btrfs("subvolume", "delete", str(path))


_HEADROOM = 1 << 20
"""What a limited subvolume may still have free and count as used up: a write refused with `Disk quota
exceeded` leaves less than the write asked for (dd's 1 MiB blocks, a tool's buffer)."""


def used_up(path: Path) -> bool:
    """Whether limited subvolume `path` has (within _HEADROOM) used its qgroup limit up; False when it
    has no limit or btrfs does not answer. Flushed first: qgroups count what a transaction committed."""
    _btrfs("filesystem", "sync", str(path))
    try:
        out = hostproc.run(
            ["btrfs", "qgroup", "show", "-rf", "--raw", str(path)], capture_output=True, text=True, timeout=60
        ).stdout
    except (OSError, hostproc.SubprocessError):
        return False
    for line in out.splitlines():
        fields = line.split()  # qgroupid, referenced, exclusive, max referenced, path
        if len(fields) >= 4 and fields[0].startswith("0/") and fields[1].isdigit() and fields[3].isdigit():
            return int(fields[1]) + _HEADROOM >= int(fields[3])
    return False


def sweep_states() -> list[str]:
    """Remove the state directories whose owning process on this host is gone (a kill -9), after the
    slots that still show them (sandboxes/slots.py)."""
    sweep_slots()
    removed: list[str] = []
    for path in orphans(STATE_ROOT):
        StateDir(path, True).remove()
        removed.append(path.name)
    return removed


def _fresh_path() -> Path:
    """A new state's path, named after its owning process (what `sweep_states` reads)."""
    return STATE_ROOT / f"{owner().replace(':', '_')}_{uuid.uuid4().hex[:12]}"


class StateDir:
    """Where a run's container-writable state lives while the run lasts: a limited subvolume under
    STATE_ROOT when that exists, else a private directory beside the output (not limited)."""

    def __init__(self, path: Path, limited: bool):
        self.path = path
        self.limited = limited

    @classmethod
    def create(cls, limit_bytes: int, fallback_parent: Path) -> StateDir:
        if STATE_ROOT.is_dir() and is_btrfs(STATE_ROOT):
            sweep_states()
            path = _fresh_path()
            if limited_dir(path, limit_bytes):
                return cls(path, True)
            shutil.rmtree(path, ignore_errors=True)
        fallback_parent.mkdir(parents=True, exist_ok=True)
        path = fallback_parent / f".state-{uuid.uuid4().hex[:12]}"
        path.mkdir(mode=0o700)
        return cls(path, False)

    def seal(self) -> bool:
        """Make a limited state read-only (nothing writes to what clones start from) and write it out (the
        first clone would flush it otherwise); False elsewhere."""
        return (
            self.limited
            and _btrfs("property", "set", "-ts", str(self.path), "ro", "true")
            and _btrfs("filesystem", "sync", str(self.path))
        )

    def clone(self, limit_bytes: int) -> StateDir | None:
        """A writable copy of this limited state, limited to `limit_bytes` like a created one (the data it
        shares with this state counts, as a copy's would); None when this state is not limited or the
        file system refuses. The copy is exact: clone only a state whose content the host wrote."""
        if not self.limited:
            return None
        path = _fresh_path()
        if not _btrfs("subvolume", "snapshot", str(self.path), str(path)):
            return None
        clone = StateDir(path, True)
        if not _btrfs("qgroup", "limit", str(limit_bytes), str(path)):
            clone.remove()
            return None
        return clone

    def used_up(self) -> bool:
        """Whether this limited state used its disk quota up (False when it is not limited)."""
        return self.limited and used_up(self.path)

    def remove(self) -> None:
        if self.limited and _btrfs("subvolume", "delete", str(self.path)):
            return  # whole, sealed or not, in constant time (fails when a subvolume is nested in it)
        if self.limited and delete_subvolume(self.path):
            return
        shutil.rmtree(self.path, ignore_errors=True)  # an empty subvolume goes with rmdir, as root
        if self.path.exists() and not delete_subvolume(self.path):
            shutil.rmtree(self.path, ignore_errors=True)  # a plain folder, once what it nested is gone
