"""Windows paths as the container sees them: a session recorded on Windows (Claude Code from VS Code, its
Bash tool running in Git Bash; Codex with PowerShell) names `C:\\Users\\x\\proj`, `c:/Users/x/proj` and
`/c/Users/x/proj` for one directory. The replay maps them all to the form Git Bash gives it,
`/c/Users/x/proj` (the drive letter kept, lower case, under `/`), everywhere in the file: the working
directory, the calls' inputs, the observations and so the rebuilt session (docs/cli.md).

The mapping works on the file's bytes, JSON-encoded as they are, so every other byte stays the
recorded one: a path is a drive letter and a colon where no word goes on before it, then its separator
(`\\` encoded as `\\\\` in JSON, `\\\\\\\\` in a JSON string inside a JSON string, or `/`), then path
characters up to a space, a quote or another character no path of a command line holds."""

from __future__ import annotations

import re

_SEPARATORS = (rb"\\\\\\\\", rb"\\\\", rb"/")
"""How `\\` reads in the file: inside a JSON string inside a JSON string, inside a JSON string; then `/`."""
_PATH = re.compile(
    rb"(?:(?<=\\[nrt])|(?<![A-Za-z0-9_\\]))([A-Za-z]):(" + b"|".join(_SEPARATORS) + rb")"
    rb"((?:[^\s\"'`<>|*?,;:\\/]|(?:" + b"|".join(_SEPARATORS) + rb"))*)"
)
_DRIVE_CWD = re.compile(r"^[A-Za-z]:[\\/]")


def is_windows_path(path: str | None) -> bool:
    """Whether a recorded working directory is a Windows one (`C:\\...` or `c:/...`)."""
    return path is not None and _DRIVE_CWD.match(path) is not None


def posix_of(path: str) -> str:
    """`C:\\Users\\x` (or `c:/Users/x`) as Git Bash names it: `/c/Users/x`."""
    return to_posix(path.replace("\\", "\\\\").encode()).decode()


def to_posix(data: bytes) -> bytes:
    """Every Windows absolute path in `data` (JSON text) in its Git Bash form."""
    return _PATH.sub(_mapped, data)


def _mapped(match: re.Match[bytes]) -> bytes:
    drive, separator, rest = match.group(1), match.group(2), match.group(3)
    tail = rest.replace(separator, b"/") if separator != b"/" else rest
    return b"/" + drive.lower() + b"/" + tail
