"""Which Claude Code tools are rerun (by the CLI itself, driven: `driven.py`) and which are pure."""

from __future__ import annotations

from replayer.adapters import sandbox_paths

FILE_TOOLS = frozenset({"Read", "Write", "Edit"})
NOT_OFFERED = frozenset({"Glob", "Grep", "TodoWrite", "MultiEdit", "LS"})
"""Tools the pinned CLI does not offer: rerun too, the CLI answers a call with its own error."""
RERUN_TOOLS = frozenset({"Bash", *FILE_TOOLS, *NOT_OFFERED})
PURE_TOOLS = frozenset({"TaskCreate", "TaskGet", "TaskList", "TaskUpdate"})
"""Agent-internal state only (the task list); their historical result is kept."""


def agent_mount(version: str) -> str:
    return sandbox_paths.agent_mount("claude_code", version)
