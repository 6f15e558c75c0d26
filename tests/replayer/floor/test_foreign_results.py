"""A downloaded results folder is someone else's (issue 42, Why 8): `export`, `view` (a replay's report and a
folder's index), compare's timeline and batch resume read it through replayer/floor/foreign.py. A prefix
named by an absolute path, a prefix linked to /dev/zero, a continued session or `continued/` linked to a
host file, a trajectory linked elsewhere: refused in one line (or not used), the host file's text in no
output, memory bounded. Each folder is a real `replayer prepare` output, then tampered with. No Docker."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from replayer.adapters import by_name
from replayer.floor.errors import BadInput
from replayer.pipeline import timeline
from tests.conftest import CLAUDE, ROOT, replayer

MARKER = "HOST-SECRET-7f3a9c"
TRAJECTORY = CLAUDE.fixture("parallel") / "session.jsonl"
PROMPT = "Look at both files at once."
CONTINUATION = {
    "input_condition": "replayed_boundary_only",
    "gate": "accepted",
    "agent_status": "completed",
    "agent_exit_code": 0,
    "steps_used": 1,
    "model": None,
    "counters": {},
    "files": {"session": "continued/session.jsonl"},
    "duration_s": 1.0,
}
MEMORY = 3 << 30
"""The address space the tampered runs get: reading /dev/zero whole would pass it."""


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("prepared") / "prep"
    replayer("prepare", str(TRAJECTORY), "--after-step", "1", "--out", str(out), check=True)
    return out


def _downloaded(prepared: Path, tmp_path: Path, **result: object) -> Path:
    """A copy of the prepared folder, as downloaded, its result.json changed by `result`."""
    folder = tmp_path / "downloads" / "run"
    shutil.copytree(prepared, folder)
    data = orjson.loads((folder / "result.json").read_bytes())
    data.update(result)
    (folder / "result.json").write_bytes(orjson.dumps(data))
    return folder


def _host_session(tmp_path: Path) -> Path:
    """A host file someone's result points at: a real session whose prompt is the marker."""
    path = tmp_path / "host" / "session.jsonl"
    path.parent.mkdir()
    path.write_bytes(TRAJECTORY.read_bytes().replace(PROMPT.encode(), MARKER.encode()))
    return path


def _bounded(*args: str) -> subprocess.CompletedProcess[str]:
    """The real console entry point with its address space bounded: an unbounded read dies, not the box."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY, MEMORY))

    return subprocess.run(
        [sys.executable, "-m", "replayer.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        preexec_fn=limit,
        timeout=300,
    )


def _refused(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 3, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    assert all(w in proc.stderr for w in words), proc.stderr
    assert MARKER not in proc.stdout + proc.stderr


def _no_marker_below(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert MARKER.encode() not in path.read_bytes(), path


def test_export_refuses_a_prefix_named_by_an_absolute_path(prepared: Path, tmp_path: Path) -> None:
    host = tmp_path / "host-prefix.json"
    prefix = orjson.loads((prepared / "expected_prefix.json").read_bytes())
    host.write_bytes(orjson.dumps([*prefix, {"role": "user", "content": MARKER}]))
    folder = _downloaded(prepared, tmp_path, expected_prefix=str(host))
    out = tmp_path / "records.jsonl"
    _refused(_bounded("export", str(folder), "-o", str(out)), "an absolute name")
    assert not out.exists()


def test_export_refuses_a_prefix_linked_to_dev_zero_within_bounded_memory(
    prepared: Path, tmp_path: Path
) -> None:
    folder = _downloaded(prepared, tmp_path)
    (folder / "expected_prefix.json").unlink()
    (folder / "expected_prefix.json").symlink_to("/dev/zero")
    out = tmp_path / "records.jsonl"
    _refused(_bounded("export", str(folder), "-o", str(out)), "expected_prefix.json", "a link")
    assert not out.exists()


@pytest.mark.parametrize("linked", ["file", "folder"])
def test_export_and_view_refuse_a_continued_session_through_a_link(
    prepared: Path, tmp_path: Path, linked: str
) -> None:
    """continued/session.jsonl as a link to a host session, or continued/ as a link to a host folder."""
    host = _host_session(tmp_path)
    folder = _downloaded(prepared, tmp_path, continuation=CONTINUATION)
    if linked == "file":
        (folder / "continued").mkdir()
        (folder / "continued" / "session.jsonl").symlink_to(host)
    else:
        (folder / "continued").symlink_to(host.parent)
    out = tmp_path / "records.jsonl"
    _refused(_bounded("export", str(folder), "-o", str(out)), "continued", "a link")
    _refused(_bounded("export", str(folder), "--format", "atif", "-o", str(out)), "a link")
    _refused(_bounded("view", str(folder)), "a link")
    assert not out.exists() and not (folder / "report.html").exists()
    index = _bounded("view", str(folder.parent))  # the folder's index: the run listed with why, no report
    assert index.returncode == 0, index.stderr
    assert MARKER not in index.stdout + index.stderr
    _no_marker_below(folder.parent)


def test_compare_timeline_refuses_a_continued_session_through_a_link(prepared: Path, tmp_path: Path) -> None:
    """The timeline a compare run shows after the boundary is read from the run's folder the same way."""
    folder = _downloaded(prepared, tmp_path, continuation=CONTINUATION)
    (folder / "continued").mkdir()
    (folder / "continued" / "session.jsonl").symlink_to(_host_session(tmp_path))
    expected = orjson.loads((folder / "expected_prefix.json").read_bytes())
    with pytest.raises(BadInput, match="is a link"):
        timeline.continued(by_name("claude_code"), folder, expected, None)


