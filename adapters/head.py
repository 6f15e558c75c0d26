"""What detection reads of a file: its first records, or one marker record for a form read otherwise
(an SQLite store, a conversation directory, a server-sent-events dump)."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from replayer.adapters.shapes import MAX_DEPTH, loads_within
from replayer.floor.errors import BadInput
from replayer.floor.io import MAX_INPUT_BYTES, open_input

_HEAD_LINES = 64
SQLITE_MAGIC = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""


@dataclass(frozen=True)
class SqliteFile:
    """`read_head`'s only record for an SQLite database: a detector that wants it opens it itself (read-only)."""

    path: Path


@dataclass(frozen=True)
class ConversationDir:
    """`read_head`'s only record for a directory holding an OpenHands V1 conversation (base_state.json), or
    the agent server's folder of one (`<id>/event_service/base_state.json`)."""

    path: Path


SERVER_FOLDER = "event_service"
"""Where the OpenHands agent server keeps a conversation's state and events, inside `<conversation id>/`."""


def conversation_root(path: Path) -> Path | None:
    """The folder holding a V1 conversation's base_state.json: `path`, or its agent server's `event_service`
    folder (neither it nor its base_state.json a link); None for any other directory."""
    if (path / "base_state.json").is_file():
        return path
    inner = path / SERVER_FOLDER
    try:
        if stat.S_ISDIR(os.lstat(inner).st_mode) and stat.S_ISREG(
            os.lstat(inner / "base_state.json").st_mode
        ):
            return inner
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class SseData:
    """`read_head`'s only record for a dump of a server-sent-events stream (lines `data: <json>`, blank lines,
    `event:`/`id:`/`retry:` fields and `:` comments): the JSON values of its first `data:` lines."""

    values: list[Any]


SSE_FIELDS = (b"data:", b"event:", b"id:", b"retry:", b":")
"""How every non-blank line of a server-sent-events stream begins."""


_detected: tuple[bytes, Any, bool] | None = None
"""The whole-file JSON document `read_head` read last, with its bytes and whether it nests deeper than
MAX_DEPTH: the parse that follows detection takes it (`loads_document`) instead of parsing the same bytes
a second time."""


def loads_document(data: bytes) -> tuple[Any, bool]:
    """`shapes.loads_within(data)` of a file's bytes (the value, and whether it nests deeper than MAX_DEPTH),
    or what detection read from equal bytes (taken once)."""
    global _detected
    detected, _detected = _detected, None
    if detected is not None and detected[0] == data:
        return detected[1], detected[2]
    return loads_within(data, MAX_DEPTH)


_PREAMBLE_LINES = 3
_PREAMBLE_LINE_BYTES = 512


def preamble(data: bytes) -> int:
    """How many bytes of text a CLI printed before a pretty-printed JSON document it wrote to the same stream
    (`opencode export ID > f 2>&1` puts `Exporting session: ses_...` first): at most three short lines that
    are not JSON, followed by a line that is `{` or `[` alone; 0 when `data` does not begin so."""
    at = 0
    for _ in range(_PREAMBLE_LINES):
        end = data.find(b"\n", at, at + _PREAMBLE_LINE_BYTES)
        if end < 0:
            return 0
        line = data[at:end].strip()
        if not line or line[:1] in (b"{", b"[", b'"'):
            return 0
        at = end + 1
        following = data.find(b"\n", at, at + _PREAMBLE_LINE_BYTES)
        if following >= 0 and data[at:following].strip() in (b"{", b"["):
            return at
    return 0


def read_head(path: Path) -> list[Any]:
    """The first parsed records of a JSONL file, [the top-level value] of a (pretty-printed) JSON file,
    or [SqliteFile(path)] for an SQLite database, [ConversationDir(path)] for a directory with base_state.json,
    [SseData(...)] for a server-sent-events dump."""
    global _detected
    _detected = None
    if path.is_dir():
        return [ConversationDir(path)] if conversation_root(path) is not None else []
    try:
        with open_input(path) as fh:
            if fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC:
                return [SqliteFile(path)]
            fh.seek(0)
            lines, ended = _first_lines(fh, _HEAD_LINES)
            skip = preamble(b"".join(lines[: _PREAMBLE_LINES + 1])) if lines else 0
            if lines and (skip or lines[0].strip() in (b"{", b"[")):
                fh.seek(skip)
                whole = fh.read(MAX_INPUT_BYTES)
                try:
                    _detected = (whole, *loads_within(whole, MAX_DEPTH))
                except orjson.JSONDecodeError:
                    return []
                return [_detected[1]]
            one_line = len(lines) == 1 and ended
    except IsADirectoryError:
        return []
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror}") from None
    head: list[Any] = []
    if one_line:  # a document written on one line
        try:
            _detected = (lines[0], *loads_within(lines[0], MAX_DEPTH))
            head.append(_detected[1])
        except orjson.JSONDecodeError:
            pass
    else:
        for line in lines:
            try:
                head.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
    sse = all(not line.strip() or line.startswith(SSE_FIELDS) for line in lines)
    if not head and sse and any(line.startswith(b"data:") for line in lines):
        return [SseData(_sse_values(lines))]
    return head


def _first_lines(fh: BinaryIO, count: int) -> tuple[list[bytes], bool]:
    """The first `count` lines as iterating `fh` gives them (each with its newline), and whether the file
    ends with them; read in growing chunks: iterating reads a line of megabytes (a JSON document on one
    line) 8 KiB at a time."""
    chunks: list[bytes] = []
    size, newlines, ended = 1 << 16, 0, False
    while newlines < count:
        chunk = fh.read(size)
        if not chunk:
            ended = True
            break
        chunks.append(chunk)
        newlines += chunk.count(b"\n")
        size = min(size * 2, 1 << 24)
    data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
    if not newlines or (ended and newlines == 1 and data.endswith(b"\n")):
        return ([data] if data else []), ended  # one line: no copy of it
    parts = data.split(b"\n", count)  # with `count` newlines, the last part is what follows the lines
    lines = [part + b"\n" for part in parts[:-1]]
    if len(parts) <= count:
        if parts[-1]:
            lines.append(parts[-1])  # the last line, without a newline, at the end of the file
    elif parts[-1]:
        ended = False
    elif not ended:
        ended = not fh.read(1)
    return lines, ended


def _sse_values(lines: list[bytes]) -> list[Any]:
    values = []
    for line in lines:
        if line.startswith(b"data:"):
            try:
                values.append(orjson.loads(line[5:]))
            except orjson.JSONDecodeError:
                continue
    return values
