"""The boundary's workspace and agent home, and each fork's own copy of them.

The boundary state is sandbox-written, so it is copied once, by `copy_untrusted` (no link followed, no
FIFO or device, no set-user-ID bit, bounded), into a sealed (read-only) limited state. A fork's copy is
then a btrfs snapshot of that sealed state: constant time whatever the tree's size, private from its
first write, under a quota of its own like a state that was copied (sandboxes/quota.py). Where the file
system offers no subvolumes, the fork copies the boundary tree as before.
"""

from __future__ import annotations

from pathlib import Path

from replayer.floor.limits import SandboxLimits
from replayer.floor.safecopy import copy_untrusted
from replayer.sandboxes.quota import StateDir

PLACES = (("workspace", "keep"), ("home", "skip"))
"""The trees of a state and how their symlinks are copied (the agent home never needs one)."""


def copy_places(src: Path, dest: Path, limits: SandboxLimits) -> None:
    """`src`'s workspace/ and home/ copied into `dest` without trusting anything in them."""
    for place, links in PLACES:
        copy_untrusted(src / place, dest / place, links=links, limits=limits, what=f"the boundary {place}")  # type: ignore[arg-type]


def seal(src: Path, limits: SandboxLimits) -> StateDir | None:
    """A sealed limited copy of `src`'s workspace/ and home/ that forks clone; None where states are not
    limited (forks then copy `src` itself)."""
    state = StateDir.create(limits.disk_bytes, fallback_parent=src.parent)
    if not state.limited:
        state.remove()
        return None
    try:
        copy_places(src, state.path, limits)
        if not state.seal():
            raise OSError("btrfs refused to make the boundary state read-only")
    except BaseException:
        state.remove()
        raise
    return state


def fork_state(sealed: Path | None, src: Path, limits: SandboxLimits, fallback_parent: Path) -> StateDir:
    """A fork's own workspace/ and home/: a clone of the `sealed` boundary state when there is one and
    the file system makes it, else a limited (or plain) state with copies of `src`'s."""
    if sealed is not None:
        clone = StateDir(sealed, limited=True).clone(limits.disk_bytes)
        if clone is not None:
            return clone
    state = StateDir.create(limits.disk_bytes, fallback_parent=fallback_parent)
    try:
        copy_places(src, state.path, limits)
    except BaseException:
        state.remove()
        raise
    return state
