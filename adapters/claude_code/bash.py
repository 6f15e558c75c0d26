"""Bash as Claude Code 2.1.197 runs it: the CLI's own command line, shell snapshot, output file and rendering.

The command runs as `bash -c "source <snapshot> && shopt -u extglob && eval '<cmd>' < /dev/null &&
pwd -P >| <cwd file>"` in the tracked cwd, stdout and stderr appended to one output file (so
the two streams interleave in write order, and `stderr` is always ""), with the snapshot the
pinned CLI built in the base image (its find/grep are the bfs/ugrep inside claude.exe).
"""

from __future__ import annotations

import posixpath
import re
import secrets
import shlex
import string
from typing import Any

from adapters.claude_code import render
from adapters.claude_code.files import ReadEntry, ShellState
from replayer.errors import ConfinementError
from replayer.io import Workspace
from replayer.models import Budgets, Observation
from sandboxes.base import Sandbox

DEFAULT_TIMEOUT_MS = 120000
MAX_TIMEOUT_MS = 600000
OUTPUT_LIMIT_BYTES = 30000
PERSIST_PREVIEW_CHARS = 2000
NO_OUTPUT_COMMANDS = frozenset(
    [
        "mv",
        "cp",
        "rm",
        "mkdir",
        "rmdir",
        "chmod",
        "chown",
        "chgrp",
        "touch",
        "ln",
        "cd",
        "export",
        "unset",
        "wait",
    ]
)
_NO_MATCH = {
    "grep": "No matches found",
    "rg": "No matches found",
    "egrep": "No matches found",
    "fgrep": "No matches found",
}
_EXIT1 = {
    **_NO_MATCH,
    "find": "Some directories were inaccessible",
    "diff": "Files differ",
    "test": "Condition is false",
    "[": "Condition is false",
}
_HEREDOC = re.compile(r"<<-?\s*(?:(['\"]?)(\w+)\1|\\(\w+))")
_NOT_HEREDOC = re.compile(r"\d\s*<<\s*\d|\[\[\s*\d+\s*<<\s*\d+\s*\]\]|\$\(\(.*<<.*\)\)")
_STDIN_REDIRECT = re.compile(r"(?:^|[\s;&|])<(?![<(])\s*\S+")
_TASK_FILE = re.compile(r"/(b[0-9a-z]{8})\.(?:txt|output)$")
_HINT_LINE = re.compile(r"^[ \t]*<claude-code-hint\s+([^>]*?)\s*/>[ \t]*$", re.M)

# Runs inside the container: the CLI's command with both streams appended to its output file,
# then reports exit code, the cwd the command left (empty when it failed), the output size and
# the first bytes of the output.
_RUNNER = r"""
out=$1; cwdfile=$2; limit=$3; persist=$4; shift 4
mkdir -p "$(dirname "$out")"; rm -f "$cwdfile"
bash -c "$1" >>"$out" 2>&1
code=$?
size=$(stat -c %s "$out")
if [ "$size" -gt "$limit" ] && [ -n "$persist" ]; then mkdir -p "$(dirname "$persist")"; head -c 67108864 "$out" > "$persist"; fi
printf '%s\n%s\n%s\n' "$code" "$(cat "$cwdfile" 2>/dev/null)" "$size"
head -c "$limit" "$out"
"""


def split_commands(command: str) -> list[str]:
    """Split on unquoted && || ; | & and newlines (the CLI splits with tree-sitter; this covers plain shell)."""
    parts: list[str] = []
    buf: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(command):
        ch = command[i]
        if quote:
            buf.append(ch)
            if ch == "\\" and quote == '"' and i + 1 < len(command):
                buf.append(command[i + 1])
                i += 1
            elif ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
            buf.append(ch)
        elif ch == "\\" and i + 1 < len(command):
            buf += [ch, command[i + 1]]
            i += 1
        elif ch in ";|&\n":
            if ch in "|&" and command[i : i + 2] in ("&&", "||"):
                i += 1
            parts.append("".join(buf))
            buf = []
        else:
            buf.append(ch)
        i += 1
    parts.append("".join(buf))
    return [p.strip() for p in parts if p.strip()]


def _words(segment: str) -> list[str]:
    try:
        return shlex.split(segment)
    except ValueError:
        return segment.split()


