"""Output bounded as a whole (replayer/floor/output_budget.py, replayer/pipeline/boundary_outputs.py), on the
real file system: boundaries share their unchanged state files, a write through one result never changes
another, and the run's budget refuses a write before it is passed."""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import orjson
import pytest

from replayer import api
from replayer.floor.limits import SandboxLimits
from replayer.floor.output_budget import OverBudget
from replayer.floor.results import ReplayResult
from replayer.pipeline.boundary_outputs import BoundaryOutputs
from replayer.sandboxes.btrfs import FS_ROOT, is_btrfs
from tests.conftest import ROOT, replayer

MIB = 1 << 20
WRITE_EDIT = ROOT / "tests" / "fixtures" / "claude_code" / "write_edit" / "session.jsonl"


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


@pytest.fixture(scope="module")
def big_workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The recording's workspace and a 200 MiB file no step touches."""
    ws = tmp_path_factory.mktemp("big") / "workspace"
    shutil.copytree(WRITE_EDIT.parent / "workspace", ws)
    with open(ws / "big.bin", "wb") as fh:
        for _ in range(200):
            fh.write(os.urandom(MIB))
    return ws


def _unique_bytes(root: Path) -> int:
    """What is on disk under `root`: each inode once (a hard link is not a second copy)."""
    seen: dict[tuple[int, int], int] = {}
    for p in root.rglob("*"):
        st = p.lstat()
        if stat.S_ISREG(st.st_mode):
            seen[(st.st_dev, st.st_ino)] = min(st.st_size, st.st_blocks * 512)
    return sum(seen.values())


