"""The one way the replayer starts a process on the host (tests/test_hostproc_guard.py keeps it the only one).

The user's working directory may be a downloaded dataset, and what a tool finds there it takes for its
project: uv reads a `uv.toml` or `pyproject.toml` (an index, a build backend it then runs), Python started
with `-m`/`-c` imports a `replayer/`, `venv/` or `multiprocessing/` package from it. So every process
started here:
- runs in a folder the replayer owns (`folder()`: made private and empty, never the user's working
  directory), or one the call names that the replayer made (a bundle being built);
- gets only the environment the call names, plus a fixed PATH (with the folder of the program it runs
  first, so that a `#!/usr/bin/env node` finds the node beside its npm); the program itself is looked up
  in the absolute folders of the user's PATH (never `.` or an empty entry, which mean the working
  directory);
- when it is Python, is isolated: `python(...)` adds `-I` (no working directory, no user site, no
  PYTHON* variables on its path), and `process_pool` starts multiprocessing's children the same way.
Package tools also get their no-configuration switches from their callers (installer.py): uv `--no-config`,
pip `--isolated`, npm its own user and global config files.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
"""Every started process's PATH, after the folder of the program it runs."""
NETWORK = (
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "all_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "REQUESTS_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
)
"""The user's variables a process that reaches a registry needs (a proxy, the certificates that trust it)."""
TimeoutExpired = subprocess.TimeoutExpired
SubprocessError = subprocess.SubprocessError
PIPE, DEVNULL, STDOUT = subprocess.PIPE, subprocess.DEVNULL, subprocess.STDOUT
Popen = subprocess.Popen
CompletedProcess = subprocess.CompletedProcess

_FOLDER: dict[int, Path] = {}


FOLDER_PREFIX = "replayer-proc-"
_FOLDER_NAME = re.compile(rf"{FOLDER_PREFIX}([0-9]{{1,9}})-")
"""A folder's name and its process's pid: ASCII digits, no more than a pid has (anyone can name an entry of
/tmp: `int` must not fail on it, nor `os.kill` overflow)."""


def folder() -> Path:
    """This process's folder for the processes it starts: private (0700), empty, made at first use and
    removed at exit (a process of its own, e.g. a pool worker, makes its own). A process killed (a Ray
    actor at the batch's end) leaves its folder: the next one made removes those of processes gone."""
    path = _FOLDER.get(os.getpid())
    if path is None or not path.is_dir():
        path = Path(tempfile.mkdtemp(prefix=f"{FOLDER_PREFIX}{os.getpid()}-"))
        atexit.register(shutil.rmtree, path, True)
        _FOLDER[os.getpid()] = path
        _remove_folders_of_processes_gone(path.parent)
    return path


def _remove_folders_of_processes_gone(temp: Path) -> None:
    """The folders in `temp` named by `folder()` for a process that no longer runs, this user's own
    directories only (not a link, not another user's)."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(temp):
            named = _FOLDER_NAME.match(entry.name)
            if named and not _runs(int(named[1])):
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid():
                        shutil.rmtree(entry.path, ignore_errors=True)


def _runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def passed(*names: str) -> dict[str, str]:
    """The user's variables of these names that are set (for an `env`: a call names what it passes on)."""
    return {name: os.environ[name] for name in names if name in os.environ}


def python(interpreter: str | os.PathLike[str], *args: str) -> list[str]:
    """argv of a Python interpreter started isolated (`-I`)."""
    return [os.fspath(interpreter), "-I", *args]


def program(name: str) -> str:
    """`name` as an absolute path: itself if it has a slash, else found in the absolute folders of the user's
    PATH, then in PATH; FileNotFoundError if it is in neither."""
    if "/" in name:
        return os.path.abspath(name) if os.path.isabs(name) else _refuse_relative(name)
    folders = [p for p in os.environ.get("PATH", "").split(os.pathsep) if os.path.isabs(p)]
    found = shutil.which(name, path=os.pathsep.join([*folders, PATH]))
    if found is None:
        raise FileNotFoundError(2, f"{name} is not installed (not found on PATH)", name)
    return found


def _refuse_relative(name: str) -> str:
    raise FileNotFoundError(2, f"{name}: a program is named by an absolute path or a bare name", name)


def _prepared(
    argv: Sequence[str | os.PathLike[str]], env: Mapping[str, str] | None, cwd: Path | None
) -> tuple[list[str], dict[str, str], Path]:
    args = [os.fspath(a) for a in argv]
    args[0] = program(args[0])
    named = dict(env or {})
    path = named.pop("PATH", None)
    return args, {**named, "PATH": path or f"{os.path.dirname(args[0])}:{PATH}"}, cwd or folder()


def run(
    argv: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    **options: Any,
) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run` of `argv` in `cwd` (default: `folder()`) with only `env` (and PATH). `cwd`, when
    given, must be a folder the replayer made."""
    args, environment, where = _prepared(argv, env, cwd)
    return subprocess.run(args, env=environment, cwd=where, **options)  # noqa: PLW1510 (the caller's check)


def start(
    argv: Sequence[str | os.PathLike[str]],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    **options: Any,
) -> subprocess.Popen[bytes]:
    """`subprocess.Popen` of `argv`, started as `run` starts it."""
    args, environment, where = _prepared(argv, env, cwd)
    return subprocess.Popen(args, env=environment, cwd=where, **options)


def process_pool(
    workers: int, initializer: Callable[..., object], initargs: tuple[Any, ...]
) -> ProcessPoolExecutor:
    """A pool of `workers` spawned processes whose interpreters start isolated.

    multiprocessing's spawn starts each child (and its resource tracker) as `python -c ...` in the parent's
    working directory, which puts that directory first on the child's path before it imports
    `multiprocessing.spawn`: a `multiprocessing/` folder there would run instead. The flags it copies from
    the parent are made to include `-I` (no wrapper program, which a noexec temp folder would refuse, and
    no change of the process's working directory, which every thread shares). A child still changes to the
    parent's working directory once it runs, for relative paths; its imports use the parent's path."""
    import multiprocessing
    import multiprocessing.util
    from concurrent.futures import ProcessPoolExecutor

    multiprocessing.util._args_from_interpreter_flags = _isolated_flags  # type: ignore[attr-defined]
    return ProcessPoolExecutor(
        max_workers=workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=initializer,
        initargs=initargs,
    )


def start_ray(ray: Any, **options: Any) -> None:
    """`ray.init(**options)` from `folder()`: Ray puts the driver's working directory on every worker's
    path, and a local cluster's processes (and so its workers) run in it."""
    with contextlib.chdir(folder()):
        ray.init(**options)


_PARENT_FLAGS = subprocess._args_from_interpreter_flags  # type: ignore[attr-defined]


def _isolated_flags() -> list[str]:
    flags: list[str] = [f for f in _PARENT_FLAGS() if f not in ("-I", "-E", "-s", "-P")]
    return ["-I", *flags]
