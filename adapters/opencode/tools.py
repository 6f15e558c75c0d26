"""How each OpenCode tool is replayed: by the pinned CLI itself, kept (pure), or refused."""

from __future__ import annotations

from replayer.models import ToolCall, ToolKind

RERUN_TOOLS = frozenset({"bash", "read", "write", "edit", "glob", "grep", "list"})
"""Executed again by the pinned CLI in the sandbox (its own implementation, its own output)."""
PURE_TOOLS = frozenset({"invalid", "todowrite", "todoread"})
"""`invalid` is the CLI's rewrite of a call it could not run (its result is fixed by the call);
the todo tools only echo the session's todo list."""


def classify(call: ToolCall) -> tuple[ToolKind, str | None]:
    if call.tool in PURE_TOOLS:
        return "pure", None
    if call.tool == "task":
        return "unknown", "task runs a sub-agent session (not replayed)"
    if call.tool not in RERUN_TOOLS:
        return "unknown", f"unknown tool {call.tool!r}"
    return "rerun", None