def return_code_interpretation(command: str, code: int) -> tuple[bool, str | None]:
    """(is_error, message) from the first word of the last subcommand, as the CLI decides."""
    parts = split_commands(command)
    words = _words(parts[-1]) if parts else []
    first = words[0] if words else ""
    if first == "git":
        sub = _git_subcommand(words)
        if sub in ("diff", "grep"):
            return code >= 2, ("No matches found" if sub == "grep" else "Files differ") if code == 1 else None
    if first in _EXIT1:
        return code >= 2, _EXIT1[first] if code == 1 else None
    return code != 0, None


def _git_subcommand(words: list[str]) -> str | None:
    i = 1
    while i < len(words):
        if words[i] in ("-C", "-c"):
            i += 2
        elif words[i].startswith("-"):
            i += 1
        else:
            return words[i]
    return None


def no_output_expected(command: str) -> bool:
    parts = split_commands(command)
    return bool(parts) and all((_words(p) or [""])[0] in NO_OUTPUT_COMMANDS for p in parts)


def quote_for_eval(command: str) -> str:
    heredoc = bool(_HEREDOC.search(command)) and not _NOT_HEREDOC.search(command)
    quoted = "'" + command.replace("'", "'\"'\"'") + "'"
    if heredoc or _STDIN_REDIRECT.search(command):
        return quoted
    return quoted + " < /dev/null"


def _task_id() -> str:
    return "b" + "".join(secrets.choice(string.digits + string.ascii_lowercase) for _ in range(8))


def _historical_task_id(historical: Observation | None) -> str | None:
    """The CLI's task ids are random; reusing the historical one keeps unchanged observations identical."""
    data = historical.structured if historical is not None else None
    if not isinstance(data, dict):
        return None
    if isinstance(data.get("backgroundTaskId"), str):
        return data["backgroundTaskId"]
    match = _TASK_FILE.search(str(data.get("persistedOutputPath", "")))
    return match.group(1) if match else None


def _trim_lines(text: str) -> str:
    lines = text.split("\n")
    start, end = 0, len(lines) - 1
    while start < len(lines) and lines[start].strip() == "":
        start += 1
    while end >= 0 and lines[end].strip() == "":
        end -= 1
    return "" if start > end else "\n".join(lines[start : end + 1])


def _strip_hints(text: str) -> str:
    if "<claude-code-hint" not in text:
        return text
    stripped = _HINT_LINE.sub("", text)
    return re.sub(r"\n{3,}", "\n\n", stripped) if stripped != text else text


