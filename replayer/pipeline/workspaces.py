"""The initial workspace: a directory as it is, or a repository (`git+URL@REV`) cloned once into a cache
beside the bundle cache and checked out at REV; either way the run copies it and never modifies it."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import uuid
from pathlib import Path

from replayer.floor import hostproc, settings
from replayer.floor.errors import WorkspaceError, excerpt, last_line
from replayer.floor.limits import SandboxLimits
from replayer.floor.pins import bundles_root
from replayer.floor.requests import GitCheckout, GitWorkspace

_FULL_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_GIT_ENV = {
    "GIT_TERMINAL_PROMPT": "0",  # a private repository fails instead of waiting for a password
    "GIT_SSH_COMMAND": "ssh -o BatchMode=yes",
    "GIT_CONFIG_NOSYSTEM": "1",
}
_GIT_USER = ("HOME", "XDG_CONFIG_HOME", "SSH_AUTH_SOCK", "GIT_SSL_CAINFO")
"""The user's variables git reads for the user's own settings and credentials (a private repository)."""
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


def materialize(
    workspace: Path | GitWorkspace | None, limits: SandboxLimits | None = None
) -> tuple[Path | None, GitCheckout | None]:
    """The directory to copy as the workspace, and the checkout it came from (None for a directory)."""
    if not isinstance(workspace, GitWorkspace):
        return workspace, None
    return checkout(workspace, limits)


def checkout(repo: GitWorkspace, limits: SandboxLimits | None = None) -> tuple[Path, GitCheckout]:
    """The repository checked out at `repo.rev`, with its whole history and `origin` set to the URL (what
    the session's own `git log` and `git remote` saw). A full commit id already in the cache is used without
    fetching; anything else (a tag, a branch, a short id) is resolved by a fresh clone. The clone is bounded
    by the run's disk limit: no file it writes may pass it (a larger pack ends the clone), and its objects
    plus the tree's files (more of them than the file limit, too) are refused before the checkout; a
    refused or failed clone leaves nothing in the cache."""
    limits = limits or SandboxLimits()
    folder = cache_root() / hashlib.sha256(repo.url.encode()).hexdigest()[:16]
    if _FULL_COMMIT.match(repo.rev) and (folder / repo.rev / ".git").is_dir():
        return folder / repo.rev, GitCheckout(url=repo.url, rev=repo.rev, commit=repo.rev)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".clone-{uuid.uuid4().hex[:12]}"
    tmp.mkdir()  # the umask's mode, as a clone's own folders get (mkdtemp's 0700 would reach the sandbox)
    try:
        try:
            url = repo.url if ":" in repo.url else os.path.abspath(repo.url)  # git runs elsewhere (hostproc)
            clone = ("clone", "--quiet", "--no-checkout", "--template=", "--", url, str(tmp))
            _git(repo, *clone, file_limit=limits.disk_bytes)
        except WorkspaceError as exc:
            if "File too large" in str(exc):  # the bound: a write past it fails with EFBIG
                raise WorkspaceError(
                    f"{repo.spec}: the repository's objects pass the run's disk limit ({limits.disk_bytes} "
                    "bytes); refused to clone it (see --limits disk=)"
                ) from None
            raise
        branch = _resolve(repo, tmp, f"refs/remotes/origin/{repo.rev}")
        commit = branch or _resolve(repo, tmp, repo.rev)
        if not commit:
            raise WorkspaceError(
                f"{repo.spec}: {excerpt(repo.rev)} is no commit, tag or branch of {repo.url}"
            )
        _check_size(repo, tmp, commit, limits)
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
        with contextlib.suppress(OSError):
            folder.rmdir()  # only when no other checkout of the URL is there
        raise


def _check_size(repo: GitWorkspace, clone: Path, commit: str, limits: SandboxLimits) -> None:
    """Refuse a checkout whose files together pass the run's limits (the run copies all of it, `.git`
    included), from the objects' size on disk and the sizes git records for the tree (nothing is written
    out to learn them)."""
    listing = _git(repo, "-C", str(clone), "ls-tree", "-r", "-l", "-z", "--full-tree", commit, strip=False)
    files = 0
    total = sum(p.lstat().st_size for p in (clone / ".git").rglob("*") if not p.is_symlink() and p.is_file())
    for entry in filter(None, listing.split("\0")):
        size = entry.split("\t", 1)[0].split()[-1]
        files += 1
        total += int(size) if size.isdigit() else 0  # "-": a submodule, not checked out
    if files > limits.copy_files or total > limits.disk_bytes:
        raise WorkspaceError(
            f"{repo.spec}: its objects and tree hold {total} bytes in {files} files, more than the run's limits "
            f"({limits.disk_bytes} bytes, {limits.copy_files} files); refused to check it out "
            "(see --limits disk=, files=)"
        )


def _resolve(repo: GitWorkspace, clone: Path, name: str) -> str:
    """The commit `name` names in the clone, or "" when it names none."""
    return _git(
        repo, "-C", str(clone), "rev-parse", "--verify", "--quiet", f"{name}^{{commit}}", missing_ok=True
    )


def _git(
    repo: GitWorkspace,
    *args: str,
    missing_ok: bool = False,
    strip: bool = True,
    file_limit: int | None = None,
) -> str:
    """git's output; a failure is a WorkspaceError with git's last meaningful line, or "" with
    `missing_ok`. `file_limit`: the largest file git may write (RLIMIT_FSIZE, by util-linux's prlimit; with
    SIGXFSZ left ignored, as Python has it, a write past it fails with "File too large" instead of a
    silent kill)."""
    bound = ["prlimit", f"--fsize={file_limit}", "--"] if file_limit and shutil.which("prlimit") else []
    proc = hostproc.run(
        [*bound, "git", *_GIT_CONFIG, *args],
        capture_output=True,
        env={**hostproc.passed(*_GIT_USER, *hostproc.NETWORK), **_GIT_ENV},
        check=False,
        restore_signals=not bound,
    )
    if proc.returncode != 0 and missing_ok:
        return ""
    if proc.returncode != 0:
        cause = last_line(proc.stderr) or f"git exited {proc.returncode}"
        raise WorkspaceError(f"cannot check out {repo.spec}: {cause}")
    out = proc.stdout.decode(errors="surrogateescape")  # a file name need not be UTF-8
    return out.strip() if strip else out