def test_a_continued_session_that_is_a_plain_file_is_still_read(prepared: Path, tmp_path: Path) -> None:
    folder = _downloaded(prepared, tmp_path, continuation=CONTINUATION)
    (folder / "continued").mkdir()
    shutil.copy(_host_session(tmp_path), folder / "continued" / "session.jsonl")
    out = tmp_path / "records.jsonl"
    replayer("export", str(folder), "-o", str(out), check=True)
    assert MARKER in out.read_text()  # the folder's own file: its text is the export's


def test_export_does_not_use_a_trajectory_that_is_a_link_or_another_file(
    prepared: Path, tmp_path: Path
) -> None:
    """`result.request.trajectory` names a host path someone else chose: a link there is not followed, and
    a file that is not the trajectory the result was made from (its SHA-256) is not used."""
    from replayer.verbs.export import _session_model

    sha = orjson.loads((prepared / "result.json").read_bytes())["source_sha256"]
    real = ROOT / TRAJECTORY
    assert _session_model(real, sha) is not None
    link = tmp_path / "session.jsonl"
    link.symlink_to(real)
    assert _session_model(link, sha) is None
    other = _host_session(tmp_path)  # a real session, not the one the result was made from
    assert _session_model(other, sha) is None


def test_batch_resume_reads_outcomes_and_results_without_links(tmp_path: Path) -> None:
    """A batch folder copied from elsewhere: an outcome or a result.json that is a link counts as none."""
    from replayer.verbs.batch import _has_result, _stored_outcome

    host = tmp_path / "host"
    host.mkdir()
    outcome = {
        "line": 1,
        "boundary": 1,
        "key": "k",
        "trajectory": "t",
        "mode": "replay",
        "status": "failed",
        "error": MARKER,
    }
    (host / "k.json").write_bytes(orjson.dumps(outcome))
    (host / "result.json").write_bytes(b"{}")
    out = tmp_path / "batch"
    (out / "outcomes").mkdir(parents=True)
    (out / "jobs" / "k").mkdir(parents=True)
    (out / "outcomes" / "k.json").symlink_to(host / "k.json")
    (out / "jobs" / "k" / "result.json").symlink_to(host / "result.json")
    assert _stored_outcome(out, "k") is None
    assert not _has_result(out, "k")
    os.unlink(out / "outcomes" / "k.json")
    shutil.copy(host / "k.json", out / "outcomes" / "k.json")
    stored = _stored_outcome(out, "k")
    assert stored is not None and stored.error == MARKER  # a plain file of the folder is read


