"""What the prefix changed in the boundary container's own file system (outside its mounts), as a tar that
a fork pre-started from the same image applies instead of starting from the committed snapshot image.

The changes are the committed image's top layer (docker commit of the boundary container), read on the
host where the engine stores it (overlay2: deleted files are 0/0 character devices, a directory whose
lower contents are hidden carries trusted.overlay.opaque), over the lower layers it stacks on: a path whose
kind changed (a directory replaced by a file, a file or link by a directory) is removed before the tar
makes it anew, as overlay shows only the top one. The layers are immutable, so reading them is exact;
nothing in them is followed (lstat only, no link, no FIFO opened). Whatever a plain tar cannot carry
exactly (a device file, an extended attribute) or what is too large (MAX_BYTES of files, MAX_ENTRIES
paths: the walk stops there) refuses the diff: forks then start from the image.
"""

from __future__ import annotations

import os
import stat
import tarfile
from collections import deque
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from replayer.sandboxes.base import Layered
from replayer.sandboxes.committable import escaped
from replayer.sandboxes.slots import CONTROL_MOUNT

ROOTFS_MOUNT = "/run/replayer-rootfs"
"""Where a pre-started fork sees the diff's files (read-only)."""
MAX_BYTES = 64 << 20
MAX_ENTRIES = 100_000
"""At most this many paths of the layer are walked: the walk, not the bytes, is what many empty files cost."""
_OPAQUE = ("trusted.overlay.opaque", "user.overlay.opaque")
APPLY = f"""set -e
cd /
xargs -0 -r rm -rf -- < {ROOTFS_MOUNT}/removed
while IFS= read -r -d '' dir; do find "$dir" -mindepth 1 -maxdepth 1 -exec rm -rf -- {{}} +; done < {ROOTFS_MOUNT}/emptied
tar -x -p --same-owner --numeric-owner -f {ROOTFS_MOUNT}/rootfs.tar -C /
"""
"""Run in the fork's container: the layer's deletions, then its files (as overlay stacks them)."""
WAITER = f"""read -r word < {CONTROL_MOUNT}/go
if [ "$word" = apply ]; then
  if out=$(exec 2>&1; {APPLY}); then echo ok; else echo "failed: ${{out##*$'\\n'}}"; fi > {CONTROL_MOUNT}/done
else
  echo ok > {CONTROL_MOUNT}/done
fi
exec sleep infinity
"""
"""A pre-started fork container's main process: told by the host (Slot.tell) once its state is mounted,
it applies the boundary's changes (no exec through the engine), then sleeps like any run's container."""


class RootfsDiff(BaseModel):
    """The boundary container's own file-system changes against `base_image`, written as rootfs.tar,
    removed and emptied (NUL-separated paths) in the diff's folder. Those files hold the paths' exact
    bytes; the lists here (what a fork is sent and checks against its mounts) show the bytes of a name
    that is not UTF-8 as `\\xNN` escapes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    base_image: str
    """The image id the boundary container ran: a fork pre-started from another cannot use the diff."""
    entries: list[str]
    """Container paths the tar writes."""
    removed: list[str]
    """Paths removed (their whole tree) before the tar: deleted, or made anew with another kind."""
    emptied: list[str]
    """Directories whose earlier contents are gone (recreated by the prefix)."""

    def conflict(self, mount_points: list[str]) -> str | None:
        """Why applying the diff would touch one of a container's mounts (None: it would not)."""
        points = [p.rstrip("/") + "/" for p in mount_points if p != "/"]
        for path in self.entries:
            if any((path + "/").startswith(p) for p in points):
                return f"the boundary wrote {path}, a mount of the fork's container"
        for path in self.removed + self.emptied:
            if any((path + "/").startswith(p) or p.startswith(path + "/") for p in points):
                return f"the boundary removed {path}, at a mount of the fork's container"
        return None

    @property
    def empty(self) -> bool:
        return not (self.entries or self.removed or self.emptied)


def _inside(path: str, points: list[str]) -> bool:
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in points if p != "/")


def _whiteout(info: os.stat_result) -> bool:
    return stat.S_ISCHR(info.st_mode) and info.st_rdev == 0


def _opaque(host: Path, names: list[str] | None = None) -> bool:
    """Whether directory `host` (its extended attributes' `names`, when already listed) hides what the
    layers under its own carry at its path."""
    names = os.listxattr(host, follow_symlinks=False) if names is None else names
    return any(os.getxattr(host, a, follow_symlinks=False) == b"y" for a in names if a in _OPAQUE)


def _lower(folders: list[Path], name: str) -> tuple[str | None, list[Path]]:
    """What the lower layers show at `name` of `folders` (the same directory in each layer that carries
    it, top first, all real directories): None (nothing), "dir" or "file" (anything else); for a directory,
    its own folders in these layers, as overlay merges them (down to the first opaque one)."""
    kind: str | None = None
    merged: list[Path] = []
    for folder in folders:
        try:
            info = (folder / name).lstat()
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(info.st_mode):
            if kind is None and not _whiteout(info):
                kind = "file"
            break  # a whiteout or a file ends the lookup, and a file under a directory is not shown
        kind = "dir"
        merged.append(folder / name)
        if _opaque(folder / name):
            break
    return kind, merged


