"""Output bounded as a whole (replayer/floor/output_budget.py, replayer/pipeline/boundary_outputs.py), on the
real file system: boundaries share their unchanged state files, a write through one result never changes
another, and the run's budget refuses a write before it is passed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from replayer.floor.models import SandboxLimits
from replayer.floor.output_budget import OverBudget
from replayer.pipeline.boundary_outputs import BoundaryOutputs

MIB = 1 << 20


def _boundary(outputs: BoundaryOutputs, k: int, source: Path, out: Path) -> Path:
    tmp = out / f".after-{k}.tmp"
    limits = SandboxLimits(disk_bytes=64 * MIB)
    outputs.copy(k, source, tmp, "state/workspace", links="keep", limits=limits, what="the workspace")
    (tmp / "native").mkdir()
    (tmp / "native" / "session.jsonl").write_bytes(b"x" * (k * 1000))
    outputs.settle(k, tmp)
    final = out / f"after-{k}"
    tmp.rename(final)
    outputs.committed(final)
    return final


def test_unchanged_files_are_shared_and_a_write_through_one_result_changes_no_other(tmp_path: Path) -> None:
    source = tmp_path / "workspace"
    source.mkdir()
    (source / "big.bin").write_bytes(os.urandom(4 * MIB))
    (source / "notes.txt").write_text("one\n")
    outputs = BoundaryOutputs.of(SandboxLimits(disk_bytes=64 * MIB))
    out = tmp_path / "out"
    out.mkdir()
    first = _boundary(outputs, 1, source, out)
    (source / "notes.txt").write_text("two\n")
    second = _boundary(outputs, 2, source, out)
    one, two = first / "state/workspace/big.bin", second / "state/workspace/big.bin"
    assert one.read_bytes() == two.read_bytes()
    assert (second / "state/workspace/notes.txt").read_text() == "two\n"
    assert (first / "state/workspace/notes.txt").read_text() == "one\n"
    assert outputs.budget.used < 5 * MIB, "the 4 MiB file is written once"
    if os.stat(one).st_ino == os.stat(two).st_ino:  # a hard link: read-only through both names
        assert not os.stat(one).st_mode & (stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH)
    else:  # a reflink: a file of its own
        with open(two, "r+b") as fh:
            fh.write(b"changed")
        assert one.read_bytes()[:7] != b"changed"


def test_a_changed_file_with_the_same_size_and_time_is_copied(tmp_path: Path) -> None:
    source = tmp_path / "workspace"
    source.mkdir()
    (source / "a.txt").write_text("aaaa")
    outputs = BoundaryOutputs.of(SandboxLimits(disk_bytes=64 * MIB))
    out = tmp_path / "out"
    out.mkdir()
    first = _boundary(outputs, 1, source, out)
    kept = os.stat(source / "a.txt")
    (source / "a.txt").write_text("bbbb")
    os.utime(source / "a.txt", ns=(kept.st_atime_ns, kept.st_mtime_ns))  # what a sandbox can forge
    second = _boundary(outputs, 2, source, out)
    assert (first / "state/workspace/a.txt").read_text() == "aaaa"
    assert (second / "state/workspace/a.txt").read_text() == "bbbb"


def test_the_budget_refuses_the_boundary_that_would_pass_it(tmp_path: Path) -> None:
    outputs = BoundaryOutputs.of(SandboxLimits(disk_bytes=64 * MIB, output_bytes=10 * MIB))
    out = tmp_path / "out"
    out.mkdir()
    written = []
    for k in range(1, 6):
        source = tmp_path / f"workspace-{k}"
        source.mkdir()
        (source / "big.bin").write_bytes(os.urandom(3 * MIB))  # new bytes at every boundary
        try:
            written.append(_boundary(outputs, k, source, out))
        except OverBudget as exc:
            assert "boundary 4 would pass the run's total output budget of 10485760 bytes" in str(exc)
            break
    assert [p.name for p in written] == ["after-1", "after-2", "after-3"]
    assert outputs.budget.used <= 10 * MIB
    assert sum(f.stat().st_size for f in out.rglob("*") if f.is_file()) <= 10 * MIB, "never passed"
    with pytest.raises(OverBudget):  # the run writes nothing more
        outputs.budget.take(1, "boundary 5")


def test_the_default_budget_follows_disk_and_a_limit_sets_it() -> None:
    assert SandboxLimits.parse("disk=1g").output_total() == 4 << 30
    assert SandboxLimits.parse("disk=1g,output=3g").output_total() == 3 << 30
