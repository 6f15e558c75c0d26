"""Slots: host folders a container is started over before its state exists, the state mounted into them later.

A pre-started fork (replayer/pipeline/fork.py) binds each of its writable run folders (workspace, agent home,
bridge, an adapter's work folder) from an empty folder of its slot, with `rslave` propagation, from
SLOT_ROOT, a bind mount of its own made shared. Once the boundary state is cloned, a bind mount of each
state folder onto its slot folder propagates into the running container at the same path: the container
is ready without a start of its own. Propagation goes one way: a mount made inside the container (which
cannot mount anyway: no CAP_SYS_ADMIN) never reaches the host or another run.

A slot's mounts stay on the host until `release` (or, after a kill -9, `sweep_slots`, which `replayer
gc` and every new state run): they are unmounted before the state under them is removed, since btrfs
deletes a subvolume that a bind mount still shows. SLOT_ROOT's own mount stays for the next slots;
`replayer gc` unmounts it when no slot is left (`unmount_root`).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import select
import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from replayer.floor.owner import orphans, owner
from replayer.sandboxes.btrfs import FS_ROOT, is_btrfs

SLOT_ROOT = FS_ROOT / "slots"
CONTROL_MOUNT = "/run/replayer-slot"
_MS_BIND = 4096
_MS_REC = 16384
_MS_SHARED = 1 << 20
_MNT_DETACH = 2
_libc = ctypes.CDLL(None, use_errno=True)


def _mount(src: str | None, target: Path, flags: int) -> None:
    if _libc.mount(src.encode() if src else None, str(target).encode(), None, flags, None) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"mount {src or ''} {target}: {os.strerror(errno)}")


def _unmount(target: Path) -> bool:
    return _libc.umount2(str(target).encode(), _MNT_DETACH) == 0


def _unescape(field: str) -> str:
    """A mountinfo path field (spaces, tabs, newlines and backslashes as octal escapes)."""
    for escape, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(escape, char)
    return field


def mount_points(mountinfo: Path = Path("/proc/self/mountinfo")) -> list[tuple[str, bool]]:
    """(mount point, shared) of every mount in `mountinfo` (a process's, as its root sees them)."""
    points = []
    for line in mountinfo.read_text().splitlines():
        fields = line.split(" ")
        optional = fields[6 : fields.index("-")]
        points.append((_unescape(fields[4]), any(f.startswith("shared:") for f in optional)))
    return points


def mounted_under(folder: Path) -> list[Path]:
    """The host's mount points at or under `folder`, deepest first."""
    prefix = str(folder).rstrip("/") + "/"
    found = {Path(p) for p, _ in mount_points() if p == str(folder) or p.startswith(prefix)}
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """The lock under which SLOT_ROOT is mounted and a slot made in it, or SLOT_ROOT unmounted."""
    with (FS_ROOT / "slots.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _ensure_root() -> bool:
    """SLOT_ROOT a shared bind mount of itself (made once, under `_locked`: two processes making it would
    stack two mounts, the second hiding the first one's slots)."""
    SLOT_ROOT.mkdir(exist_ok=True)
    here = [shared for point, shared in mount_points() if point == str(SLOT_ROOT)]
    try:
        if not here:
            _mount(str(SLOT_ROOT), SLOT_ROOT, _MS_BIND)
        if not here or not here[-1]:
            _mount(None, SLOT_ROOT, _MS_SHARED)
    except OSError:
        return False
    return True


def unmount_root() -> bool:
    """Unmount SLOT_ROOT when no slot is left in it (`replayer gc`, after `sweep_slots`); True when it was.
    Under `_locked`, which a slot is made under from the mount to its folder: none can be made in the
    unmounted folder meanwhile, where the mounts attached later would not reach its container."""
    if os.geteuid() != 0 or str(SLOT_ROOT) not in {p for p, _ in mount_points()}:
        return False
    with _locked():
        if any(SLOT_ROOT.iterdir()):
            return False
        while str(SLOT_ROOT) in {p for p, _ in mount_points()}:
            if not _unmount(SLOT_ROOT):
                return False
    return True


class Slot:
    """One run's slot: folders bound into its container before the run's state exists."""

    def __init__(self, path: Path):
        self.path = path
        self.mounted: list[Path] = []

    @classmethod
    def create(cls) -> Slot | None:
        """A new empty slot, or None where slots cannot be made (not root, no btrfs, mounts refused)."""
        if os.geteuid() != 0 or not FS_ROOT.is_dir() or not is_btrfs(FS_ROOT):
            return None
        try:
            sweep_slots()
            with _locked():
                if not _ensure_root():
                    return None
                path = SLOT_ROOT / f"{owner().replace(':', '_')}_{uuid.uuid4().hex[:12]}"
                path.mkdir(mode=0o700)
        except OSError:
            return None
        return cls(path)

    @property
    def control(self) -> Path:
        """The folder of the two FIFOs between the host and the container's waiter (`tell`), bound
        read-only at CONTROL_MOUNT."""
        return self.path / ".control"

    def make_control(self) -> Path:
        self.control.mkdir()
        for name in ("go", "done"):
            os.mkfifo(self.control / name, 0o600)
        return self.control

    def tell(self, word: str, timeout_s: float) -> str:
        """Write `word` to the container's waiter (which reads CONTROL_MOUNT/go once) and return the line
        it answers on CONTROL_MOUNT/done ('' when none came in time). Both ends are opened read-write:
        no open blocks on a waiter that is not there yet or any more."""
        reply = os.open(self.control / "done", os.O_RDWR | os.O_NONBLOCK)
        go = os.open(self.control / "go", os.O_RDWR | os.O_NONBLOCK)
        try:
            os.write(go, word.encode() + b"\n")
            data = b""
            deadline = time.monotonic() + timeout_s
            while b"\n" not in data and len(data) < 4096 and (left := deadline - time.monotonic()) > 0:
                if select.select([reply], [], [], left)[0]:
                    data += os.read(reply, 4096)
            return data.partition(b"\n")[0].decode(errors="replace") if b"\n" in data else ""
        finally:
            os.close(go)
            os.close(reply)

    def attach(self, state: Path, folders: list[str]) -> None:
        """Bind `state`/F onto this slot's F for each folder F (made in `state` when missing), so that it
        shows in the container started over the slot."""
        for folder in folders:
            (state / folder).mkdir(exist_ok=True)
            self.bind(state / folder, self.path / folder)

    def bind(self, src: Path, folder: Path) -> None:
        """Bind host folder `src` onto `folder`, a folder of this slot (a container started over it sees it)."""
        _mount(str(src), folder, _MS_BIND | _MS_REC)
        self.mounted.append(folder)

    def release(self) -> None:
        """Unmount what the slot shows and remove it (after its container is gone)."""
        release(self.path)


def release(path: Path) -> bool:
    """Unmount everything under slot `path` and remove it; False (the folder kept) when a mount stays:
    removing a folder through a mount would remove the run's state."""
    for point in mounted_under(path):
        _unmount(point)
    if mounted_under(path):
        return False
    shutil.rmtree(path, ignore_errors=True)
    return True


def sweep_slots() -> list[str]:
    """Unmount and remove the slots whose owning process on this host is gone (a kill -9)."""
    removed: list[str] = []
    for path in orphans(SLOT_ROOT):
        with contextlib.suppress(OSError):
            if release(path):
                removed.append(path.name)
    return removed
