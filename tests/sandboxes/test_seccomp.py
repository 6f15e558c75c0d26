"""The seccomp profile's ioctl conditions, evaluated as the engine ORs them (no Docker): every request is
allowed but the btrfs administration ones, whatever the high bits (the container-side test is in
tests/sandboxes/test_untrusted_sandbox.py)."""

from __future__ import annotations

import random

from replayer.sandboxes.seccomp import BTRFS_IOCTLS, profile

FICLONE = 0x40049409
TCGETS = 0x5401


def _allowed(request: int) -> bool:
    rules = [r for r in profile()["syscalls"] if "ioctl" in r["names"]]
    assert all(r["action"] == "SCMP_ACT_ALLOW" and len(r["args"]) == 1 for r in rules)
    return any(
        request & r["args"][0]["value"] == r["args"][0]["valueTwo"] and r["args"][0]["index"] == 1
        for r in rules
    )


def test_only_the_btrfs_administration_requests_are_refused() -> None:
    denied_numbers = {r & 0xFF for r in BTRFS_IOCTLS.values()}
    for request in BTRFS_IOCTLS.values():
        assert not _allowed(request) and not _allowed(request | 0xFFFF_FFFF_0000_0000)
    for request in (TCGETS, FICLONE, 0x80089419):  # a terminal, cp --reflink, SUBVOL_GETFLAGS
        assert _allowed(request)
    rng = random.Random(32)
    for _ in range(20_000):
        request = rng.getrandbits(32)
        if rng.random() < 0.5:  # half of them under btrfs's type byte
            request = (request & ~0xFF00) | 0x9400
        btrfs_admin = (request >> 8) & 0xFF == 0x94 and request & 0xFF in denied_numbers
        assert _allowed(request) != btrfs_admin, hex(request)


def test_ioctl_is_never_allowed_unconditionally() -> None:
    """An unconditional allow would win over the conditions in the engine's libseccomp."""
    for rule in profile()["syscalls"]:
        if "ioctl" in rule["names"]:
            assert rule.get("args")


def test_io_uring_falls_to_the_default_refusal() -> None:
    """moby took the io_uring calls out of its default profile in 2023 (the container-side test is in
    tests/sandboxes/test_side_doors.py)."""
    allowed = {name for rule in profile()["syscalls"] for name in rule["names"]}
    assert not {"io_uring_setup", "io_uring_enter", "io_uring_register"} & allowed
    assert profile()["defaultAction"] == "SCMP_ACT_ERRNO"
