"""The agent home is the sandbox's: the host writes into it without following links, and never reads it.

The home is mounted writable into the container, so after a rerun or a continuation anything in it may
be hostile: a symlink in place of `opencode.db` (SQLite and the CLI follow it to a host file), a config
folder with a plugin (code any `opencode` process using that home runs), a crafted database. Hence:

- the rerun's store is removed and the continued session exported by the CLI *inside the container*;
- the rebuilt session is imported by the CLI in a sandbox of its own (`cli_box`) into a fresh home holding
  only what the replayer wrote (its config and the import); that home is copied out without following a
  link, and the resulting store and config are then placed into the home with directory-FD walks that
  replace, never follow, whatever the sandbox left on the way.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.opencode import bundle, cli_box
from replayer.adapters.sandbox_paths import AGENT_HOME
from replayer.floor.errors import SandboxError, last_line
from replayer.sandboxes.base import Sandbox

CONFIG = ".config/opencode/opencode.json"
STORE_FILES = [bundle.DB, *(bundle.DB + suffix for suffix in ("-wal", "-shm", "-journal"))]
STORE_PATHS = [*STORE_FILES, bundle.STORAGE]
"""Everything a version's session store is: the SQLite store (1.2 on) or the JSON-file storage (before)."""
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _clear(name: str, dir_fd: int) -> None:
    """Remove the entry `name` of a directory, whatever it is (a link is removed, not followed)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


@contextlib.contextmanager
def _parent(root: Path, parts: list[str]) -> Iterator[int]:
    """A descriptor of root/parts[:-1], made a real directory on the way (an entry that is not one, a
    symlink included, is replaced)."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                    raise
                _clear(name, fd)
                os.mkdir(name, 0o755, dir_fd=fd)
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nfd
        yield fd
    finally:
        os.close(fd)


def place(root: Path, rel: str, data: bytes) -> None:
    """Write root/rel as a new regular file (temp + rename in its directory), following no link."""
    parts = rel.split("/")
    with _parent(root, parts) as dfd:
        tmp = f".{parts[-1]}.replayer-{os.getpid()}"
        _clear(tmp, dfd)
        fd = os.open(
            tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=dfd
        )
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileNotFoundError):  # a file is replaced by the rename, a directory is not
            if stat.S_ISDIR(os.stat(parts[-1], dir_fd=dfd, follow_symlinks=False).st_mode):
                _clear(parts[-1], dfd)
        os.rename(tmp, parts[-1], src_dir_fd=dfd, dst_dir_fd=dfd)


def remove(root: Path, rel: str) -> None:
    """Remove root/rel if it is there (nothing is followed; a missing parent means nothing to remove)."""
    parts = rel.split("/")
    fd = os.open(root, _DIR_FLAGS)
    try:
        for name in parts[:-1]:
            try:
                nfd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ELOOP, errno.ENOTDIR):
                    return
                raise
            os.close(fd)
            fd = nfd
        _clear(parts[-1], fd)
    finally:
        os.close(fd)


def place_config(home: Path, provider: str, model: str, base_url: str) -> None:
    config = bundle.config(provider, model, base_url)
    place(home, CONFIG, orjson.dumps(config, option=orjson.OPT_INDENT_2))


def import_session(
    home: Path, export: Path, info: dict[str, Any], provider: str, model: str, base_url: str
) -> str:
    """`opencode import` into a fresh home in the CLI's own sandbox (`cli_box`), then its store and config
    placed into `home`; returns the store's path relative to `home` (`bundle.DB`, or the session's file in
    `bundle.STORAGE`).

    The CLI runs in a sandbox, never on the host (its version is the trajectory's choice), and sees only what
    the replayer wrote: never `home`, which may hold the sandbox's files. What it wrote is copied out without
    following a link before the host opens any of it. The pinned CLI files an imported session under the
    importing process's directory: the recorded directory (where the continuation runs, in the sandbox) is
    written back; the WAL is folded in so that the store is one self-contained file (any store already in
    `home` is removed, a stale WAL included). A version before the SQLite store (1.1 and older) imports into
    JSON files under `bundle.STORAGE`: those are placed, the session file's directory written back the same
    way."""
    with cli_box.cli_home() as cli, tempfile.TemporaryDirectory(prefix="replayer-opencode-import-") as tmp:
        place_config(cli.home, provider, model, base_url)
        cli.run("import", cli.give(export))
        private = Path(tmp) / "home"
        cli.copy_out(private)
        for rel in STORE_PATHS:
            remove(home, rel)
        place_config(home, provider, model, base_url)
        if not (private / bundle.DB).is_file() and (private / bundle.STORAGE).is_dir():
            return _place_storage(private, home, info)
        with contextlib.closing(sqlite3.connect(private / bundle.DB)) as db:
            db.execute("PRAGMA trusted_schema = OFF")  # what the sandbox wrote: no schema-run functions
            _write_back(db, info)
            db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        place(home, bundle.DB, (private / bundle.DB).read_bytes())
        return bundle.DB


WRITTEN_BACK = ("directory", "path")
"""The session columns the import files under the importing process and the rebuild writes back. `path`
came with 1.14 (migration `add_session_path`): a store of 1.2-1.3 has no such column."""


def _write_back(db: sqlite3.Connection, info: dict[str, Any]) -> None:
    """The recorded directory (and path) into the imported session's row: only the columns the store of
    the importing version has (its `session` table, as that version's migrations left it)."""
    columns = {row[1] for row in db.execute("PRAGMA table_info(session)")}
    kept = [name for name in WRITTEN_BACK if name in columns]
    assignments = ", ".join(f"{name} = ?" for name in kept)
    db.execute(
        f"UPDATE session SET {assignments} WHERE id = ?", (*(info.get(k) for k in kept), info.get("id"))
    )
    db.commit()


def _place_storage(private: Path, home: Path, info: dict[str, Any]) -> str:
    """The JSON-file storage the CLI's import wrote into `private` (its home as copied out of its sandbox, no
    link in it), placed file by file into `home`; returns the session file's path relative to `home`."""
    root = private / bundle.STORAGE
    session = f"{info.get('id')}.json"
    found = ""
    for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(private).as_posix()
        data = path.read_bytes()
        if path.parent.parent.name == "session" and path.name == session:
            record = orjson.loads(data)
            record["directory"] = info.get("directory") or record.get("directory")
            data = orjson.dumps(record, option=orjson.OPT_INDENT_2)
            found = rel
        place(home, rel, data)
    if not found:
        raise SandboxError(f"opencode import wrote no session file {session} into its storage")
    return found


_EXPORTED = "/tmp/replayer-continued-export.json"


def container_export(sandbox: Sandbox, session_id: str) -> bytes:
    """`opencode export ID` run in the sandbox and read back whole (`bundle.run_in`)."""
    return bundle.run_in(sandbox, ["export", session_id], home=AGENT_HOME, stdout=_EXPORTED)


def remove_store(sandbox: Sandbox) -> None:
    """Remove the home's store inside the sandbox (the rebuild imports the session into a new one)."""
    paths = [f"{AGENT_HOME}/{rel}" for rel in STORE_PATHS]
    done = sandbox.exec(["rm", "-rf", "--", *paths], workdir="/", timeout_s=60)
    if done.exit_code != 0:
        raise SandboxError(
            f"could not remove the rerun's opencode store: {last_line(done.stderr) or 'rm failed'}"
        )
