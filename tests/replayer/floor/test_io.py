"""Confined reads and writes: no symlink is followed, nothing but regular files is opened, budgets cut."""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path

import orjson
import pytest

from replayer import adapters
from replayer.floor.errors import BadInput, ConfinementError, OutputError
from replayer.floor.io import (
    NotFound,
    NotRegular,
    OutputDir,
    Workspace,
    read_input,
    remove_alias,
    short_alias,
)
from replayer.floor.limits import ReadBudget
from tests.conftest import ROOT

FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f.txt").write_text("hello\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    return Workspace(root, "/testbed")


def test_reads_a_regular_file(ws: Workspace) -> None:
    res = ws.read("/testbed/sub/f.txt", ReadBudget())
    assert res.data == b"hello\n" and not res.truncated and res.size == 6


def test_relative_paths_resolve_against_cwd(ws: Workspace) -> None:
    assert ws.read("sub/f.txt", ReadBudget()).data == b"hello\n"


@pytest.mark.parametrize("path", ["/etc/passwd", "/testbed/../etc/passwd", "/testbedx/f", "../secret.txt"])
def test_paths_outside_the_workspace(ws: Workspace, path: str) -> None:
    with pytest.raises(ConfinementError, match="outside the workspace"):
        ws.read(path, ReadBudget())


def test_symlink_to_outside_is_not_followed(ws: Workspace) -> None:
    os.symlink(ws.root.parent / "secret.txt", ws.root / "link.txt")
    with pytest.raises(NotRegular):
        ws.read("/testbed/link.txt", ReadBudget())
    with pytest.raises(NotRegular):
        ws.write("/testbed/link.txt", b"overwrite")
    assert (ws.root.parent / "secret.txt").read_text() == "outside\n"


def test_symlinked_directory_is_not_followed(ws: Workspace) -> None:
    os.symlink(ws.root.parent, ws.root / "up")
    with pytest.raises(NotRegular):
        ws.read("/testbed/up/secret.txt", ReadBudget())


def test_fifo_is_refused_without_blocking(ws: Workspace) -> None:
    os.mkfifo(ws.root / "pipe")
    with pytest.raises(NotRegular):
        ws.read("/testbed/pipe", ReadBudget())
    with pytest.raises(NotRegular):
        ws.write("/testbed/pipe", b"x")


def test_directory_and_missing(ws: Workspace) -> None:
    with pytest.raises(NotRegular) as info:
        ws.read("/testbed/sub", ReadBudget())
    assert info.value.is_dir
    with pytest.raises(NotFound):
        ws.read("/testbed/none.txt", ReadBudget())
    assert ws.kind("/testbed/sub") == "dir" and ws.kind("/testbed/none.txt") == "missing"


def test_scan_budget_probes_one_extra_byte(ws: Workspace) -> None:
    (ws.root / "big").write_bytes(b"x" * 100)
    exact = ws.read("/testbed/big", ReadBudget(max_scan_bytes=100))
    assert not exact.truncated and len(exact.data) == 100
    cut = ws.read("/testbed/big", ReadBudget(max_scan_bytes=99))
    assert cut.truncated and len(cut.data) == 99


def test_write_creates_parents_inside_only(ws: Workspace) -> None:
    ws.write("/testbed/new/dir/x.txt", b"data")
    assert (ws.root / "new" / "dir" / "x.txt").read_bytes() == b"data"
    with pytest.raises(ConfinementError):
        ws.write("/tmp/x.txt", b"data")


def test_output_dir_is_atomic(tmp_path: Path) -> None:
    out = OutputDir(tmp_path / "result")
    (out.tmp / "a").write_text("1")
    assert not (tmp_path / "result").exists()
    out.commit()
    assert (tmp_path / "result" / "a").read_text() == "1"
    with pytest.raises(OutputError):
        OutputDir(tmp_path / "result")
    failed = OutputDir(tmp_path / "other")
    failed.discard()
    assert not (tmp_path / "other").exists() and not list(tmp_path.glob(".other*"))


def test_read_input_reads_whole_files_and_past_their_recorded_size(tmp_path: Path) -> None:
    for size in (0, 1, 4096, 3 << 20):
        path = tmp_path / f"f{size}"
        path.write_bytes(os.urandom(size))
        assert read_input(path) == path.read_bytes()
    # a file whose content outruns its recorded size (as one that grows while read): /proc reports 0 bytes
    status = read_input(Path("/proc/self/status"))
    assert status.startswith(b"Name:") and len(status) > 0
    with pytest.raises(BadInput, match="grew past the 16-byte limit"):
        read_input(Path("/proc/self/status"), max_bytes=16)


def test_detection_hands_its_document_to_the_parse_only_for_the_same_bytes(tmp_path: Path) -> None:
    """The parse after detection takes the document detection read, never a stale one: the file rewritten
    in between is read again."""
    source = FIXTURES / "mini_swe_agent" / "toolcall" / "trajectory.traj.json"
    doc = orjson.loads(source.read_bytes())
    path = tmp_path / "t.traj.json"
    path.write_bytes(orjson.dumps(doc))
    adapter = adapters.detect(path)
    assert adapter.parse(path).model_dump() == adapter.parse(path).model_dump()  # taken once, then read
    adapters.detect(path)
    doc["messages"] = doc["messages"][:4]
    path.write_bytes(orjson.dumps(doc))
    assert len(adapter.parse(path).steps) == 1


def links_under(top: Path) -> set[str]:
    """Where the symbolic links one level below `top`'s folders point; a folder another test removes
    meanwhile is skipped (the suite runs in parallel)."""
    found = set()
    for entry in os.scandir(top):
        try:
            found |= {os.readlink(e.path) for e in os.scandir(entry.path) if e.is_symlink()}
        except (NotADirectoryError, FileNotFoundError, PermissionError):
            continue
    return found


def test_a_socket_deeper_than_af_unix_allows_binds_through_a_short_alias_made_of_nothing_on_disk(
    tmp_path: Path,
) -> None:
    deep = tmp_path / ("d" * 100) / ("e" * 100)
    deep.mkdir(parents=True)
    alias = short_alias(deep)
    server, client = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
    try:
        assert len(str(alias / "s.sock")) < 108 < len(str(deep / "s.sock"))
        server.bind(str(alias / "s.sock"))
        server.listen()
        client.connect(str(alias / "s.sock"))
        assert (deep / "s.sock").is_socket()
        # a process killed now leaves no link to the directory behind (one under /tmp did)
        assert str(deep) not in links_under(Path(tempfile.gettempdir()))
    finally:
        server.close()
        client.close()
        remove_alias(alias)
    with pytest.raises(OSError):
        os.stat(alias)  # its descriptor closed
    remove_alias(alias)  # twice: closes nothing of anyone else's


def test_a_short_alias_is_not_taken_through_a_link(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.raises(NotADirectoryError):
        short_alias(tmp_path / "link")
