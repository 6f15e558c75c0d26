"""The initial workspace: a directory as it is, or a repository (`git+URL@REV`) cloned once into a cache
beside the bundle cache and checked out at REV; either way the run copies it and never modifies it."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from replayer import settings
from replayer.errors import WorkspaceError, excerpt
from replayer.models import GitCheckout, GitWorkspace
from replayer.pins import bundles_root

_FULL_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",  # a private repository fails instead of waiting for a password
    "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
    "GIT_CONFIG_NOSYSTEM": "1",
}
_GIT_CONFIG = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "protocol.ext.allow=never",
    "-c",
    "advice.detachedHead=false",
)


def cache_root() -> Path:
    """The `workspaces` setting (REPLAYER_WORKSPACES, replayer.toml), else `workspaces/` beside the bundle
    cache."""
    return settings.load().workspaces or bundles_root().parent / "workspaces"


def materialize(workspace: Path | GitWorkspace | None) -> tuple[Path | None, GitCheckout | None]:
    """The directory to copy as the workspace, and the checkout it came from (None for a directory)."""
    if not isinstance(workspace, GitWorkspace):
        return workspace, None
    return checkout(workspace)


def checkout(repo: GitWorkspace) -> tuple[Path, GitCheckout]:
    """The repository checked out at `repo.rev`, with its whole history and `origin` set to the URL (what
    the session's own `git log` and `git remote` saw). A full commit id already in the cache is used without
    fetching; anything else (a tag, a branch, a short id) is resolved by a fresh clone."""
    folder = cache_root() / hashlib.sha256(repo.url.encode()).hexdigest()[:16]
    if _FULL_COMMIT.match(repo.rev) and (folder / repo.rev / ".git").is_dir():
        return folder / repo.rev, GitCheckout(url=repo.url, rev=repo.rev, commit=repo.rev)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".clone-", dir=folder))
    try:
        _git(repo, "clone", "--quiet", "--no-checkout", "--template=", "--", repo.url, str(tmp))
        branch = _resolve(repo, tmp, f"refs/remotes/origin/{repo.rev}")
        commit = branch or _resolve(repo, tmp, repo.rev)
        if not commit:
            raise WorkspaceError(
                f"{repo.spec}: {excerpt(repo.rev)} is no commit, tag or branch of {repo.url}"
            )
        if branch:  # a branch name: on that branch, as the session was
            _git(repo, "-C", str(tmp), "checkout", "--quiet", "-B", repo.rev, f"origin/{repo.rev}")
        else:
            _git(repo, "-C", str(tmp), "checkout", "--quiet", "--detach", commit)
        # a branch's checkout differs from the detached one only in HEAD; a moved branch has a new commit
        done = folder / (
            f"{commit}-{hashlib.sha256(repo.rev.encode()).hexdigest()[:8]}" if branch else commit
        )
        try:
            tmp.rename(done)
        except OSError:  # another run checked out the same commit meanwhile: the same tree
            shutil.rmtree(tmp)
        return done, GitCheckout(url=repo.url, rev=repo.rev, commit=commit)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _resolve(repo: GitWorkspace, clone: Path, name: str) -> str:
    """The commit `name` names in the clone, or "" when it names none."""
    return _git(
        repo, "-C", str(clone), "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}", missing_ok=True
    )


def _git(repo: GitWorkspace, *args: str, missing_ok: bool = False) -> str:
    """git's output; a failure is a WorkspaceError with git's last line, or "" with `missing_ok`."""
    proc = subprocess.run(
        ["git", *_GIT_CONFIG, *args],
        capture_output=True,
        text=True,
        env={**os.environ, **_GIT_ENV},
        check=False,
    )
    if proc.returncode != 0 and missing_ok:
        return ""
    if proc.returncode != 0:
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        cause = lines[-1].strip() if lines else f"git exited {proc.returncode}"
        raise WorkspaceError(f"cannot check out {repo.spec}: {cause}")
    return proc.stdout.strip()