def _preview(text: str, limit: int = PERSIST_PREVIEW_CHARS) -> tuple[str, bool]:
    if len(text) <= limit:
        return text, False
    cut = text.rfind("\n", 0, limit)
    return (text[:cut] if cut > limit // 2 else text[:limit]), True


class BashTool:
    def __init__(
        self,
        sandbox: Sandbox,
        ws: Workspace,
        state: ShellState,
        budgets: Budgets,
        *,
        session_id: str,
        snapshot: str,
        env: dict[str, str],
        home: str,
    ):
        self.sandbox = sandbox
        self.ws = ws
        self.state = state
        self.budgets = budgets
        self.session_id = session_id
        self.snapshot = snapshot
        self.env = env
        self.slug = re.sub(r"[^A-Za-z0-9]", "-", state.original_cwd)
        self.home = home

    def run(self, inp: dict[str, Any], historical: Observation | None = None) -> Observation:
        command = str(inp.get("command", ""))
        timeout_ms = min(int(inp.get("timeout") or DEFAULT_TIMEOUT_MS), MAX_TIMEOUT_MS)
        task = _historical_task_id(historical) or _task_id()
        out_file = f"/tmp/claude-0/{self.slug}/{self.session_id}/tasks/{task}.output"
        persist = f"{self.home}/.claude/projects/{self.slug}/{self.session_id}/tool-results/{task}.txt"
        cwd_file = f"/tmp/claude-{secrets.token_hex(2)}-cwd"
        cc_command = " && ".join(
            [
                f"source '{self.snapshot}' 2>/dev/null || true",
                "shopt -u extglob 2>/dev/null || true",
                f"eval {quote_for_eval(command)}",
                f"pwd -P >| {cwd_file}",
            ]
        )
        argv = [
            "bash",
            "-c",
            _RUNNER,
            "runner",
            out_file,
            cwd_file,
            str(OUTPUT_LIMIT_BYTES),
            persist,
            cc_command,
        ]
        background = bool(inp.get("run_in_background"))
        first_word = (_words(split_commands(command)[0]) or [""])[0] if split_commands(command) else ""
        backgroundable = first_word != "sleep"
        res = self.sandbox.exec(
            argv,
            workdir=self.state.cwd,
            env=self.env,
            timeout_s=0.5 if background else timeout_ms / 1000,
            kill_on_timeout=not (background or backgroundable),
        )
        data_base = {"stdout": "", "stderr": "", "interrupted": False, "isImage": False}
        if res.timed_out and (background or backgroundable):
            message = (
                f"Command running in background with ID: {task}. Output is being written to: {out_file}. "
                "You will be notified when it completes. To check interim output, use Read on that file path."
            )
            background_data = {
                **data_base,
                "noOutputExpected": no_output_expected(command),
                "backgroundTaskId": task,
            }
            return Observation(content=message, is_error=False, structured=background_data)
        if res.timed_out:
            head = self.sandbox.exec(
                ["head", "-c", str(OUTPUT_LIMIT_BYTES), out_file], workdir="/", timeout_s=30
            )
            output = head.stdout.decode(errors="replace")
            return render.thrown_error(
                f"Exit code 143\nCommand timed out after {render.duration(timeout_ms)}\n{output}"
            )
        header, _, body = res.stdout.partition(b"\n")
        code = int(header or b"1")
        new_cwd, _, body = body.partition(b"\n")
        size_line, _, body = body.partition(b"\n")
        size = int(size_line or b"0")
        output = body.decode(errors="replace")
        stderr = self._track_cwd(new_cwd.decode())
        stdout = _strip_hints(_trim_lines(output.rstrip() + "\n"))
        is_error, interpretation = return_code_interpretation(command, code)
        if is_error:
            return render.thrown_error("\n".join(p for p in (f"Exit code {code}", stdout) if p))
        self._mark_read(command)
        data: dict[str, Any] = {**data_base, "stdout": stdout, "stderr": stderr}
        if interpretation is not None:
            data["returnCodeInterpretation"] = interpretation
        data["noOutputExpected"] = no_output_expected(command)
        shown = re.sub(r"^(\s*\n)+", "", stdout).rstrip()
        if size > OUTPUT_LIMIT_BYTES:
            preview, more = _preview(shown)
            shown = (
                f"<persisted-output>\nOutput too large ({render.human_size(size)}). Full output saved to: {persist}\n\n"
                f"Preview (first 2KB):\n{preview}{chr(10) + '...' + chr(10) if more else chr(10)}</persisted-output>"
            )
            data["persistedOutputPath"] = persist
            data["persistedOutputSize"] = size
        content = "\n".join(p for p in (shown, stderr.strip()) if p)
        return Observation(content=render.empty_content("Bash", content), is_error=False, structured=data)

    def _track_cwd(self, new_cwd: str) -> str:
        """Follow a successful `cd`; leaving the project resets the cwd, with the CLI's notice."""
        if not new_cwd or new_cwd == self.state.cwd:
            return ""
        root = self.state.original_cwd
        if new_cwd == root or new_cwd.startswith(root.rstrip("/") + "/"):
            self.state.cwd = new_cwd
            return ""
        self.state.cwd = root
        return f"\nShell cwd was reset to {root}"

    def _mark_read(self, command: str) -> None:
        """Simple cat/head/tail commands count as reads of their files (so Edit and Write may follow)."""
        if any(c in command for c in "|<>"):
            return
        for segment in split_commands(command):
            words = _words(segment)
            if not words:
                continue
            if words[0] in ("echo", "printf", "true", ":"):
                continue
            if words[0] not in ("cat", "head", "tail"):
                return
            limit: int | None = None
            files = []
            rest = words[1:]
            while rest:
                word = rest.pop(0)
                if word == "-n" and words[0] == "cat":
                    continue
                if word == "-n" and rest:
                    limit = int(rest.pop(0)) if rest[0].isdigit() else None
                elif word.startswith("-"):
                    return
                else:
                    files.append(word)
            if words[0] == "head" and limit is None:
                limit = 10
            for name in files:
                path = posixpath.normpath(posixpath.join(self.state.cwd, name))
                if path in self.state.read_files:
                    continue
                try:
                    res = self.ws.read(path, self.budgets.read)
                except (ConfinementError, OSError):
                    continue
                text = res.data.decode(errors="replace").replace("\r\n", "\n")
                offset = None if words[0] == "cat" else 1
                self.state.read_files[path] = ReadEntry(
                    content=text,
                    timestamp=res.mtime_ns // 1_000_000,
                    offset=offset,
                    limit=limit if offset else None,
                )
