"""A Task/Agent subagent's own transcript (`agent-<agentId>.jsonl`), and the parent session it belongs to.

The CLI writes a subagent's conversation to its own file: every user/assistant record `isSidechain: true`,
with the subagent's `agentId` and the parent's `sessionId`. Since 2.1 the file lies in
`<project>/<sessionId>/subagents/`, before that beside the parent's `<project>/<sessionId>.jsonl`. The
parent's Task/Agent call that started it is the one whose result (`toolUseResult.agentId`) or whose
`agent_progress` records name that agent. The CLI resumes sessions, never a subagent (`--resume` takes
the parent's id and loads its main thread), so a subagent's file is rerun but not continued.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.claude_code.chain import Session, safe_id
from replayer.floor.errors import ReplayError
from replayer.floor.io import read_beside
from replayer.floor.models import SubagentOf, Trajectory

PARENT_MAX_BYTES = 256 * 1024 * 1024
"""The parent session read to name the call that started the subagent (a long session is tens of MB)."""


def subagent_of(
    session: Session, path: Path, session_id: str, parse: Callable[[Path], Trajectory]
) -> SubagentOf | None:
    """The parent of a subagent's file (None for any other session file); `parse` reads the parent."""
    if not session.subagent_thread:
        return None
    agent_id = session.first("agentId")
    agent_id = agent_id if isinstance(agent_id, str) and safe_id(agent_id) else None  # names a file
    found = _parent_file(path, session_id)
    if found is None:
        return SubagentOf(parent_session_id=session_id, agent_id=agent_id)
    parent_path, data = found
    call = _spawning_call(data, agent_id) if agent_id else None
    return SubagentOf(
        parent_session_id=session_id,
        agent_id=agent_id,
        parent_file=str(parent_path),
        parent_call=call,
        parent_step=_step_of(parse, parent_path, call) if call else None,
    )


def _parent_file(path: Path, session_id: str) -> tuple[Path, bytes] | None:
    """The parent's file where the CLI keeps it, read without following a link (None: absent, unreadable)."""
    name = f"{session_id}.jsonl"
    folders = [path.parent]
    if path.parent.name == "subagents" and path.parent.parent.name == session_id:
        folders.insert(0, path.parent.parent.parent)
    for folder in folders:
        data = read_beside(folder, name, PARENT_MAX_BYTES)
        if data is not None:
            return folder / name, data
    return None


def _spawning_call(data: bytes, agent_id: str) -> str | None:
    """The id of the parent's tool call whose result or progress names `agent_id`."""
    marker = f'"agentId":"{agent_id}"'.encode()
    for line in data.splitlines():
        if marker not in line.replace(b'": "', b'":"'):
            continue
        try:
            rec: Any = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(rec, dict):
            continue
        if isinstance(rec.get("parentToolUseID"), str):
            return str(rec["parentToolUseID"])
        result = rec.get("toolUseResult")
        content = (rec.get("message") or {}).get("content") if isinstance(rec.get("message"), dict) else None
        if isinstance(result, dict) and result.get("agentId") == agent_id and isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and isinstance(block.get("tool_use_id"), str):
                    return str(block["tool_use_id"])
    return None


def _step_of(parse: Callable[[Path], Trajectory], parent_path: Path, call: str) -> int | None:
    """The parent's step holding `call` (None when the parent does not parse)."""
    try:
        parent = parse(parent_path)
    except (ReplayError, OSError):
        return None
    return next((s.index for s in parent.steps for c in s.calls if c.id == call), None)
