"""Codex's apply_patch, natively: the pinned CLI's grammar, context matching, order of work and texts.

Parse, then verify every hunk against the workspace (nothing is written if any fails), then apply
in patch order. Paths resolve against the turn cwd through the confined workspace IO. Texts and
rules follow codex-cli 0.171.0 (docs/adapters/codex.md lists how each was checked).
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from replayer.floor.io import NotFound, NotRegular, Workspace
from replayer.floor.limits import ReadBudget

BEGIN, END = "*** Begin Patch", "*** End Patch"
ADD, DELETE, UPDATE, MOVE = "*** Add File: ", "*** Delete File: ", "*** Update File: ", "*** Move to: "
EOF_MARK = "*** End of File"
_PUNCT = str.maketrans(
    {
        **{c: "-" for c in "\u2010\u2011\u2012\u2013\u2014\u2015\u2212"},
        **{c: "'" for c in "\u2018\u2019\u201a\u201b"},
        **{c: '"' for c in "\u201c\u201d\u201e\u201f"},
        **{c: " " for c in "\u00a0\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a\u202f\u205f\u3000"},
    }
)
_BUDGET = ReadBudget(max_scan_bytes=64 * 1024 * 1024)


class PatchError(Exception):
    """A failure the CLI reports to the model; `str()` is its exact text."""


@dataclass
class Chunk:
    context: str | None
    old: list[str] = field(default_factory=list)
    new: list[str] = field(default_factory=list)
    end_of_file: bool = False


@dataclass
class Hunk:
    kind: str  # "add" | "delete" | "update"
    path: str
    lines: list[str] = field(default_factory=list)
    move_to: str | None = None
    chunks: list[Chunk] = field(default_factory=list)


def parse(text: str) -> list[Hunk]:
    lines = [line.removesuffix("\r") for line in text.strip().splitlines()]
    if len(lines) >= 4 and lines[0] in ("<<EOF", "<<'EOF'", '<<"EOF"') and lines[-1].endswith("EOF"):
        lines = lines[1:-1]
    if not lines or lines[0].strip() != BEGIN:
        raise PatchError("invalid patch: The first line of the patch must be '*** Begin Patch'")
    if lines[-1].strip() != END:
        raise PatchError("invalid patch: The last line of the patch must be '*** End Patch'")
    hunks: list[Hunk] = []
    i = 1
    while i < len(lines) - 1:
        header = lines[i].strip()
        number = i + 1
        if header.startswith(ADD):
            hunk = Hunk("add", header[len(ADD) :])
            i += 1
            while i < len(lines) - 1 and lines[i].startswith("+"):
                hunk.lines.append(lines[i][1:])
                i += 1
        elif header.startswith(DELETE):
            hunk = Hunk("delete", header[len(DELETE) :])
            i += 1
        elif header.startswith(UPDATE):
            hunk = Hunk("update", header[len(UPDATE) :])
            i = _parse_update(lines, i + 1, hunk, number)
        else:
            raise PatchError(
                f"invalid hunk at line {number}, '{header}' is not a valid hunk header. Valid hunk headers: "
                "'*** Add File: {path}', '*** Delete File: {path}', '*** Update File: {path}'"
            )
        hunks.append(hunk)
    return hunks


def _parse_update(lines: list[str], i: int, hunk: Hunk, number: int) -> int:
    """The hunk's chunks, as the CLI's parser reads them; returns the index of the next hunk header."""
    last = len(lines) - 1
    if i < last and lines[i].strip().startswith(MOVE):
        hunk.move_to = lines[i].strip()[len(MOVE) :]
        i += 1
    while i < last:
        if not lines[i].strip():
            i += 1
            continue
        if lines[i].startswith("***"):
            break
        i = _parse_chunk(lines, i, hunk, allow_missing_context=not hunk.chunks)
    if not hunk.chunks and hunk.move_to is None:
        raise PatchError(f"invalid hunk at line {number}, Update file hunk for path '{hunk.path}' is empty")
    return i


def _parse_chunk(lines: list[str], i: int, hunk: Hunk, allow_missing_context: bool) -> int:
    last = len(lines) - 1
    first = lines[i]
    if first.rstrip() == "@@":
        chunk, i = Chunk(context=None), i + 1
    elif first.startswith("@@ "):
        chunk, i = Chunk(context=first.rstrip()[3:]), i + 1
    elif allow_missing_context:
        chunk = Chunk(context=None)
    else:
        raise PatchError(
            f"invalid hunk at line {i + 1}, Expected update hunk to start with a @@ context marker, got: '{first}'"
        )
    if i >= last:
        raise PatchError(f"invalid hunk at line {i + 1}, Update hunk does not contain any lines")
    parsed = 0
    while i < last:
        line = lines[i]
        if line.rstrip() == EOF_MARK:
            if parsed == 0:
                raise PatchError(f"invalid hunk at line {i + 1}, Update hunk does not contain any lines")
            chunk.end_of_file = True
            i += 1
            break
        if line == "":
            chunk.old.append("")
            chunk.new.append("")
        elif line[0] == " ":
            chunk.old.append(line[1:])
            chunk.new.append(line[1:])
        elif line[0] == "-":
            chunk.old.append(line[1:])
        elif line[0] == "+":
            chunk.new.append(line[1:])
        elif parsed == 0:
            raise PatchError(
                f"invalid hunk at line {i + 1}, Unexpected line found in update hunk: '{line}'. Every line "
                "should start with ' ' (context line), '+' (added line), or '-' (removed line)"
            )
        else:
            break  # the next chunk starts here
        parsed += 1
        i += 1
    hunk.chunks.append(chunk)
    return i


# matching ------------------------------------------------------------------------------------
def _seek(lines: list[str], pattern: list[str], start: int, eof: bool) -> int | None:
    if not pattern:
        return start
    if len(pattern) > len(lines):
        return None
    first = max(len(lines) - len(pattern), start) if eof else start
    last = len(lines) - len(pattern)
    for norm in (lambda s: s, str.rstrip, str.strip, lambda s: s.strip().translate(_PUNCT)):
        wanted = [norm(p) for p in pattern]
        for at in range(first, last + 1):
            if all(norm(lines[at + k]) == wanted[k] for k in range(len(pattern))):
                return at
    return None


_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


def _split(text: str) -> tuple[list[str], list[str]]:
    """Lines and their endings (the CLI preserves line endings)."""
    pieces = _LINE.findall(text)
    lines = [p.rstrip("\r\n") for p in pieces]
    endings = [p[len(line) :] for p, line in zip(pieces, lines, strict=True)]
    return lines, endings


def _updated(text: str, hunk: Hunk, display: str) -> str:
    lines, endings = _split(text)
    newline = next((e for e in endings if e), "\n")
    replacements: list[tuple[int, int, list[str]]] = []
    cursor = 0
    for chunk in hunk.chunks:
        if chunk.context is not None:
            found = _seek(lines, [chunk.context], cursor, False)
            if found is None:
                raise PatchError(f"Failed to find context '{chunk.context}' in {display}")
            cursor = found + 1
        if not chunk.old:
            replacements.append((len(lines), 0, chunk.new))
            continue
        old, new = chunk.old, chunk.new
        at = _seek(lines, old, cursor, chunk.end_of_file)
        if at is None and old and old[-1] == "":
            old = old[:-1]
            new = new[:-1] if new and new[-1] == "" else new
            at = _seek(lines, old, cursor, chunk.end_of_file)
        if at is None:
            raise PatchError(f"Failed to find expected lines in {display}:\n" + "\n".join(chunk.old))
        replacements.append((at, len(old), new))
        cursor = at + len(old)
    out_lines = list(zip(lines, endings, strict=True))
    for start, length, new in sorted(replacements, key=lambda r: r[0], reverse=True):
        kept = out_lines[start : start + length]
        fresh = [
            (line, kept[k][1] if k < len(kept) and kept[k][0] == line else newline)
            for k, line in enumerate(new)
        ]
        out_lines[start : start + length] = fresh
    return "".join(line + (ending or newline) for line, ending in out_lines)


# verify and apply ----------------------------------------------------------------------------
@dataclass
class Planned:
    hunk: Hunk
    target: str
    content: str | None = None


def apply(text: str, workspace: Workspace, cwd: str) -> tuple[int, str]:
    """(exit code, output) as the CLI reports them; raises PatchError for its unwrapped verification failures."""
    try:
        hunks = parse(text)
    except PatchError as exc:
        raise PatchError(f"apply_patch verification failed: {exc}") from None
    if not hunks:
        raise PatchError("patch rejected: empty patch")
    planned = _verify(hunks, workspace, cwd)
    added: list[str] = []
    modified: list[str] = []
    deleted: list[str] = []
    try:
        for step in planned:
            hunk = step.hunk
            if hunk.kind == "add":
                _write(workspace, step.target, step.content or "")
                added.append(hunk.path)
            elif hunk.kind == "delete":
                _delete(workspace, step.target)
                deleted.append(hunk.path)
            else:
                destination = _absolute(cwd, hunk.move_to) if hunk.move_to else step.target
                _write(workspace, destination, step.content or "")
                if hunk.move_to:
                    _delete(workspace, step.target, "Failed to remove original")
                modified.append(hunk.move_to or hunk.path)
    except PatchError as exc:
        return 1, f"{exc}\n"
    summary = ["Success. Updated the following files:"]
    summary += [f"A {p}" for p in added] + [f"M {p}" for p in modified] + [f"D {p}" for p in deleted]
    return 0, "\n".join(summary) + "\n"


def _absolute(cwd: str, path: str) -> str:
    return posixpath.normpath(path if path.startswith("/") else posixpath.join(cwd, path))


def _verify(hunks: list[Hunk], workspace: Workspace, cwd: str) -> list[Planned]:
    seen: set[str] = set()
    planned: list[Planned] = []
    for hunk in hunks:
        target = _absolute(cwd, hunk.path)
        if target in seen:
            raise PatchError(
                f"apply_patch verification failed: invalid patch: multiple operations target {target}"
            )
        seen.add(target)
        if hunk.kind == "add":
            planned.append(Planned(hunk, target, "".join(line + "\n" for line in hunk.lines)))
            continue
        prefix = "Failed to read" if hunk.kind == "delete" else "Failed to read file to update"
        original = _read(workspace, target, prefix)
        try:
            content = _updated(original, hunk, target) if hunk.kind == "update" else None
        except PatchError as exc:
            raise PatchError(f"apply_patch verification failed: {exc}") from None
        planned.append(Planned(hunk, target, content))
    return planned


def _read(workspace: Workspace, path: str, prefix: str) -> str:
    try:
        data = workspace.read(path, _BUDGET).data
    except NotFound:
        raise PatchError(
            f"apply_patch verification failed: {prefix} {path}: No such file or directory (os error 2)"
        ) from None
    except NotRegular as exc:
        if exc.is_dir:
            raise PatchError(
                f"apply_patch verification failed: {prefix} {path}: path `{path}` is not a file"
            ) from None
        raise
    return data.decode("utf-8", errors="replace")


def _write(workspace: Workspace, path: str, content: str) -> None:
    try:
        workspace.write(path, content.encode())
    except NotRegular:
        raise PatchError(f"Failed to write file {path}") from None


def _delete(workspace: Workspace, path: str, what: str = "Failed to delete file") -> None:
    try:
        workspace.remove(path)
    except (NotFound, NotRegular):
        raise PatchError(f"{what} {path}") from None


def wrap(exit_code: int, output: str) -> str:
    """The custom_tool_call_output text of a patch that parsed and verified (the CLI's exec wrapper)."""
    return f"Exit code: {exit_code}\nWall time: 0 seconds\nOutput:\n{output}"
