"""Read, Write and Edit as Claude Code 2.1.197 runs them, over the confined workspace."""

from __future__ import annotations

import difflib
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from adapters.claude_code import render
from replayer.io import NotFound, NotRegular, ReadResult, Workspace
from replayer.models import Budgets, Observation

ORIGINAL_FILE_MAX = 10000
_CURLY = str.maketrans({"‘": "'", "’": "'", "“": '"', "”": '"'})


@dataclass
class ReadEntry:
    content: str
    timestamp: int
    """floor(mtime in ms) when the CLI last read or wrote the file."""
    offset: int | None
    limit: int | None


@dataclass
class ShellState:
    """What the CLI keeps between tool calls of one session: the shell cwd and its read-file state."""

    original_cwd: str
    cwd: str
    read_files: dict[str, ReadEntry] = field(default_factory=dict)

    def absolute(self, path: str) -> str:
        return posixpath.normpath(path if path.startswith("/") else posixpath.join(self.cwd, path))


def _decode(data: bytes) -> str:
    if data.startswith(b"\xff\xfe"):
        return data[2:].decode("utf-16-le", errors="replace")
    text = data.decode("utf-8", errors="replace")
    return text.removeprefix("\ufeff")


class FileTools:
    def __init__(self, ws: Workspace, state: ShellState, budgets: Budgets):
        self.ws = ws
        self.state = state
        self.budgets = budgets

    # Read ------------------------------------------------------------------------------------
    def read(self, inp: dict[str, Any]) -> Observation:
        file_path = str(inp.get("file_path", ""))
        offset = int(inp.get("offset", 1) if inp.get("offset") is not None else 1)
        limit = int(inp["limit"]) if inp.get("limit") is not None else None
        path = self.state.absolute(file_path)
        try:
            res = self.ws.read(path, self.budgets.read)
        except NotFound:
            return render.thrown_error(
                f"File does not exist. Note: your current working directory is {self.state.cwd}."
            )
        except NotRegular as exc:
            if exc.is_dir:
                return render.thrown_error(f"EISDIR: illegal operation on a directory, read '{path}'")
            raise
        mtime_ms = res.mtime_ns // 1_000_000
        entry = self.state.read_files.get(path)
        if (
            entry is not None
            and entry.offset is not None
            and entry.offset == offset
            and entry.limit == limit
            and entry.timestamp == mtime_ms
        ):
            return Observation(
                content=render.UNCHANGED_READ,
                structured={"type": "file_unchanged", "file": {"filePath": file_path}},
            )
        if limit is None and res.size > render.MAX_READ_BYTES:
            size, cap = render.human_size(res.size), render.human_size(render.MAX_READ_BYTES)
            return render.thrown_error(
                f"File content ({size}) exceeds maximum allowed size ({cap}). {render.SIZE_HINT}"
            )
        text = _decode(res.data)
        whole = offset <= 1 and limit is None
        if whole:
            text = text.replace("\r\n", "\n").removesuffix("\r")
        lines = text.split("\n")
        total = len(lines)
        start = 0 if offset == 0 else offset - 1
        selected = lines[start : start + limit] if limit is not None else lines[start:]
        if not whole:
            selected = [line.removesuffix("\r") for line in selected]
        truncated = res.truncated
        budget = self.budgets.read
        if len(selected) > budget.max_lines:
            selected, truncated = selected[: budget.max_lines], True
        content = "\n".join(selected)
        if len(content.encode()) > budget.max_content_bytes:
            content = content.encode()[: budget.max_content_bytes].decode(errors="ignore")
            selected, truncated = content.split("\n"), True
        self.state.read_files[path] = ReadEntry(content=text, timestamp=mtime_ms, offset=offset, limit=limit)
        data = {
            "type": "text",
            "file": {
                "filePath": file_path,
                "content": content,
                "numLines": len(selected),
                "startLine": offset,
                "totalLines": total,
            },
        }
        if content == "":
            model = (
                "<system-reminder>Warning: the file exists but the contents are empty.</system-reminder>"
                if total == 0
                else "<system-reminder>Warning: the file exists but is shorter than the provided offset "
                f"({offset}). The file has {total} lines.</system-reminder>"
            )
        else:
            model = "\n".join(f"{offset + i if offset else i}\t{line}" for i, line in enumerate(selected))
        if truncated:
            model += f"\n[replayer: output truncated by the read budget at {len(selected)} lines]"
        return Observation(content=model, structured=data, truncated=truncated)

    # Write -----------------------------------------------------------------------------------
    def _stale_error(self, path: str, current: ReadResult) -> Observation | None:
        """The read-state checks Write and Edit share (validateInput, wrapped)."""
        entry = self.state.read_files.get(path)
        if entry is None:
            return render.validation_error(render.NOT_READ)
        if current.mtime_ns // 1_000_000 > entry.timestamp:
            full_read = entry.offset in (None, 1) and entry.limit is None
            if not (full_read and _decode(current.data).replace("\r\n", "\n") == entry.content):
                return render.validation_error(render.MODIFIED_SINCE_READ)
        return None

    def write(self, inp: dict[str, Any]) -> Observation:
        file_path = str(inp.get("file_path", ""))
        content = str(inp.get("content", ""))
        path = self.state.absolute(file_path)
        kind = self.ws.kind(path)
        original: str | None = None
        if kind == "file":
            current = self.ws.read(path, self.budgets.read)
            if (err := self._stale_error(path, current)) is not None:
                return err
            original = _decode(current.data)
        self.ws.write(path, content.encode())
        self._remember_write(path, content)
        if original is None:
            data: dict[str, Any] = {
                "type": "create",
                "filePath": file_path,
                "content": content,
                "structuredPatch": [],
                "originalFile": None,
                "userModified": False,
            }
            return Observation(
                content=f"File created successfully at: {file_path}{render.FILE_STATE_CURRENT}",
                structured=data,
            )
        data = {
            "type": "update",
            "filePath": file_path,
            "content": content,
            "structuredPatch": structured_patch(original, content),
            "originalFile": _stored_original(original),
            "userModified": False,
        }
        return Observation(
            content=f"The file {file_path} has been updated successfully.{render.FILE_STATE_CURRENT}",
            structured=data,
        )

    def _remember_write(self, path: str, content: str) -> None:
        self.state.read_files[path] = ReadEntry(
            content=content.replace("\r\n", "\n"),
            timestamp=self.ws.mtime_ns(path) // 1_000_000,
            offset=None,
            limit=None,
        )

    # Edit ------------------------------------------------------------------------------------
    def edit(self, inp: dict[str, Any]) -> Observation:
        file_path = str(inp.get("file_path", inp.get("path", "")))
        old = str(inp.get("old_string", inp.get("old_str", "")))
        new = str(inp.get("new_string", inp.get("new_str", "")))
        replace_all = bool(inp.get("replace_all", False))
        path = self.state.absolute(file_path)
        if old == new:
            return render.validation_error(
                "No changes to make: old_string and new_string are exactly the same."
            )
        kind = self.ws.kind(path)
        if kind == "missing":
            if old != "":
                return render.validation_error(
                    f"File does not exist. Note: your current working directory is {self.state.cwd}."
                )
            raw = None
            file_text = ""
        else:
            current = self.ws.read(path, self.budgets.read)
            raw = _decode(current.data)
            file_text = raw.replace("\r\n", "\n")
            if old == "" and file_text.strip() != "":
                return render.validation_error("Cannot create new file - file already exists.")
            if path.endswith(".ipynb"):
                return render.validation_error(
                    "File is a Jupyter Notebook. Use the NotebookEdit to edit this file."
                )
            if (err := self._stale_error(path, current)) is not None:
                return err
        actual = find_actual(file_text, old)
        if actual is None:
            message = f"String to replace not found in file.\nString: {old}"
            if re.search(r"\\u[0-9a-fA-F]{4}|[^\x00-\x7f]", old):
                message += (
                    "\n(note: Edit also tried swapping \\uXXXX escapes and their characters; neither form matched, so "
                    "the mismatch is likely elsewhere in old_string. Re-read the file and copy the exact surrounding text.)"
                )
            return render.validation_error(message)
        count = file_text.count(actual) if actual else 0
        if count > 1 and not replace_all:
            return render.validation_error(
                f"Found {count} matches of the string to replace, but replace_all is false. To replace all occurrences, "
                "set replace_all to true. To replace only one occurrence, please provide more context to uniquely "
                f"identify the instance.\nString: {old}"
            )
        new_adapted = adapt_quotes(actual, new) if actual != old else new
        updated = apply_edit(file_text, actual, new_adapted, replace_all)
        crlf = raw is not None and raw[:4096].count("\r\n") > raw[:4096].count("\n") - raw[:4096].count(
            "\r\n"
        )
        self.ws.write(path, (updated.replace("\n", "\r\n") if crlf else updated).encode())
        self._remember_write(path, updated)
        data = {
            "filePath": file_path,
            "oldString": actual,
            "newString": new,
            "originalFile": _stored_original(file_text) if raw is not None else "",
            "structuredPatch": structured_patch(file_text, updated),
            "userModified": False,
            "replaceAll": replace_all,
        }
        if replace_all:
            text = f"The file {file_path} has been updated. All occurrences were successfully replaced.{render.FILE_STATE_CURRENT}"
        else:
            text = f"The file {file_path} has been updated successfully.{render.FILE_STATE_CURRENT}"
        return Observation(content=text, structured=data)


