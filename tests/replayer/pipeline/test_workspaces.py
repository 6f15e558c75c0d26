"""The starting state: `--workspace git+URL@REV` (a repository cloned once into a cache and checked out,
tested with a local file:// repository) and `--image auto` (the environment image the trajectory names)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import orjson
import pytest

from replayer.floor.errors import WorkspaceError
from replayer.floor.requests import GitWorkspace, ReplayRequest
from replayer.pipeline.workspaces import checkout
from tests.conftest import CLAUDE, ROOT, replayer

PARALLEL = CLAUDE.fixture("parallel")
DEEPSEEK = (
    ROOT / "tests" / "fixtures" / "field" / "mini_swe_agent" / "deepseek-v2.2.7-sqlfluff-2419.traj.json"
)


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}
    ident = ["-c", "user.name=t", "-c", "user.email=t@example.com"]
    proc = subprocess.run(
        ["git", *ident, "-C", str(repo), *args], capture_output=True, text=True, check=True, env=env
    )
    return proc.stdout.strip()


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """A repository whose first commit is the parallel scenario's workspace (tag v1, branch `start`) and
    whose `main` has one more commit; returns it with both commit ids."""
    repo = tmp_path_factory.mktemp("origin")
    _git(repo, "init", "-q", "-b", "main")
    for name in ("a.txt", "hello.py"):
        shutil.copy(PARALLEL / "workspace" / name, repo / name)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "start")
    first = _git(repo, "rev-parse", "HEAD")
    _git(repo, "tag", "v1")
    _git(repo, "branch", "start")
    (repo / "a.txt").write_text("changed\n")
    _git(repo, "commit", "-q", "-am", "later")
    return repo, first, _git(repo, "rev-parse", "HEAD")


def _files(tree: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in tree.iterdir() if p.is_file()}


def test_a_commit_tag_branch_or_short_id_is_checked_out(origin: tuple[Path, str, str]) -> None:
    repo, first, later = origin
    url = f"file://{repo}"
    tree, done = checkout(GitWorkspace(url=url, rev=first))
    assert (done.commit, _files(tree)) == (first, _files(PARALLEL / "workspace"))
    assert _git(tree, "status", "--porcelain") == "" and _git(tree, "remote", "get-url", "origin") == url
    assert _git(tree, "rev-parse", "--abbrev-ref", "HEAD") == "HEAD", "a commit is checked out detached"
    assert _git(tree, "rev-list", "--count", "--all") == "2", "the whole history, as the session saw it"
    assert checkout(GitWorkspace(url=url, rev="v1"))[1].commit == first
    assert checkout(GitWorkspace(url=url, rev=first[:10]))[1].commit == first
    tree, done = checkout(GitWorkspace(url=url, rev="main"))
    assert done.commit == later and _git(tree, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    tree, done = checkout(GitWorkspace(url=url, rev="start"))
    assert done.commit == first and _git(tree, "rev-parse", "--abbrev-ref", "HEAD") == "start"


def test_a_full_commit_id_is_taken_from_the_cache(origin: tuple[Path, str, str], tmp_path: Path) -> None:
    repo, _, later = origin
    moved = tmp_path / "origin"
    shutil.copytree(repo, moved)
    url = f"file://{moved}"
    tree, _ = checkout(GitWorkspace(url=url, rev=later))
    shutil.rmtree(moved)  # gone: only the cache can answer now
    assert checkout(GitWorkspace(url=url, rev=later))[0] == tree
    with pytest.raises(WorkspaceError, match="cannot check out"):
        checkout(GitWorkspace(url=url, rev="main"))  # a branch moves: it is always fetched


@pytest.mark.parametrize(
    ("spec", "url", "rev"),
    [
        ("git+file:///srv/repo@v1", "file:///srv/repo", "v1"),
        ("git+git@github.com:o/r.git@0f022a0", "git@github.com:o/r.git", "0f022a0"),
        ("git+https://example.com/o/r@feature/x", "https://example.com/o/r", "feature/x"),
    ],
)
def test_a_git_workspace_spec_is_split_at_its_last_at(spec: str, url: str, rev: str, tmp_path: Path) -> None:
    request = ReplayRequest(mode="run", trajectory=tmp_path, after_step=1, out=tmp_path, workspace=spec)
    assert request.workspace == GitWorkspace(url=url, rev=rev)
    assert ReplayRequest.model_validate_json(request.model_dump_json()).workspace == request.workspace


@pytest.mark.parametrize(
    ("spec", "code", "message"),
    [
        ("git+file:///no/such/repository@v1", 5, "cannot check out git+file:///no/such/repository@v1: "),
        ("git+file:///srv/repo", 2, "git+URL@REV"),
        ("git+file:///srv/repo@-x", 2, "--workspace"),
    ],
)
def test_a_bad_git_workspace_is_refused_in_one_line(
    spec: str, code: int, message: str, tmp_path: Path
) -> None:
    proc = replayer("run", str(PARALLEL / "session.jsonl"), "-n", "2", "-w", spec, "-o", str(tmp_path / "o"))
    assert proc.returncode == code and message in proc.stderr, proc.stderr
    if code != 2:  # typer's usage errors frame the message in a box
        assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_a_commit_the_repository_lacks_is_refused(origin: tuple[Path, str, str]) -> None:
    with pytest.raises(WorkspaceError, match="is no commit, tag or branch"):
        checkout(GitWorkspace(url=f"file://{origin[0]}", rev="no-such-branch"))


def test_image_auto_needs_an_image_the_trajectory_names(tmp_path: Path) -> None:
    proc = replayer(
        "run", str(PARALLEL / "session.jsonl"), "-n", "2", "-w", str(PARALLEL / "workspace"), "-o",
        str(tmp_path / "o"), "--image", "auto",
    )  # fmt: skip
    assert proc.returncode == 4 and "names no environment image" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.agent
@pytest.mark.docker
def test_a_run_starts_from_the_repository_at_the_commit(
    origin: tuple[Path, str, str], tmp_path: Path
) -> None:
    repo, first, _ = origin
    out = tmp_path / "out"
    spec = f"git+file://{repo}@{first}"
    replayer("run", str(PARALLEL / "session.jsonl"), "-n", "2", "-w", spec, "-o", str(out), check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    assert [d["status"] for d in result["divergences"]] == ["exact"] * 4, "the commit is the starting state"
    assert result["workspace_checkout"] == {"url": f"file://{repo}", "rev": first, "commit": first}
    assert result["request"]["workspace"] == {"url": f"file://{repo}", "rev": first}
    assert (out / "state" / "workspace" / ".git").is_dir()


@pytest.mark.agent
@pytest.mark.docker
def test_image_auto_runs_the_image_the_trajectory_names(docker_client, tmp_path: Path) -> None:
    """The SWE-bench instance image is not reachable here: the base image is tagged with its name."""
    from replayer.floor.pins import load_pins

    named = orjson.loads(replayer("inspect", str(DEEPSEEK), "--json", check=True).stdout)["environment_image"]
    empty = tmp_path / "workspace"
    empty.mkdir()
    args = ["run", str(DEEPSEEK), "-n", "1", "-w", str(empty), "--image", "auto"]
    if any(named in tag for image in docker_client.images.list() for tag in image.tags):
        docker_client.images.remove(named)
    missing = replayer(*args, "-o", str(tmp_path / "missing"))
    assert missing.returncode == 6 and f"image {named!r} is not in the Docker engine" in missing.stderr
    base = docker_client.images.get(load_pins().base_image.tag)
    base.tag(named)
    try:
        replayer(*args, "-o", str(tmp_path / "out"), check=True)
    finally:
        docker_client.images.remove(named)
    result = orjson.loads((tmp_path / "out" / "result.json").read_bytes())
    assert (result["image"], result["image_id"]) == (named, base.id)


def test_a_batch_manifest_names_a_repository_as_workspace(tmp_path: Path) -> None:
    from replayer.verbs.batch_jobs import expand
    from replayer.verbs.batch_manifest import read_manifest

    lines = [
        {
            "trajectory": str(PARALLEL / "session.jsonl"),
            "mode": "replay",
            "workspace": f"git+{u}@v1",
            "boundaries": [2],
        }
        for u in ("file:///srv/a", "file:///srv/b")
    ]
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(b"\n".join(orjson.dumps(line) for line in lines))
    entries = read_manifest(manifest, trusted=True)  # ours: it names repositories to clone
    assert [e.workspace for _, e in entries] == [
        GitWorkspace(url="file:///srv/a", rev="v1"),
        GitWorkspace(url="file:///srv/b", rev="v1"),
    ]
    jobs = expand(entries, {})
    assert len({job.key for job in jobs}) == 2, "the repository is part of what keys a job"
