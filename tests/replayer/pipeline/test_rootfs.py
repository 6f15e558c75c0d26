"""What a pre-started fork may apply of the boundary's own file-system changes (replayer/pipeline/rootfs.py): never
anything at or under one of its container's mounts, and no removal that would reach into one; a layer read
over its lower layers on plain directories (a changed kind removed first, the walk bounded)."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
import tarfile
from pathlib import Path

import pytest

from replayer.pipeline import rootfs
from replayer.pipeline.rootfs import RootfsDiff, read_layer

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


def _tree(root: Path, files: dict[str, str | None]) -> Path:
    """`root` with each path of `files`: a file with that text, a directory (trailing /), a link (`-> T`),
    a whiteout (None: a 0/0 character device, as overlay writes one)."""
    for rel, text in files.items():
        path = root / rel.rstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        if text is None:
            os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(0, 0))
        elif rel.endswith("/"):
            path.mkdir(exist_ok=True)
        elif text.startswith("-> "):
            path.symlink_to(text[3:])
        else:
            path.write_text(text)
    return root


def _opaque(path: Path) -> None:
    os.setxattr(path, "user.overlay.opaque", b"y")


def _members(dest: Path) -> list[str]:
    with tarfile.open(dest / "rootfs.tar") as tar:
        return tar.getnames()


@pytest.fixture
def layers(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A lower layer (the image), an empty upper one (what the boundary changed) and the diff's folder."""
    if os.geteuid() != 0:
        pytest.skip("whiteouts are character devices: root makes them")
    lower = _tree(
        tmp_path / "lower",
        {"etc/default/nss": "x", "etc/version": "12", "usr/lib/ld": "elf", "lib64": "-> usr/lib",
         "opt/old": "x", "var/gone": "x", "srv/keep": "x"},
    )  # fmt: skip
    (tmp_path / "upper").mkdir()
    (tmp_path / "dest").mkdir()
    return lower, tmp_path / "upper", tmp_path / "dest"


def test_a_path_whose_kind_changed_is_removed_before_the_tar_makes_it(
    layers: tuple[Path, Path, Path],
) -> None:
    lower, upper, dest = layers
    _tree(
        upper,
        {"etc/default": "now a file", "etc/version/x": "now a directory", "lib64/ld": "no longer a link",
         "opt/new": "x", "var/gone": None, "var/never": None, "tmp/t": "x", "testbed/skipped": "x"},
    )  # fmt: skip
    for replaced in ("etc/version", "lib64", "opt"):
        _opaque(upper / replaced)  # what overlay marks a directory made where a path was removed
    diff = read_layer(upper, [lower], MOUNTS, "sha256:base", dest)
    assert isinstance(diff, RootfsDiff), diff
    # removed whole before the tar runs: a directory now a file, a file and a link now directories, a
    # deletion; a whiteout over nothing hides nothing, and /opt (a directory still) is only emptied
    assert sorted(diff.removed) == ["/etc/default", "/etc/version", "/lib64", "/var/gone"]
    assert diff.emptied == ["/opt"]
    assert sorted(diff.entries) == sorted(
        ["/etc", "/etc/default", "/etc/version", "/etc/version/x", "/lib64", "/lib64/ld", "/opt",
         "/opt/new", "/tmp", "/tmp/t", "/var"]
    )  # fmt: skip
    members = _members(dest)
    assert sorted(members) == sorted(p.lstrip("/") for p in diff.entries)
    assert all(members.index(str(Path(m).parent)) < i for i, m in enumerate(members) if "/" in m)
    assert (dest / "removed").read_bytes().split(b"\0")[:-1] == [p.encode() for p in diff.removed]


def test_a_layer_of_too_many_paths_refuses_without_walking_the_rest(
    layers: tuple[Path, Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    lower, upper, dest = layers
    monkeypatch.setattr(rootfs, "MAX_ENTRIES", 50)
    _tree(upper, {f"tmp/{i:02}": "" for i in range(49)})  # /tmp and its files: 50 paths
    diff = read_layer(upper, [lower], MOUNTS, "sha256:base", dest)
    assert isinstance(diff, RootfsDiff) and len(diff.entries) == 50
    (upper / "tmp" / "one-more").touch()
    # a socket the walk would refuse, in a folder walked after /tmp: the count stops the walk first
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(_tree(upper, {"var/": ""}) / "var" / "sock"))
        assert read_layer(upper, [lower], MOUNTS, "sha256:base", dest) == (
            "the boundary changed more than 50 paths outside its mounts"
        )
    assert len(_members(dest)) < 50


def test_names_that_are_not_utf8_are_carried_exactly_and_shown_escaped(
    layers: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    lower, upper, dest = layers
    (lower / "srv" / os.fsdecode(b"\xffold")).write_text("x")
    _tree(upper, {"tmp/": "", "srv/": "", "srv/" + os.fsdecode(b"\xffold"): None})
    (upper / "tmp" / os.fsdecode(b"caf\xe9")).write_text("latin-1 name")
    diff = read_layer(upper, [lower], MOUNTS, "sha256:base", dest)
    assert isinstance(diff, RootfsDiff), diff
    assert "/tmp/caf\\xe9" in diff.entries and diff.removed == ["/srv/\\xffold"]
    assert RootfsDiff.model_validate_json(diff.model_dump_json()) == diff  # what a fork is sent
    assert (dest / "removed").read_bytes() == b"/srv/\xffold\0"  # what a fork applies: the exact bytes
    out = tmp_path / "extracted"
    out.mkdir()
    subprocess.run(["tar", "-x", "-f", str(dest / "rootfs.tar"), "-C", str(out)], check=True)
    assert os.listdir(os.fsencode(out / "tmp")) == [b"caf\xe9"]