def _stored_original(text: str) -> str | None:
    return None if len(text) > ORIGINAL_FILE_MAX else text


def find_actual(file_text: str, old: str) -> str | None:
    """The file's own text that old_string matches: exact, else with curly quotes made straight."""
    if old in file_text:
        return old
    normalized_file, normalized_old = file_text.translate(_CURLY), old.translate(_CURLY)
    at = normalized_file.find(normalized_old)
    if at < 0:
        return None
    return file_text[at : at + len(old)]


def adapt_quotes(actual: str, new: str) -> str:
    """Straight quotes in new_string become the curly ones the matched file text uses."""
    out = new
    if "“" in actual or "”" in actual:
        out = re.sub(r'(^|(?<=[\s(\[{—–]))"', "“", out)
        out = out.replace('"', "”")
    if "‘" in actual or "’" in actual:
        out = re.sub(r"(?<=[A-Za-z])'(?=[A-Za-z])", "’", out)
        out = re.sub(r"(^|(?<=[\s(\[{—–]))'", "‘", out)
        out = out.replace("'", "’")
    return out


def apply_edit(text: str, old: str, new: str, replace_all: bool) -> str:
    if new == "" and not old.endswith("\n") and old + "\n" in text:
        old = old + "\n"
    return text.replace(old, new) if replace_all else text.replace(old, new, 1)


def _diff_lines(text: str) -> list[str]:
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [re.sub(r"^\t+", lambda m: "  " * len(m.group()), line) for line in lines]


def structured_patch(old: str, new: str, context: int = 3) -> list[dict[str, Any]]:
    """jsdiff-style hunks (3 lines of context, leading tabs shown as 2 spaces), as the CLI stores them."""
    a, b = _diff_lines(old), _diff_lines(new)
    hunks = []
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        lines: list[str] = []
        for tag, a1, a2, b1, b2 in group:
            if tag == "equal":
                lines += [" " + x for x in a[a1:a2]]
                continue
            lines += ["-" + x for x in a[a1:a2]]
            if a2 == len(a) and not old.endswith("\n") and old:
                lines.append("\\ No newline at end of file")
            lines += ["+" + x for x in b[b1:b2]]
            if b2 == len(b) and not new.endswith("\n") and new:
                lines.append("\\ No newline at end of file")
        hunks.append(
            {
                "oldStart": i1 + 1 if i2 > i1 else i1,
                "oldLines": i2 - i1,
                "newStart": j1 + 1 if j2 > j1 else j1,
                "newLines": j2 - j1,
                "lines": lines,
            }
        )
    return hunks