def test_the_reader_refuses_what_is_not_a_plain_file_inside_the_folder(tmp_path: Path) -> None:
    """A FIFO (opened without blocking), `..`, a link on the way, a bound that would cut: one line each."""
    from replayer.floor.foreign import Folder

    (tmp_path / "outside.json").write_text("[1]")
    root = tmp_path / "run"
    (root / "sub").mkdir(parents=True)
    os.mkfifo(root / "fifo.json")
    (root / "big.json").write_bytes(b"[" + b"0," * 100 + b"0]")
    (root / "hop").symlink_to(root / "sub")
    (root / "sub" / "ok.json").write_text('{"a": 1}')
    with Folder.open(root) as folder:
        for name, words in [
            ("fifo.json", "a FIFO"),
            ("../outside.json", "leaves the folder"),
            (str(tmp_path / "outside.json"), "an absolute name"),
            ("hop/ok.json", "a link"),
            ("big.json", "more than the 64-byte bound"),
        ]:
            with pytest.raises(BadInput, match=words) as refused:
                folder.read(name, max_bytes=64)
            assert "\n" not in str(refused.value)
        assert folder.json("sub/ok.json") == {"a": 1}
        assert [folder.kind(n) for n in ("sub", "hop", "hop/ok.json", "fifo.json", "none", "big.json/x")] == [
            "dir",
            "link",
            "link",
            "other",
            "missing",
            "missing",
        ]


def test_a_results_folder_the_user_names_through_a_link_is_read(prepared: Path, tmp_path: Path) -> None:
    """The link the user typed is theirs (as for their input files); only what is below it is not followed."""
    named = tmp_path / "mine"
    named.symlink_to(_downloaded(prepared, tmp_path))
    replayer("export", str(named), "-o", str(tmp_path / "records.jsonl"), check=True)
    replayer("view", str(named), check=True)
    assert (named / "report.html").is_file()


@pytest.mark.parametrize("linked", ["manifest", "cassette"])
def test_a_folder_of_cassettes_is_read_without_links(tmp_path: Path, linked: str) -> None:
    """`--cassette DIR` names a folder of cassettes: a candidate's cassette.json, or a candidate itself, that
    is a link to a host file or folder is refused, never read (its text would show in the refusal)."""
    from replayer.adapters import detect
    from replayer.floor.errors import CassetteError
    from replayer.pipeline import cassette

    host = tmp_path / "host"
    host.mkdir()
    (host / cassette.MANIFEST).write_bytes(orjson.dumps({"schema_version": MARKER}))
    folder = tmp_path / "cassettes"
    folder.mkdir()
    if linked == "manifest":
        (folder / "one").mkdir()
        (folder / "one" / cassette.MANIFEST).symlink_to(host / cassette.MANIFEST)
    else:
        (folder / "one").symlink_to(host)
    adapter = detect(ROOT / TRAJECTORY)
    with pytest.raises(CassetteError) as refused:
        cassette.select(folder, adapter.parse(ROOT / TRAJECTORY), 1)
    assert "a link" in str(refused.value) and MARKER not in str(refused.value)


@pytest.mark.parametrize("inner", ["jobs", "outcomes", "ledgers"])
def test_a_batch_folder_whose_own_folders_link_elsewhere_is_refused_and_the_target_untouched(
    tmp_path: Path, inner: str
) -> None:
    """A downloaded batch DIR resumed with `jobs` linked to the user's home: the start removes the hidden
    folders a killed worker left in `jobs` (`.partial-*`), which through the link were the home's `.ssh`."""
    victim = tmp_path / "home"
    (victim / ".ssh").mkdir(parents=True)
    (victim / ".ssh" / "id_ed25519").write_text(MARKER)
    out = tmp_path / "batch"
    out.mkdir()
    (out / inner).symlink_to(victim)
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(orjson.dumps({"trajectory": str(TRAJECTORY), "mode": "prepare", "boundaries": [1]}))
    proc = replayer("batch", str(manifest), "-o", str(out), "--trust-manifest")
    assert proc.returncode == 7, proc.stderr
    assert proc.stderr.count("\n") == 1 and f"{out / inner} is a link" in proc.stderr, proc.stderr
    assert sorted(p.name for p in victim.iterdir()) == [".ssh"], "nothing written into the link's target"
    assert (victim / ".ssh" / "id_ed25519").read_text() == MARKER
