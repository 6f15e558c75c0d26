"""What a pre-started fork may apply of the boundary's own file-system changes (replayer/rootfs.py): never
anything at or under one of its container's mounts, and no removal that would reach into one."""

from __future__ import annotations

from replayer.rootfs import RootfsDiff

MOUNTS = ["/", "/proc", "/testbed", "/root/.claude", "/run/replayer"]


def _diff(**changes: list[str]) -> RootfsDiff:
    return RootfsDiff(base_image="sha256:base", **{"entries": [], "removed": [], "emptied": [], **changes})


def test_changes_beside_the_mounts_apply() -> None:
    diff = _diff(
        entries=["/tmp", "/tmp/x", "/run", "/root", "/testbed2"], removed=["/etc/motd"], emptied=["/opt"]
    )
    assert diff.conflict(MOUNTS) is None and not diff.empty
    assert _diff().empty and _diff().conflict(MOUNTS) is None


def test_a_change_at_or_under_a_mount_or_a_removal_over_one_refuses() -> None:
    assert (
        _diff(entries=["/testbed"]).conflict(MOUNTS)
        == "the boundary wrote /testbed, a mount of the fork's container"
    )
    assert _diff(entries=["/root/.claude/x"]).conflict(MOUNTS) is not None
    assert _diff(removed=["/run/replayer/a"]).conflict(MOUNTS) is not None
    # emptying /root would reach into the agent home mounted under it
    assert _diff(emptied=["/root"]).conflict(MOUNTS) == (
        "the boundary removed /root, at a mount of the fork's container"
    )