@pytest.mark.docker
@pytest.mark.agent
def test_every_boundary_of_a_200_mib_workspace_stays_under_the_total(
    big_workspace: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    outcomes = api.run_boundaries(WRITE_EDIT, "all", big_workspace, out, limits="disk=256m")
    assert [k for k, r in outcomes.items() if not isinstance(r, ReplayResult)] == [], outcomes
    assert len(outcomes) == 6, "six copies of 200 MiB would pass 4 x 256m"
    assert _unique_bytes(out) <= SandboxLimits.parse("disk=256m").output_total()
    copies = [out / f"after-{k}" / "state" / "workspace" / "big.bin" for k in sorted(outcomes)]
    assert len({os.stat(p).st_ino for p in copies}) == 1 or all(p.stat().st_size == 200 * MIB for p in copies)


@pytest.mark.docker
@pytest.mark.agent
def test_a_run_that_would_pass_the_total_stops_and_says_so(big_workspace: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = ["run", str(WRITE_EDIT), "-w", str(big_workspace), "-o", str(out), "-n", "all"]
    proc = replayer(*args, "--limits", "disk=256m,output=150m", "--json")
    assert proc.returncode == 7, proc.stderr
    shown = orjson.loads(proc.stdout)["boundaries"]
    assert sorted(shown, key=int) == ["0", "1", "2", "3", "4", "5"]
    for outcome in shown.values():
        assert outcome["error_kind"] == "output", outcome
        assert "boundary 0 would pass the run's total output budget of 157286400 bytes" in outcome["error"]
    assert not out.exists() or _unique_bytes(out) <= 150 * MIB


def test_the_quadratic_case_is_linear_where_the_file_system_dedupes() -> None:
    """Forty boundaries of a session whose every step prints 30 KB: each boundary's session holds every
    step so far (quadratic in the steps when each is written whole); on btrfs the blocks a boundary's
    session has in common with the one before are shared, and the budget is charged what is new."""
    if not is_btrfs(FS_ROOT):
        pytest.skip("the engine's file system is not btrfs (replayer setup)")
    outputs = BoundaryOutputs.of(SandboxLimits(disk_bytes=64 * MIB))
    step = b"".join(b'{"step": %d, "output": "%s"}\n' % (n, b"o" * 30_000) for n in range(40))
    lines = step.splitlines(keepends=True)
    with tempfile.TemporaryDirectory(dir=FS_ROOT, prefix="test-output-") as there:
        out = Path(there)
        whole = 0
        for k in range(1, 41):
            tmp = out / f".after-{k}.tmp"
            (tmp / "native").mkdir(parents=True)
            session = b"".join(lines[:k])
            (tmp / "native" / "session.jsonl").write_bytes(session)
            whole += len(session)
            outputs.settle(k, tmp)
            tmp.rename(out / f"after-{k}")
            outputs.committed(out / f"after-{k}")
        last = len(b"".join(lines))
        assert whole > 20 * last, "written whole: quadratic"
        assert outputs.budget.used < 2 * last, "shared: linear"
        for k in (1, 20, 40):
            assert (out / f"after-{k}" / "native" / "session.jsonl").read_bytes() == b"".join(lines[:k])


@pytest.mark.docker
@pytest.mark.agent
def test_a_batch_writes_within_its_total(big_workspace: Path, tmp_path: Path) -> None:
    """One job alone (200 MiB written), then a replay of two boundaries: past --max-output 300m, its jobs
    fail with kind output and nothing of them is written."""
    lines = [
        {"trajectory": str(WRITE_EDIT), "mode": "run", "workspace": str(big_workspace), "boundaries": [1]},
        {
            "trajectory": str(WRITE_EDIT),
            "mode": "run",
            "workspace": str(big_workspace),
            "boundaries": [2, 3],
            "allow_degraded": True,  # other options: a replay of its own
        },
    ]
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    out = tmp_path / "out"
    proc = replayer(
        "batch",
        "--trust-manifest",
        str(manifest),
        "-o",
        str(out),
        "-j",
        "1",
        "--max-output",
        "300m",
        "--json",
    )
    summary = orjson.loads(proc.stdout)
    assert (summary["done"], summary["failed"]) == (1, 2), (summary, proc.stderr)
    outcomes = orjson.loads((out / "batch.json").read_bytes())["outcomes"]
    failed = [o for o in outcomes if o["status"] != "done"]
    assert sorted((o["boundary"], o["error_kind"]) for o in failed) == [(2, "output"), (3, "output")]
    assert all("total output budget" in o["error"] for o in failed), failed
    assert _unique_bytes(out) <= 300 * MIB


@pytest.mark.docker
@pytest.mark.agent
def test_a_compare_whose_runs_would_pass_the_total_stops_and_says_so(tmp_path: Path) -> None:
    """The replay, the snapshot and every run draw on one total: four runs of about 28 KB each (a
    continuation with the mock, one at a time) after the replay and the snapshot pass 100 KB before the
    last; the run that would pass it is not kept, those after it are not run. The records that say so are
    written besides."""
    fixture = ROOT / "tests" / "fixtures" / "claude_code" / "single"
    out = tmp_path / "cmp"
    args = [
        "compare",
        str(fixture / "session.jsonl"),
        "-n",
        "1",
        "-w",
        str(fixture / "workspace"),
        "-o",
        str(out),
    ]
    args += ["--upstream", "mock", "-j", "1", "--limits", "output=100k", "--json"]
    for name in "abcd":
        args += ["--variant", f"{name}="]
    proc = replayer(*args, env={"ANTHROPIC_API_KEY": "", "REPLAYER_UPSTREAM": ""})
    assert proc.returncode == 7, proc.stderr
    assert "would pass the compare's total output budget" in proc.stderr
    result = orjson.loads((out / "compare.json").read_bytes())
    assert "would pass the compare's total output budget" in result["stopped"]
    statuses = [(r["status"], r["error_kind"]) for r in result["runs"]]
    refused = statuses.index(("failed", "output"))
    assert refused >= 1 and statuses[:refused] == [("ok", None)] * refused, statuses
    assert statuses[refused:] == [("failed", "output")] * (4 - refused), statuses
    first, *later = result["runs"][refused:]
    assert {p.name for p in (out / first["dir"]).iterdir()} <= {"run.json", "fork.log"}, "nothing else kept"
    for run in later:
        assert run["error"].startswith("not run: ") and not (out / run["dir"]).exists()
    records = [out / "compare.json", out / "report.html", *out.glob("runs/*/*/run.json")]
    assert _unique_bytes(out) - sum(p.stat().st_size for p in records) <= 100 * 1024
    assert not (out / ".output-total").exists()


@pytest.mark.docker
@pytest.mark.agent
def test_the_total_spans_every_boundary_of_a_compare(tmp_path: Path) -> None:
    """`compare -n 1,2`: the one replay and both snapshots (about 87 KB written), boundary 1's run (about
    29 KB) and its records (23 KB) fit 150 KB; boundary 2's run (about 32 KB) would pass it, with what
    boundary 1 wrote."""
    out = tmp_path / "cmp"
    args = [
        "compare",
        str(WRITE_EDIT),
        "-n",
        "1,2",
        "-w",
        str(WRITE_EDIT.parent / "workspace"),
        "-o",
        str(out),
    ]
    args += ["--upstream", "mock", "-j", "1", "--limits", "output=150k", "--variant", "a=", "--json"]
    proc = replayer(*args, env={"ANTHROPIC_API_KEY": "", "REPLAYER_UPSTREAM": ""})
    assert proc.returncode == 7, proc.stderr
    first, second = (orjson.loads((out / f"after-{k}" / "compare.json").read_bytes()) for k in (1, 2))
    assert (first["stopped"], [r["status"] for r in first["runs"]]) == (None, ["ok"])
    assert [(r["status"], r["error_kind"]) for r in second["runs"]] == [("failed", "output")]
    assert "would pass the compare's total output budget" in second["stopped"]
    rows = orjson.loads((out / "summary.json").read_bytes())["boundaries"]
    assert [row["stopped"] is not None for row in rows] == [False, True]
    assert not (out / ".output-total").exists()


def test_a_worker_killed_while_it_draws_leaves_the_shared_total_readable(tmp_path: Path) -> None:
    """A batch's workers draw on one total (`SharedTotal`); one SIGKILLed in the middle of an update (the
    batch test that kills a worker found it) left an empty file, which reads as the total used up: every
    later job of that batch failed with kind `output`. Real processes killed at random moments while they
    draw; after each kill the total reads, and holds at least what was drawn before it."""
    import random
    import signal
    import time

    from replayer.floor.output_budget import SharedTotal

    path = tmp_path / ".output-total"
    total = SharedTotal.create(path, 10**12)
    left = total.left()
    for _ in range(200):
        pid = os.fork()
        if pid == 0:  # the worker: draws until it is killed
            try:
                while True:
                    total.draw(1, force=True)
            finally:
                os._exit(0)
        time.sleep(random.uniform(0, 0.003))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        now = total.left()
        assert 0 < now <= left, path.read_bytes()
        left = now