class _Diff:
    """One walk of a layer over its lower layers, written as a tar and the lists of RootfsDiff."""

    def __init__(self, layer: Path, lowers: list[Path], points: list[str], tar: tarfile.TarFile):
        self.layer = layer
        self.points = points
        self.tar = tar
        self.below: dict[Path, list[Path]] = {layer: lowers}
        """Each directory to walk, and its folders in the lower layers."""
        self.entries: list[str] = []
        self.removed: list[str] = []
        self.emptied: list[str] = []
        self.size = 0

    def walk(self) -> str | None:
        """Walk the layer, parents first; why the diff cannot carry it (the walk stopped there), or None."""
        pending, count = deque([self.layer]), 0
        while pending:
            top = pending.popleft()
            names = []
            with os.scandir(top) as found:
                for entry in found:
                    count += 1
                    if count > MAX_ENTRIES:
                        return f"the boundary changed more than {MAX_ENTRIES} paths outside its mounts"
                    names.append(entry.name)
            for name in sorted(names):
                why = self.visit(top / name)
                if why is not None:
                    return why
                if top / name in self.below:
                    pending.append(top / name)
        return None

    def visit(self, host: Path) -> str | None:
        """Record `host`, a path of the layer (lstat only: nothing followed); why not, or None."""
        path = "/" + str(host.relative_to(self.layer))
        if _inside(path, self.points):
            return None
        info = host.lstat()
        kind, below = _lower(self.below[host.parent], host.name)
        if _whiteout(info):
            if kind is not None:  # a whiteout over nothing hides nothing
                self.removed.append(path)
            return None
        if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) or stat.S_ISSOCK(info.st_mode):
            return f"the boundary left a device file or socket at {escaped(os.fsencode(path))}"
        attrs = [] if stat.S_ISLNK(info.st_mode) else os.listxattr(host, follow_symlinks=False)
        if set(attrs) - set(_OPAQUE):
            return f"the boundary set extended attributes on {escaped(os.fsencode(path))}"
        is_dir = stat.S_ISDIR(info.st_mode)
        opaque = is_dir and _opaque(host, attrs)
        if kind is not None and (kind == "dir") != is_dir:
            self.removed.append(path)  # a directory replaced by a file or the reverse: removed, then made
        elif kind == "dir" and opaque:
            self.emptied.append(path)
        if is_dir:
            self.below[host] = below if kind == "dir" and not opaque else []
        self.size += info.st_size if stat.S_ISREG(info.st_mode) else 0
        if self.size > MAX_BYTES:
            return f"the boundary wrote more than {MAX_BYTES >> 20} MiB outside its mounts"
        self.tar.add(host, arcname=path.lstrip("/"), recursive=False)
        self.entries.append(path)
        return None


def build(box: Layered, image: str, dest: Path) -> RootfsDiff | str:
    """The diff of `box` (the boundary container) committed as `image`, written into `dest` (an existing
    folder); or why forks cannot use one."""
    committed = box.image_attrs(image)
    base = box.image_attrs(box.image_id)
    if committed["RootFS"]["Layers"][:-1] != base["RootFS"]["Layers"]:
        return "the snapshot image is not one layer over the boundary container's image"
    data = (committed.get("GraphDriver") or {}).get("Data") or {}
    layer = Path(data.get("UpperDir", ""))
    lowers = [Path(p) for p in str(data.get("LowerDir", "")).split(":") if p]
    if not all(p.is_absolute() and p.is_dir() for p in [layer, *lowers]) or not lowers:
        return "the snapshot's layers are not on this host"
    return read_layer(layer, lowers, box.mount_points(), box.image_id, dest)


def read_layer(
    layer: Path, lowers: list[Path], points: list[str], base_image: str, dest: Path
) -> RootfsDiff | str:
    """The changes of overlay layer `layer` over `lowers` (top first) outside the container mount points
    `points`, written into `dest`; or why forks cannot use them."""
    with tarfile.open(dest / "rootfs.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        diff = _Diff(layer, lowers, points, tar)
        why = diff.walk()
    if why is not None:
        return why
    for name, paths in (("removed", diff.removed), ("emptied", diff.emptied)):
        (dest / name).write_bytes(b"".join(os.fsencode(p) + b"\0" for p in paths))
    return RootfsDiff(
        base_image=base_image,
        entries=[escaped(os.fsencode(p)) for p in diff.entries],
        removed=[escaped(os.fsencode(p)) for p in diff.removed],
        emptied=[escaped(os.fsencode(p)) for p in diff.emptied],
    )
