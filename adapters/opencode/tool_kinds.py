"""How each OpenCode tool is replayed: by the pinned CLI itself, kept (pure), or refused."""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Iterator

from replayer.floor.trajectory import ToolCall, ToolKind

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


def directories(batches: Iterable[list[ToolCall]]) -> Iterator[str]:
    """The directories the file tools' absolute paths name: a file's folder, a listed or searched folder
    itself, a read of a folder (its output says `<type>directory</type>`) that folder."""
    for calls in batches:
        for call in calls:
            if call.tool in ("read", "write", "edit"):
                path = call.input.get("filePath")
                if not isinstance(path, str):
                    continue
                if not path.startswith("/"):
                    root = _resolved_root(call, path)
                    if root is not None:
                        yield root
                    continue
                output = call.historical.content if call.historical is not None else ""
                folder = (
                    call.tool == "read" and isinstance(output, str) and "<type>directory</type>" in output
                )
                yield path if folder else posixpath.dirname(path)
            elif call.tool in ("list", "glob", "grep") and isinstance(call.input.get("path"), str):
                yield call.input["path"]
            elif call.tool == "bash" and isinstance(call.input.get("workdir"), str):
                yield call.input["workdir"]


def _resolved_root(call: ToolCall, relative: str) -> str | None:
    """The folder a relative `filePath` was resolved against: the tool's own record of the absolute file
    (`metadata.filepath` of write and edit) less that relative path."""
    state = call.historical.structured if call.historical is not None else None
    metadata = state.get("metadata") if isinstance(state, dict) else None
    resolved = metadata.get("filepath") if isinstance(metadata, dict) else None
    suffix = "/" + posixpath.normpath(relative)
    if not isinstance(resolved, str) or relative.startswith("../") or not resolved.endswith(suffix):
        return None
    return resolved[: -len(suffix)] or None
