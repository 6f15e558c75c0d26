"""A Gemini CLI subagent's own session file (`kind: subagent`), and the main session it belongs to.

A subagent (`cli_help`, `codebase_investigator`, ...) records its conversation in its own file of the
project's `chats/` folder, under its parent's `sessionId` and `kind: subagent`: its prompt, thoughts and
answers, not the calls of its own tools, so it has no step to rerun. Its parent is the main session of the
same id in the same folder (named `session-<time>-<first 8 of the id>`, the id's prefix ending the name); the parent's call that started it
is the one whose question the subagent's prompt quotes. The CLI resumes a main session only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from itertools import islice
from pathlib import Path
from typing import Any

import orjson

from replayer.floor.errors import ReplayError
from replayer.floor.foreign import read_beside
from replayer.floor.trajectory import SubagentOf, Trajectory

PARENT_MAX_BYTES = 64 * 1024 * 1024
MAX_ENTRIES = 100_000
"""Names of the folder looked at (a `chats/` folder holds a few hundred)."""
MAX_CANDIDATES = 64
"""Files of the folder looked at for the parent (those whose name ends with the session id's prefix)."""
NOTE = "a Gemini CLI subagent's file records its prompt and answers, not its own tool calls: no step to rerun"


def subagent_of(
    metadata: dict[str, Any], messages: list[dict[str, Any]], path: Path, parse: Callable[[Path], Trajectory]
) -> SubagentOf | None:
    if metadata.get("kind") != "subagent":
        return None
    session_id = str(metadata["sessionId"])
    for candidate in _candidates(path, session_id):
        data = read_beside(path.parent, candidate.name, PARENT_MAX_BYTES)
        head = _metadata(data) if data is not None else None
        if head is None or head.get("sessionId") != session_id or head.get("kind") == "subagent":
            continue
        try:
            parent = parse(candidate)
        except (ReplayError, OSError):
            continue
        prompt = _first_prompt(messages)
        call, step = next(
            (
                (c.id, s.index)
                for s in parent.steps
                for c in s.calls
                if prompt and any(isinstance(v, str) and v and v in prompt for v in c.input.values())
            ),
            (None, None),
        )
        return SubagentOf(
            parent_session_id=session_id, parent_file=str(candidate), parent_call=call, parent_step=step
        )
    return SubagentOf(parent_session_id=session_id)


def _candidates(path: Path, session_id: str) -> list[Path]:
    try:
        names = sorted(islice(os.listdir(path.parent), MAX_ENTRIES))
    except OSError:
        return []
    stem = session_id[:8]
    found = [
        path.parent / n for n in names if n != path.name and n.endswith((f"{stem}.json", f"{stem}.jsonl"))
    ]
    return found[:MAX_CANDIDATES]


def _metadata(data: bytes) -> dict[str, Any] | None:
    """A document's top level, or a log's first line."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        try:
            value = orjson.loads(data.split(b"\n", 1)[0])
        except orjson.JSONDecodeError:
            return None
    return value if isinstance(value, dict) else None


def _first_prompt(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        if message.get("type") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""
