"""`replayer trust`: the folders whose replayer.toml the user trusts, kept as `trusted = [...]` in the user's
own settings file (git's safe.directory, direnv's allow). The file is rewritten atomically, the rest of it
as it was: the one `trusted` line goes first (before any table), and the result is read back to make sure
it says what the old file said, with the new list."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path

import orjson

from replayer.floor import settings
from replayer.floor.errors import SettingsError
from replayer.floor.io import write_bytes_atomic

_KEY = re.compile(r"^\s*trusted\s*=")
_TABLE = re.compile(r"^\s*\[")


def add(folder: Path, environ: Mapping[str, str] | None = None) -> list[Path]:
    """Trust `folder` (an existing directory, kept with its links resolved); the list after the change."""
    if not folder.is_dir():
        raise SettingsError(f"{folder}: not a folder (replayer trust DIR)")
    real = Path(os.path.realpath(folder))
    found = settings.trusted_folders(environ)
    if not settings.is_trusted(real, found):
        _write([*found, real], environ)
    return settings.trusted_folders(environ)


def remove(folder: Path, environ: Mapping[str, str] | None = None) -> list[Path]:
    """Trust `folder` no more (however the user's file names it); the list after the change."""
    found = settings.trusted_folders(environ)
    kept = [each for each in found if not settings.is_trusted(folder, [each])]
    if len(kept) != len(found):
        _write(kept, environ)
    return settings.trusted_folders(environ)


def _write(folders: list[Path], environ: Mapping[str, str] | None) -> None:
    path = settings.user_file(environ)
    old = path.read_text() if os.path.lexists(path) else ""
    try:
        names = [orjson.dumps(str(f)).decode() for f in folders]  # a JSON string is a TOML basic string
    except TypeError:
        raise SettingsError(f"{folders[-1]}: a folder name that is not UTF-8 cannot be trusted") from None
    new = f"trusted = [{', '.join(names)}]\n" + _without_trusted(old)
    expected = {k: v for k, v in tomllib.loads(old).items() if k != "trusted"} | {
        "trusted": [str(f) for f in folders]
    }
    if tomllib.loads(new) != expected:
        raise SettingsError(f"{path}: cannot rewrite its `trusted` list safely; edit it by hand")
    write_bytes_atomic(path, new.encode())
    settings.forget()


def _without_trusted(text: str) -> str:
    """`text` without its top-level `trusted = ...` (which may span lines: up to the line that closes it)."""
    lines = text.splitlines(keepends=True)
    for start, line in enumerate(lines):
        if _TABLE.match(line):
            break
        if _KEY.match(line):
            for end in range(start + 1, len(lines) + 1):
                rest = "".join(lines[:start] + lines[end:])
                try:
                    if "trusted" not in tomllib.loads(rest):
                        return rest
                except tomllib.TOMLDecodeError:
                    continue
    return text
