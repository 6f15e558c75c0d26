"""Codex's exec_command, rerun in the sandbox and rendered as the pinned CLI renders it for the model.

`Chunk ID: <6 hex>\\nWall time: <s.4f> seconds\\nProcess exited with code N` (or `Process running with
session ID N` when the command outlives its yield time, which then keeps running) `\\nOriginal token
count: <(bytes+3)//4>\\nOutput:\\n<output>`, the output cut in the middle past the token budget.
"""

from __future__ import annotations

import math
import posixpath
import re
import secrets
from typing import Any

import orjson

from replayer.floor.results import Divergence
from replayer.floor.trajectory import Observation
from replayer.sandboxes.base import Sandbox

DEFAULT_YIELD_MS = 10_000
YIELD_RANGE_MS = (250, 30_000)
DEFAULT_MAX_TOKENS = 10_000
MODEL_TOKEN_LIMIT = 10_000
"""The pinned catalog's truncation policy for its models (tokens)."""
BUFFER_BYTES = 1024 * 1024
"""The CLI keeps the first and last half of this much output."""


def own_text(text: str) -> str | None:
    """The command's output inside an observation: after the header's `Output:` line (exec_command's form
    above, or `Exit code: N\\nWall time: ...` of shell and apply_patch), or the `output` of the JSON form
    older rollouts store (`{"output", "metadata": {...}}`); None for any other text."""
    if text.startswith(("Chunk ID: ", "Exit code: ")):
        head, found, rest = text.partition("\nOutput:\n")
        return rest if found else None
    if not text.startswith("{"):
        return None
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    output = parsed.get("output") if isinstance(parsed, dict) else None
    return re.sub(r"\ATotal output lines: \d+\n\n?", "", output) if isinstance(output, str) else None


UNIFIED_EXEC_TOOLS = frozenset({"exec_command", "write_stdin"})
POST_EXIT_WAIT_MS = 50
"""After a command's exit the CLI waits this long for the rest of its output, then reports what came (its
`collect_output_until_deadline`); a busy machine cuts it, down to nothing (seen in CI, and under load here)."""


def cut_output_hint(divergences: list[Divergence]) -> str | None:
    """A word when an exec rerun printed nothing where the recording shows output: on a busy machine the CLI
    reports a command's output cut, by its own code, not the sandbox's."""
    cut = [
        d.call_id
        for d in divergences
        if d.kind == "rerun"
        and d.tool in UNIFIED_EXEC_TOOLS
        and d.status == "different"
        and not d.in_wrapper
        and d.first_difference == 0
        and d.fresh_excerpt == ""
        and d.historical_excerpt
    ]
    if not cut:
        return None
    return (
        f"{len(cut)} exec rerun(s) printed nothing where the recording shows output ({', '.join(cut[:5])}"
        f"{', ...' if len(cut) > 5 else ''}): Codex waits at most {POST_EXIT_WAIT_MS} ms after a command's "
        "exit for its output, and on a busy machine reports it cut; a rerun on a quieter machine (fewer batch "
        "workers) tells this from a real difference"
    )


def approx_tokens(n_bytes: int) -> int:
    return (n_bytes + 3) // 4


def _lines(text: str) -> int:
    """Rust's `str::lines().count()`."""
    if not text:
        return 0
    return text.count("\n") + (0 if text.endswith("\n") else 1)


def _head(data: bytes, limit: int) -> bytes:
    cut = data[:limit]
    return cut.decode("utf-8", errors="ignore").encode() if cut else b""


def _tail(data: bytes, limit: int) -> bytes:
    start = max(len(data) - limit, 0)
    while start < len(data) and (data[start] & 0xC0) == 0x80:  # to the next character start
        start += 1
    return data[start:]


def truncate_middle(data: bytes, budget_bytes: int) -> bytes:
    removed = math.ceil((len(data) - budget_bytes) / 4)
    left = budget_bytes // 2
    marker = f"\u2026{removed} tokens truncated\u2026".encode()
    return _head(data, left) + marker + _tail(data, budget_bytes - left)


