"""`replayer trust`: the folders whose files the user trusts, kept as `trusted = [...]` in the user's own
settings file (git's safe.directory), and the content each trusted file had then, kept as `pinned = {...}`
(direnv's allow: a file that changed is asked about again, `pinned.py`). The file is rewritten atomically,
the rest of it as it was: those two lines go first (before any table), and the result is read back to make
sure it says what the old file said, with the new list and pins."""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path

import orjson

from replayer.floor import pinned, settings
from replayer.floor.errors import SettingsError
from replayer.floor.foreign import MAX_FILE_BYTES
from replayer.floor.io import sha256_hex, write_bytes_atomic

_KEYS = ("trusted", "pinned")
_TABLE = re.compile(r"^\s*\[")


def add(path: Path, environ: Mapping[str, str] | None = None) -> list[Path]:
    """Trust `path`: a folder (its `replayer.toml`, if it has one, is pinned as it is now) or a file (a
    manifest: pinned as it is now); its folder is kept with its links resolved. The folders after the change.
    A file someone else could change, or a link, is refused: it could not be honoured."""
    if path.is_dir():  # a folder the user names, links resolved (a file is never a link: `pinned.read`)
        folder, file = Path(os.path.realpath(path)), path / settings.PROJECT_FILE
        files = [file] if os.path.lexists(file) else []
    elif os.path.lexists(path):
        folder, files = Path(os.path.realpath(path.parent)), [path]
    else:
        raise SettingsError(f"{path}: not a folder or a file (replayer trust DIR|FILE)")
    found, pins = settings.trusted_folders(environ), settings.pins(environ)
    for file in files:
        pins[pinned.key(file)] = sha256_hex(pinned.read(file, _max_bytes(file)))
    if not settings.is_trusted(folder, found):
        found = [*found, folder]
    _write(found, pins, environ)
    return settings.trusted_folders(environ)


def remove(path: Path, environ: Mapping[str, str] | None = None) -> list[Path]:
    """Trust `path` no more: a folder (however the user's file names it) with every file pinned in it, or
    one file's pin; the folders after the change."""
    found, pins = settings.trusted_folders(environ), settings.pins(environ)
    if path.is_dir():
        kept = [each for each in found if not settings.is_trusted(path, [each])]
        real = os.path.realpath(path)
        left = {name: digest for name, digest in pins.items() if os.path.dirname(name) != real}
    else:
        kept, left = found, {name: digest for name, digest in pins.items() if name != pinned.key(path)}
    if kept != found or left != pins:
        _write(kept, left, environ)
    return settings.trusted_folders(environ)


def _max_bytes(file: Path) -> int:
    """The most read of a file to pin: a settings file's bound, or that of any other small file (a manifest)."""
    return settings.MAX_FILE_BYTES if file.name == settings.PROJECT_FILE else MAX_FILE_BYTES


def _write(folders: list[Path], pins: dict[str, str], environ: Mapping[str, str] | None) -> None:
    path = settings.user_file(environ)
    old = path.read_text() if os.path.lexists(path) else ""
    try:
        names = [orjson.dumps(str(f)).decode() for f in folders]  # a JSON string is a TOML basic string
        pairs = [f"{orjson.dumps(k).decode()} = {orjson.dumps(v).decode()}" for k, v in sorted(pins.items())]
    except TypeError:
        raise SettingsError("a file or folder name that is not UTF-8 cannot be trusted") from None
    rest = old
    for key in _KEYS:
        rest = _without(rest, key)
    new = f"trusted = [{', '.join(names)}]\npinned = {{{', '.join(pairs)}}}\n" + rest
    expected = {k: v for k, v in tomllib.loads(old).items() if k not in _KEYS} | {
        "trusted": [str(f) for f in folders],
        "pinned": dict(pins),
    }
    if tomllib.loads(new) != expected:
        raise SettingsError(f"{path}: cannot rewrite its `trusted` list safely; edit it by hand")
    write_bytes_atomic(path, new.encode())
    settings.forget()


def _without(text: str, key: str) -> str:
    """`text` without its top-level `key = ...` (which may span lines: up to the line that closes it)."""
    lines = text.splitlines(keepends=True)
    pattern = re.compile(rf"^\s*{key}\s*=")
    for start, line in enumerate(lines):
        if _TABLE.match(line):
            break
        if pattern.match(line):
            for end in range(start + 1, len(lines) + 1):
                rest = "".join(lines[:start] + lines[end:])
                try:
                    if key not in tomllib.loads(rest):
                        return rest
                except tomllib.TOMLDecodeError:
                    continue
    return text
