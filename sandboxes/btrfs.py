"""The btrfs file system the engine's data root and every run's state live on (a quota-enabled loop image):
where it is, and whether a path is on it."""

from __future__ import annotations

import os
from pathlib import Path

from replayer.floor import hostproc

FS_ROOT = Path(os.environ.get("REPLAYER_FS_ROOT", "/var/lib/sandbox-replayer/fs"))
_BTRFS_MAGIC = 0x9123683E
_BTRFS_DEVICES: dict[int, bool] = {}


def is_btrfs(path: Path) -> bool:
    """Asked once a device: every container start asks, always of the engine's data root or STATE_ROOT
    (whose device numbers stay; a btrfs subvolume has one of its own)."""
    try:
        device = path.stat().st_dev
    except OSError:
        return False
    if device not in _BTRFS_DEVICES:
        try:
            out = hostproc.run(
                ["stat", "-f", "-c", "%t", str(path)], capture_output=True, text=True, timeout=10, check=True
            ).stdout
        except (OSError, hostproc.SubprocessError):
            return False
        _BTRFS_DEVICES[device] = int(out.strip() or "0", 16) == _BTRFS_MAGIC
    return _BTRFS_DEVICES[device]