def render_output(data: bytes, max_tokens: int) -> str:
    """What follows `Output:\\n`: the output, or its truncated form with the CLI's warning header."""
    budget = max_tokens * 4
    total = len(data)
    if total > BUFFER_BYTES:
        half = BUFFER_BYTES // 2
        omitted = total - 2 * half
        kept = data[:half] + f"\n... {omitted} bytes omitted ...\n".encode() + data[-half:]
        header = f"Warning: truncated output (original token count: {total // 4})\n... {omitted} bytes omitted ...\n\n"
        return header + truncate_middle(kept, budget).decode("utf-8", errors="replace")
    if total <= budget:
        return data.decode("utf-8", errors="replace")
    text = data.decode("utf-8", errors="replace")
    header = f"Warning: truncated output (original token count: {approx_tokens(total)})\nTotal output lines: {_lines(text)}\n\n"
    return header + truncate_middle(data, budget).decode("utf-8", errors="replace")


def render(data: bytes, exit_code: int | None, wall_s: float, max_tokens: int) -> str:
    status = (
        f"Process exited with code {exit_code}"
        if exit_code is not None
        else f"Process running with session ID {1000 + secrets.randbelow(99000)}"
    )
    return "\n".join(
        [
            f"Chunk ID: {secrets.token_hex(3)}",
            f"Wall time: {wall_s:.4f} seconds",
            status,
            f"Original token count: {approx_tokens(len(data))}",
            "Output:",
            render_output(data, max_tokens),
        ]
    )


_TIMED = (
    'cd -- "$1" 2>/dev/null || { echo no-workdir >&2; exit 0; }; shift; '
    's=$(date +%s%N); "$@" 2>&1 </dev/null; rc=$?; e=$(date +%s%N); echo "$((e - s))" >&2; exit $rc'
)
SPAWN_FAILED = (
    'exec_command failed: CreateProcess { message: "Rejected(\\"Failed to create unified exec process: '
    'No such file or directory (os error 2)\\")" }'
)


class ExecCommand:
    def __init__(self, sandbox: Sandbox, cwd: str, env: dict[str, str]):
        self.sandbox = sandbox
        self.cwd = cwd
        self.env = env

    def run(self, call_id: str, args: dict[str, Any]) -> Observation:
        cmd = str(args["cmd"])
        workdir = posixpath.normpath(posixpath.join(self.cwd, str(args.get("workdir") or "")))
        yield_ms = min(
            max(int(args.get("yield_time_ms") or DEFAULT_YIELD_MS), YIELD_RANGE_MS[0]), YIELD_RANGE_MS[1]
        )
        max_tokens = min(int(args.get("max_output_tokens") or DEFAULT_MAX_TOKENS), MODEL_TOKEN_LIMIT)
        env = {**self.env, "CODEX_TOOL_CALL_ID": call_id}
        # The CLI runs the command as `/bin/bash -c` under the environment of its login-shell snapshot
        # (recorded); stdout and stderr share one pipe, in write order; stdin is /dev/null (tty=false).
        # The wall time is measured in the sandbox and reported on the wrapper's own stderr.
        argv = ["bash", "-c", _TIMED, "exec_command", workdir, "/bin/bash", "-c", cmd]
        result = self.sandbox.exec(
            argv, workdir="/", env=env, timeout_s=yield_ms / 1000, kill_on_timeout=False
        )
        if result.stderr.strip() == b"no-workdir":
            return Observation(content=SPAWN_FAILED)
        if result.timed_out:
            return Observation(content=render(result.stdout, None, yield_ms / 1000, max_tokens))
        try:
            wall_s = int(result.stderr.split()[-1]) / 1e9
        except (IndexError, ValueError):
            wall_s = result.duration_s
        return Observation(content=render(result.stdout, result.exit_code, wall_s, max_tokens))
