"""Claude Code 2.1.197's model-visible texts, verbatim from the CLI (docs/adapters/claude_code.md cites them)."""

from __future__ import annotations

from typing import Any

from replayer.models import Observation

FILE_STATE_CURRENT = " (file state is current in your context — no need to Read it back)"
NOT_READ = "File has not been read yet. Read it first before writing to it."
MODIFIED_SINCE_READ = "File has been modified since read, either by the user or by a linter. Read it again before attempting to write it."
UNCHANGED_READ = (
    "Wasted call — file unchanged since your last Read. Refer to that earlier tool_result instead."
)
SIZE_HINT = (
    "Use offset and limit parameters to read specific portions of the file, or search for specific content "
    "instead of reading the whole file."
)
MAX_READ_BYTES = 262144
ERROR_MAX_CHARS = 10000
ERROR_KEEP_CHARS = 5000

# Tools the pinned CLI does not offer (a call gets this error back; the CLI never ran anything).
NOT_OFFERED_HINTS = {
    "Glob": ". Glob is not available in this session — find files with `find` via the Bash tool instead.",
    "Grep": ". Grep is not available in this session — search file contents with `grep` via the Bash tool instead.",
    "TodoWrite": ". TodoWrite exists but is not enabled in this context. Use one of the available tools instead.",
    "MultiEdit": "",
    "LS": "",
}


def validation_error(message: str) -> Observation:
    """A validateInput / unknown-tool rejection: wrapped in <tool_use_error>."""
    return Observation(
        content=f"<tool_use_error>{message}</tool_use_error>", is_error=True, structured=f"Error: {message}"
    )


def thrown_error(message: str) -> Observation:
    """An error thrown by the tool's call(): the bare message, middle-truncated past 10,000 characters."""
    text = message.strip() or "Command failed with no output"
    if len(text) > ERROR_MAX_CHARS:
        cut = len(text) - 2 * ERROR_KEEP_CHARS
        text = (
            f"{text[:ERROR_KEEP_CHARS]}\n\n... [{cut} characters truncated] ...\n\n{text[-ERROR_KEEP_CHARS:]}"
        )
    return Observation(content=text, is_error=True, structured=f"Error: {text}")


def not_offered(tool: str) -> Observation:
    return validation_error(f"Error: No such tool available: {tool}{NOT_OFFERED_HINTS[tool]}")


def human_size(n: int) -> str:
    """The CLI's `ja`: bytes, then KB/MB/GB with one decimal and a trailing .0 dropped."""
    if n < 1024:
        return f"{n} bytes"
    value = float(n)
    for unit in ("KB", "MB", "GB"):
        value /= 1024
        if value < 1024 or unit == "GB":
            return f"{value:.1f}".removesuffix(".0") + unit
    raise AssertionError("unreachable")


def empty_content(tool: str, content: Any) -> Any:
    """The CLI's post-processing of every successful result: empty becomes '(<Tool> completed with no output)'."""
    if isinstance(content, str) and content.strip() == "":
        return f"({tool} completed with no output)"
    return content


def duration(ms: int) -> str:
    """The CLI's `Xi` for the durations a Bash timeout can have: 30s, 2m 0s, 1h 2m 3s."""
    if ms < 60000:
        return f"{ms // 1000}s"
    hours, minutes, seconds = ms // 3600000, ms % 3600000 // 60000, round(ms % 60000 / 1000)
    if seconds == 60:
        seconds, minutes = 0, minutes + 1
    return f"{hours}h {minutes}m {seconds}s" if hours else f"{minutes}m {seconds}s"
