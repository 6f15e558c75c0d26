"""What the host reads of what the sandbox wrote (issue 32 items 4, 7, 8; issue 36 item 4), each attack
rebuilt from its description: sparse files of many gigabytes (free under the quota) are hashed and diffed by
their data, not their holes; file names that are not UTF-8 are escaped, never a crash; the oracle walks the
live workspace by descriptors while a background process renames directories and swaps one for a link to a
host folder; a repository whose tree is larger than the run's disk limit is refused before it is checked out
and leaves nothing in the clone cache; a wrapped tool's error keeps the tool's own reason."""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

import orjson
import pytest

from replayer.bridges.scripted import Script, TextBlock, ToolUseBlock, Turn
from replayer.floor.errors import WorkspaceError
from replayer.floor.limits import SandboxLimits
from replayer.floor.requests import GitWorkspace
from replayer.floor.safecopy import walk
from replayer.pipeline.fork import workspace_diff
from replayer.pipeline.oracle import workspace_state
from replayer.pipeline.workspaces import cache_root, checkout
from tests.conftest import CLAUDE, replayer
from tests.support.continuing import KEY, scripted
from tests.support.sessions import patched_session

HOLES = 64 << 30
"""The apparent size of the sandbox's sparse files: read in full, each would take minutes."""
OUTSIDE = b"outside the workspace\n"


def _sparse(path: Path, size: int, data: bytes = b"", at: int = 0) -> None:
    with path.open("wb") as fh:
        fh.truncate(size)
        if data:
            fh.seek(at)
            fh.write(data)


def _git(repo: Path, *args: str) -> str:
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    return subprocess.run(
        ["git", *ident, "-C", str(repo), *args], capture_output=True, text=True, check=True
    ).stdout.strip()


# --- the walk and the digests, on the host's own file system (no sandbox needed to swap a directory) ---


def test_a_directory_swapped_for_a_link_during_the_walk_is_not_followed(tmp_path: Path) -> None:
    root, outside = tmp_path / "ws", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    (root / "a").write_text("a\n")
    for name in ("x", "y"):
        (root / "d" / name).write_text(name)
        (outside / name).write_bytes(OUTSIDE)
    entries = walk(root)
    assert next(entries).path == "a"
    (root / "d").rename(root / "moved")  # the sandbox renames while the host walks ...
    (root / "d").symlink_to(outside)  # ... and puts a link to a host folder in the directory's place
    rest = {e.path: stat.S_ISLNK(e.stat.st_mode) for e in entries}
    assert rest == {"d": True}, "the link is yielded as a link, the host folder's files are not"


def test_a_rename_inside_an_entered_directory_neither_crashes_nor_leads_out(tmp_path: Path) -> None:
    root, outside = tmp_path / "ws", tmp_path / "outside"
    (root / "d").mkdir(parents=True)
    outside.mkdir()
    for name in ("a", "b", "c"):
        (root / "d" / name).write_text(name)
        (outside / name).write_bytes(OUTSIDE)
    entries = walk(root)
    assert [next(entries).path for _ in range(2)] == ["d", "d/a"], "a directory, then what it holds"
    (root / "d").rename(root / "e")
    (root / "d").symlink_to(outside)
    (root / "e" / "c").unlink()
    # the walk goes on in the directory it opened, wherever it now is: b; c is gone, and the root's
    # listing was read before the swap
    assert [e.path for e in entries] == ["d/b"]
    state = workspace_state(root)
    assert hashlib.sha256(OUTSIDE).hexdigest() not in state.entries.values()
    assert state.entries == {
        "d": f"link:{outside}",
        "e/a": hashlib.sha256(b"a").hexdigest(),
        "e/b": hashlib.sha256(b"b").hexdigest(),
    }


