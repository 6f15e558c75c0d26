"""Inputs are never lost: an output that would replace, contain or sit inside an input is refused with
or without --force; --force leaves no debris; special and endless input files are refused before any
read (a FIFO would block forever, /dev/zero would fill the memory)."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import CLAUDE, replayer


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        h.update(str(path.relative_to(root)).encode())
        if path.is_file():
            h.update(path.read_bytes())
    return h.hexdigest()


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(folder, trajectory in it, a sibling file, workspace in it)."""
    folder = tmp_path / "inputs"
    folder.mkdir()
    trajectory = folder / "session.jsonl"
    shutil.copy(CLAUDE.fixture("single") / "session.jsonl", trajectory)
    (folder / "notes.txt").write_text("keep me\n")
    workspace = folder / "ws"
    shutil.copytree(CLAUDE.fixture("single") / "workspace", workspace)
    return folder, trajectory, workspace


@pytest.mark.parametrize(
    "where",
    ["folder", "trajectory", "root", "parent", "inside_workspace", "workspace"],
)
def test_an_output_that_would_touch_an_input_is_refused(where: str, inputs: tuple[Path, Path, Path]) -> None:
    folder, trajectory, workspace = inputs
    out = {
        "folder": folder,
        "trajectory": trajectory,
        "root": Path("/"),
        "parent": folder.parent,
        "inside_workspace": workspace / "out",
        "workspace": workspace,
    }[where]
    before = _digest(folder.parent)
    # run: the workspace is an input too (refused before any container starts)
    proc = replayer("run", str(trajectory), "-n", "1", "-w", str(workspace), "-o", str(out), "--force")
    assert proc.returncode == 7, proc.stderr
    assert proc.stderr.startswith("replayer: output: the output ") and proc.stderr.count("\n") == 1
    assert _digest(folder.parent) == before


def test_force_over_a_file_leaves_no_debris(inputs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, trajectory, _ = inputs
    out = tmp_path / "elsewhere" / "result"
    out.parent.mkdir()
    out.write_text("an old file\n")
    proc = replayer("prepare", str(trajectory), "-n", "1", "-o", str(out), "--force")
    assert proc.returncode == 0, proc.stderr
    assert (out / "result.json").is_file()
    assert sorted(p.name for p in out.parent.iterdir()) == ["result"]
    proc = replayer("prepare", str(trajectory), "-n", "1", "-o", str(out), "--force")  # over a directory
    assert proc.returncode == 0 and sorted(p.name for p in out.parent.iterdir()) == ["result"]


def test_an_over_long_output_name_is_refused(inputs: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, trajectory, _ = inputs
    proc = replayer("prepare", str(trajectory), "-n", "1", "-o", str(tmp_path / ("o" * 300)))
    assert proc.returncode == 7 and "more than 255" in proc.stderr
    proc = replayer("prepare", str(trajectory), "-n", "1", "-o", str(tmp_path / ("o" * 250)))
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def _special_inputs(tmp_path: Path) -> dict[str, Path]:
    fifo = tmp_path / "fifo.jsonl"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.jsonl"
    zero.symlink_to("/dev/zero")
    return {"fifo": fifo, "zero": zero, "device": Path("/dev/null"), "directory": tmp_path}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["fifo", "zero", "device", "directory"])
@pytest.mark.parametrize("verb", ["inspect", "prepare"])
def test_special_input_files_are_refused_before_reading(kind: str, verb: str, tmp_path: Path) -> None:
    path = _special_inputs(tmp_path)[kind]
    args = [verb, str(path)] + (["-n", "0", "-o", str(tmp_path / "out")] if verb == "prepare" else [])
    proc = replayer(*args)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith("replayer: bad_input: ") and proc.stderr.count("\n") == 1
    assert "Traceback" not in proc.stderr


def test_a_refusal_never_echoes_a_huge_input(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    path.write_bytes(b'{"type": "' + b"x" * 10_000_000 + b'"}\n')
    proc = replayer("inspect", str(path))
    assert proc.returncode == 3
    assert len(proc.stderr) < 1000 and proc.stderr.count("\n") == 1
