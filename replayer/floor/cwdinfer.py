"""The working directory a file that records none reveals: the paths its calls name, the directory its
commands change into. Each adapter says which of its calls' fields hold what (`Reader.inferred_cwd`)."""

from __future__ import annotations

import posixpath
import re
import shlex
from collections.abc import Iterable

_CD = re.compile(r"^\s*cd\s+(\S+)\s*(?:&&|;|\n)")
_ABSOLUTE = re.compile(r"(?:^|(?<=[\s'\"`=:,(>]))(/[^\s'\"`;|&<>(),]*)")
"""An absolute path where a word, a quoted string, an option's value or a redirection's target starts."""
SYSTEM_DIRS = ("/dev", "/proc", "/sys", "/tmp", "/usr", "/bin", "/sbin", "/lib", "/lib64", "/etc", "/opt", "/var",
               "/run")  # fmt: skip
"""The image's own directories: a path in them names no place of the workspace."""


def absolute(path: object) -> str | None:
    """`path` as a normalized absolute POSIX path, or None when it is no plain one."""
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
        return None
    parts = path.split("/")[1:]
    if path != "/" and {".", ".."} & set(parts):
        return None
    return posixpath.normpath(path)


def is_absolute_cwd(cwd: str) -> bool:
    """Whether a recorded cwd can be a container's working directory (absolute and normalized)."""
    return absolute(cwd) == cwd


def common_directory(directories: Iterable[str]) -> str | None:
    """The deepest directory holding every one of `directories` (absolute), None for none or for `/`."""
    found = [d for d in (absolute(d) for d in directories) if d is not None]
    if not found:
        return None
    common = posixpath.commonpath(found)
    return common if common != "/" else None


def cd_target(commands: Iterable[str]) -> str | None:
    """The absolute directory the first command that starts with `cd DIR &&` changes into (mini-swe-agent's
    commands run in a fresh shell each, so a run that works elsewhere starts every command so)."""
    for command in commands:
        match = _CD.match(command)
        if match is None:
            continue
        try:
            words = shlex.split(match.group(1))
        except ValueError:
            continue
        target = absolute(words[0]) if len(words) == 1 else None
        if target is not None and target != "/":
            return target
    return None


def workspace_path(values: Iterable[object]) -> str | None:
    """The first absolute path in `values` (call inputs: strings, nested in lists and dicts) that can name a
    place in the workspace (not `/` alone, nor a path in the image's own `SYSTEM_DIRS`), or None: a file
    whose calls name none runs in any directory that holds its workspace."""
    stack = list(values)
    stack.reverse()
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, list):
            stack.extend(reversed(value))
        elif isinstance(value, str) and "/" in value:
            for match in _ABSOLUTE.finditer(value):
                path = match.group(1).rstrip(".:")
                top = "/" + path.split("/")[1]
                if path != "/" and top != "/" and top not in SYSTEM_DIRS:
                    return path
    return None
