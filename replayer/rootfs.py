"""What the prefix changed in the boundary container's own file system (outside its mounts), as a tar that
a fork pre-started from the same image applies instead of starting from the committed snapshot image.

The changes are the committed image's top layer (docker commit of the boundary container), read on the
host where the engine stores it (overlay2: deleted files are 0/0 character devices, a directory whose
lower contents are hidden carries trusted.overlay.opaque). The layer is immutable, so reading it is
exact; nothing in it is followed (no link, no FIFO opened). Whatever a plain tar cannot carry exactly (a
device file, an extended attribute) or what is too large refuses the diff: forks then start from the image.
"""

from __future__ import annotations

import os
import stat
import tarfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from sandboxes.docker import DockerSandbox, engine_errors
from sandboxes.slots import CONTROL_MOUNT

ROOTFS_MOUNT = "/run/replayer-rootfs"
"""Where a pre-started fork sees the diff's files (read-only)."""
MAX_BYTES = 64 << 20
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
    removed and emptied (NUL-separated paths) in the diff's folder."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    base_image: str
    """The image id the boundary container ran: a fork pre-started from another cannot use the diff."""
    entries: list[str]
    """Container paths the tar writes."""
    removed: list[str]
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


def build(box: DockerSandbox, image: str, dest: Path) -> RootfsDiff | str:
    """The diff of `box` (the boundary container) committed as `image`, written into `dest` (an existing
    folder); or why forks cannot use one."""
    with engine_errors("snapshot inspection"):
        committed = box.client.images.get(image).attrs
        base = box.client.images.get(box.image_id).attrs
    if committed["RootFS"]["Layers"][:-1] != base["RootFS"]["Layers"]:
        return "the snapshot image is not one layer over the boundary container's image"
    layer = Path((committed.get("GraphDriver") or {}).get("Data", {}).get("UpperDir", ""))
    if not layer.is_absolute() or not layer.is_dir():
        return "the snapshot's layer is not on this host"
    points = box.mount_points()
    entries: list[str] = []
    removed: list[str] = []
    emptied: list[str] = []
    size = 0
    with tarfile.open(dest / "rootfs.tar", "w", format=tarfile.PAX_FORMAT) as tar:
        for top, dirs, files in os.walk(layer):
            for name in sorted(dirs) + sorted(files):
                host = Path(top, name)
                path = "/" + str(host.relative_to(layer))
                if _inside(path, points):
                    continue
                info = host.lstat()
                if stat.S_ISCHR(info.st_mode) and info.st_rdev == 0:
                    removed.append(path)
                    continue
                if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) or stat.S_ISSOCK(info.st_mode):
                    return f"the boundary left a device file or socket at {path}"
                attrs = [] if stat.S_ISLNK(info.st_mode) else os.listxattr(host)
                if stat.S_ISDIR(info.st_mode) and any(
                    os.getxattr(host, a) == b"y" for a in attrs if a in _OPAQUE
                ):
                    emptied.append(path)
                if [a for a in attrs if a not in _OPAQUE]:
                    return f"the boundary set extended attributes on {path}"
                size += info.st_size if stat.S_ISREG(info.st_mode) else 0
                if size > MAX_BYTES:
                    return f"the boundary wrote more than {MAX_BYTES >> 20} MiB outside its mounts"
                tar.add(host, arcname=path.lstrip("/"), recursive=False)
                entries.append(path)
            dirs[:] = [d for d in dirs if not _inside("/" + str(Path(top, d).relative_to(layer)), points)]
    for name, paths in (("removed", removed), ("emptied", emptied)):
        (dest / name).write_bytes(b"".join(p.encode() + b"\0" for p in paths))
    return RootfsDiff(base_image=box.image_id, entries=entries, removed=removed, emptied=emptied)