def test_holes_are_hashed_by_their_length_and_kept_apart_from_data(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    _sparse(root / "holes", HOLES, b"x", at=HOLES // 2)
    _sparse(root / "only-holes", HOLES)
    (root / "empty").write_bytes(b"")
    (root / "dense").write_bytes(b"\0" * 4096)
    state = workspace_state(root)
    assert state.cut is None
    assert state.entries["holes"].startswith("sparse:") and state.entries["only-holes"].startswith("sparse:")
    assert len({state.entries[n] for n in ("holes", "only-holes", "empty")}) == 3, "a hole is not nothing"
    assert state.entries["dense"] == hashlib.sha256(b"\0" * 4096).hexdigest(), "a dense file: its SHA-256"
    _sparse(root / "holes", HOLES, b"y", at=HOLES // 2)
    assert workspace_state(root).entries["holes"] != state.entries["holes"], "the data counts"


def test_a_bound_that_cuts_the_read_is_said(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    for n in range(5):
        (root / f"f{n}").write_bytes(b"z" * 1000)
    by_files = workspace_state(root, SandboxLimits(copy_files=3))
    assert by_files.cut is not None and "more than 3 entries" in by_files.cut and len(by_files.entries) == 3
    by_bytes = workspace_state(root, SandboxLimits(disk_bytes=2500))
    assert by_bytes.cut is not None and "more than 2500 bytes" in by_bytes.cut
    assert workspace_state(root).cut is None


def test_the_workspace_diff_names_a_changed_sparse_file_and_escapes_names(tmp_path: Path) -> None:
    before, after = tmp_path / "a", tmp_path / "b"
    for side in (before, after):
        side.mkdir()
        _sparse(side / "holes", HOLES, b"x", at=HOLES // 2)
        (side / "same.py").write_text("print(1)\n")
    _sparse(after / "holes", HOLES, b"y", at=HOLES // 2)
    (after / os.fsdecode(b"caf\xe9.txt")).write_text("new\n")
    (after / "same.py").write_text("print(2)\n")
    text, cut = workspace_diff(before, after, SandboxLimits())
    assert "Files a/holes and b/holes differ (not diffed: sparse" in text
    assert "diff a/caf\\xe9.txt b/caf\\xe9.txt\n--- a/caf\\xe9.txt\n+++ b/caf\\xe9.txt\n" in text
    assert "-print(1)\n+print(2)\n" in text and not cut
    orjson.dumps(text)  # JSON holds it
    few, cut = workspace_diff(before, after, SandboxLimits(copy_files=2))
    assert cut and "read only in part: more than 2 entries" in few


# --- clones (a local repository: no network) ---


@pytest.fixture(scope="module")
def big_repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small repository (its pack is a few kB) whose tree holds a 64 MB compressible blob."""
    repo = tmp_path_factory.mktemp("big")
    _git(repo, "init", "-q", "-b", "main")
    (repo / "README").write_text("small\n")
    with (repo / "blob.bin").open("wb") as fh:
        for _ in range(64):
            fh.write(b"\0" * (1 << 20))
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "big")
    return repo


def test_a_tree_above_the_disk_limit_is_refused_before_checkout_and_leaves_nothing(big_repo: Path) -> None:
    repo = GitWorkspace(url=f"file://{big_repo}", rev="main")
    before = sorted(cache_root().rglob("*")) if cache_root().exists() else []
    with pytest.raises(WorkspaceError, match=r"more than the run's limits .*refused to check it out"):
        checkout(repo, SandboxLimits(disk_bytes=16 << 20))
    after = sorted(cache_root().rglob("*")) if cache_root().exists() else []
    assert after == before, "a refused clone leaves nothing in the cache"
    tree, done = checkout(repo, SandboxLimits(disk_bytes=128 << 20))
    assert (tree / "blob.bin").stat().st_size == 64 << 20 and done.commit == _git(
        big_repo, "rev-parse", "HEAD"
    )
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(tree.stat().st_mode) == 0o777 & ~umask, "the workspace root gets the normal mode"


def test_a_pack_above_the_disk_limit_ends_the_clone_and_leaves_nothing(tmp_path: Path) -> None:
    """20 MB that do not compress: the clone's own pack passes a 8 MB limit while it is fetched."""
    origin = tmp_path / "origin"
    origin.mkdir()
    _git(origin, "init", "-q", "-b", "main")
    (origin / "noise.bin").write_bytes(os.urandom(20 << 20))
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "noise")
    repo = GitWorkspace(url=f"file://{origin}", rev="main")
    folder_count = len(list(cache_root().iterdir())) if cache_root().exists() else 0
    with pytest.raises(WorkspaceError, match=r"objects pass the run's disk limit \(8388608 bytes\); refused"):
        checkout(repo, SandboxLimits(disk_bytes=8 << 20))
    assert (len(list(cache_root().iterdir())) if cache_root().exists() else 0) == folder_count


def test_run_refuses_the_clone_in_one_line(big_repo: Path, tmp_path: Path) -> None:
    spec = f"git+file://{big_repo}@main"
    session = CLAUDE.fixture("single") / "session.jsonl"
    cache = tmp_path / "cache"
    proc = replayer(
        "run", str(session), "-n", "1", "-w", spec, "-o", str(tmp_path / "o"), "--limits", "disk=16m",
        env={"REPLAYER_WORKSPACES": str(cache)},
    )  # fmt: skip
    assert proc.returncode == 5 and "refused to check it out (see --limits disk=" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not any(cache.rglob("*")) and not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    ("url", "cause"),
    [
        ("git@nonexistent.invalid:o/r.git", "Could not resolve hostname nonexistent.invalid"),
        ("file:///no/such/repository", "does not appear to be a git repository"),
    ],
)
def test_a_failed_clone_says_gits_own_reason(url: str, cause: str, tmp_path: Path) -> None:
    spec = f"git+{url}@0123456"
    proc = replayer(
        "run", str(CLAUDE.fixture("single") / "session.jsonl"), "-n", "1", "-w", spec, "-o", str(tmp_path / "o"),
        env={"REPLAYER_WORKSPACES": str(tmp_path / "cache")},
    )  # fmt: skip
    assert proc.returncode == 5 and f"cannot check out {spec}: " in proc.stderr, proc.stderr
    assert cause in proc.stderr and "the repository exists" not in proc.stderr, proc.stderr


def test_a_failed_npm_install_says_npms_reason(tmp_path: Path) -> None:
    """npm (its proxy on 127.0.0.1:9 answers nothing; npm takes no registry setting but the replayer's)
    prints its reason, then the error object, its stack, advice and the path of its log: the reason is
    what the one line keeps."""
    proxy = "http://127.0.0.1:9"
    proc = replayer(
        "bundles", "add", "opencode@1.0.0",
        env={"REPLAYER_BUNDLES": str(tmp_path / "bundles"), "HTTPS_PROXY": proxy, "https_proxy": proxy},
    )  # fmt: skip
    assert proc.returncode == 10 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert (
        "request to https://registry.npmjs.org/opencode-ai failed, reason: connect ECONNREFUSED"
        in proc.stderr
    )


# --- the attacks through a real sandbox ---


def _hostile_run(root: Path, command: str, turns: list[Turn] | None, *extra: str, json: bool = True) -> tuple:
    root.mkdir()
    session = patched_session(root / "session.jsonl", "toolu_single_01", {"command": command})
    workspace = root / "ws"
    shutil.copytree(CLAUDE.fixture("single") / "workspace", workspace)
    out = root / "out"
    args = ["run", str(session), "-n", "1", "-w", str(workspace), "-o", str(out), *extra]
    args += ["--json"] if json else []
    if turns is None:
        proc = replayer(*args)
    else:
        with scripted("claude_code", Script(turns=turns), expected_key=KEY) as upstream:
            proc = replayer(*args, "--continue", "--upstream", upstream.url, env={"ANTHROPIC_API_KEY": KEY})
    result = orjson.loads((out / "result.json").read_bytes()) if (out / "result.json").exists() else {}
    return proc, result, out


@pytest.mark.docker
@pytest.mark.agent
def test_a_skipped_fifo_and_link_with_names_that_are_not_utf8(tmp_path: Path) -> None:
    command = (
        "cd /testbed && mkfifo $'fifo-\\xff' && ln -s /etc $'link-\\xfe' && mkdir -p $HOME/.claude/projects/-testbed/df04a3bb-08cf-50e0-8e89-ad8ecf7e8717 && ln -s /etc $HOME/.claude/projects/-testbed/df04a3bb-08cf-50e0-8e89-ad8ecf7e8717/$'link-\\xfe' "
        f"&& printf hi > $'file-\\xfd' && truncate -s {HOLES} holes && echo done"
    )
    proc, result, out = _hostile_run(tmp_path / "names", command, None)
    assert proc.returncode == 0, proc.stderr
    skipped = result["sandbox"]["skipped"]
    assert "state/workspace/fifo-\\xff (fifo)" in skipped, skipped
    assert any(s.endswith("/link-\\xfe (symlink)") for s in skipped), "the agent home's link, left out"
    exported = out / "state" / "workspace"
    assert (exported / os.fsdecode(b"file-\xfd")).read_bytes() == b"hi"
    assert os.readlink(exported / os.fsdecode(b"link-\xfe")) == "/etc", "the workspace's link, kept as a link"
    holes = (exported / "holes").stat()
    assert holes.st_size == HOLES and holes.st_blocks == 0, "the hole stays a hole on the host"


@pytest.mark.docker
@pytest.mark.agent
def test_the_oracle_reads_the_live_workspace_by_descriptors(tmp_path: Path) -> None:
    """The prefix leaves a process that renames a directory of 2,000 files and swaps it for a link to a
    host folder (holding files of the same names) as fast as it can, and a 64 GB sparse file; the
    continuation writes a file with a name that is not UTF-8 and another sparse file. Recording a cassette
    hashes the workspace before and after the continuation, as the sandbox goes on."""
    outside = tmp_path / "host-folder"
    outside.mkdir()
    for n in range(2000):
        (outside / f"f{n}").write_bytes(OUTSIDE)
    swap = (
        "while :; do mv /testbed/d /testbed/e; ln -s " + str(outside) + " /testbed/d; rm /testbed/d; "
        "mv /testbed/e /testbed/d; date +%s%N > /testbed/tick; done"
    )
    command = (
        "mkdir /testbed/d && cd /testbed/d && for i in $(seq 0 1999); do echo $i > f$i; done && "
        f"truncate -s {HOLES} /testbed/holes && "
        f"(setsid nohup bash -c '{swap}' >/dev/null 2>&1 &) ; echo started"
    )
    write = f"printf new > $'/testbed/new-\\xff' && truncate -s {HOLES} /testbed/holes2 && echo wrote"
    turns = [
        Turn(blocks=[ToolUseBlock(id="toolu_write_1", name="Bash", input={"command": write})]),
        Turn(blocks=[TextBlock(text="Finished.")]),
    ]
    tape = tmp_path / "tape"
    # the swapping process must outlive the boundary (a real upstream ends leftovers by default)
    proc, result, _ = _hostile_run(
        tmp_path / "live", command, turns, "--record-cassette", str(tape), "--keep-leftovers"
    )
    assert proc.returncode == 0, proc.stderr
    assert result["continuation"]["cassette"]["verdict"] == "recorded", result["continuation"]["cassette"]
    changes = orjson.loads((tape / "outcome.json").read_bytes())["workspace_changes"]
    assert changes["new-\\xff"] == hashlib.sha256(b"new").hexdigest()
    assert changes["holes2"].startswith("sparse:")
    assert "tick" in changes, "the swapping process ran while the oracle read the workspace"
    assert hashlib.sha256(OUTSIDE).hexdigest() not in changes.values(), "the walk never left the workspace"
    assert not any(str(outside) in path for path in changes)


@pytest.mark.docker
@pytest.mark.agent
def test_compare_diffs_a_sparse_file_by_its_data_and_escapes_names(tmp_path: Path) -> None:
    """The prefix writes a 64 GB sparse file with one byte in its middle; a compare run's continuation
    changes that byte, writes a file whose name is not UTF-8 and edits another: the run's workspace diff
    names the sparse file without reading its holes (`diff -ruN` read 32 GB of each side to find the
    difference) and shows the others."""
    plant = f"truncate -s {HOLES} /testbed/holes && printf x | dd of=/testbed/holes bs=1 seek={HOLES // 2} conv=notrunc"
    session = patched_session(tmp_path / "session.jsonl", "toolu_single_01", {"command": plant})
    change = (
        f"printf y | dd of=holes bs=1 seek={HOLES // 2} conv=notrunc && printf 'made\\n' > $'made-\\xff' "
        "&& printf 'changed\\n' > a.txt && echo ok"
    )
    script = Script(
        by_history=True,
        turns=[
            Turn(blocks=[ToolUseBlock(id="toolu_sparse_1", name="Bash", input={"command": change})]),
            Turn(blocks=[TextBlock(text="Done.")]),
        ],
    )
    out = tmp_path / "cmp"
    with scripted("claude_code", script, expected_key=KEY) as upstream:
        proc = replayer(
            "compare", str(session), "-n", "1", "-w", str(CLAUDE.fixture("single") / "workspace"),
            "-o", str(out), "--upstream", upstream.url, "--variant", "base=", env={"ANTHROPIC_API_KEY": KEY},
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    run = orjson.loads((out / "compare.json").read_bytes())["runs"][0]
    assert run["status"] == "ok", run["error"]
    diff = run["workspace_diff"]
    assert "diff a/holes b/holes\nFiles a/holes and b/holes differ (not diffed: sparse" in diff, diff
    assert (
        "diff a/made-\\xff b/made-\\xff\n--- a/made-\\xff\n+++ b/made-\\xff\n@@ -0,0 +1 @@\n+made\n" in diff
    )
    assert "+changed" in diff and run["workspace_diff_truncated"] is False
    holes = (out / run["dir"] / "state" / "workspace" / "holes").stat()
    assert holes.st_size == HOLES and holes.st_blocks * 512 < 1 << 20, "the hole stays a hole on the host"


@pytest.mark.docker
@pytest.mark.agent
def test_a_sparse_file_in_the_agent_home_is_refused_before_the_host_reads_it(tmp_path: Path) -> None:
    """The adapters read the agent home's files whole (sessions): there a 64 GB sparse file counts as 64 GB
    against the disk limit, so the host never reads it into memory."""
    proc, _, out = _hostile_run(
        tmp_path / "home",
        f"mkdir -p $HOME/.claude/projects/-testbed/df04a3bb-08cf-50e0-8e89-ad8ecf7e8717 && truncate -s {HOLES} $HOME/.claude/projects/-testbed/df04a3bb-08cf-50e0-8e89-ad8ecf7e8717/session.jsonl && echo ok",
        None,
    )
    assert proc.returncode == 6, proc.stderr
    assert "the agent home holds more than" in proc.stderr and "holes counted" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.docker
@pytest.mark.agent
def test_a_bound_that_cuts_the_oracle_is_said_in_the_result_and_the_summary(tmp_path: Path) -> None:
    """The continuation makes 300 directories under `--limits files=200`: the copies count files (a few),
    the oracle's read counts every entry and stops at 200; the cassette is recorded with the cut in its
    outcome, and the result and the summary say it."""
    make = "mkdir -p $(seq -f /testbed/d%g 1 300) && echo made"
    turns = [
        Turn(blocks=[ToolUseBlock(id="toolu_dirs_1", name="Bash", input={"command": make})]),
        Turn(blocks=[TextBlock(text="Finished.")]),
    ]
    tape = tmp_path / "tape"
    cut = "the workspace state was read only in part: more than 200 entries (see --limits files=)"
    proc, result, _ = _hostile_run(
        tmp_path / "cut",
        "echo prefix",
        turns,
        "--record-cassette",
        str(tape),
        "--limits",
        "files=200",
        json=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert result["continuation"]["cassette"]["notes"] == [cut]
    assert f"cassette note: {cut}" in proc.stdout
    assert orjson.loads((tape / "outcome.json").read_bytes())["workspace_cut"] == cut
