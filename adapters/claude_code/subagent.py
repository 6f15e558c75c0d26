"""A Task/Agent subagent's own transcript (`agent-<agentId>.jsonl`), and the parent session it belongs to.

The CLI writes a subagent's conversation to its own file: every user/assistant record `isSidechain: true`,
with the subagent's `agentId` and the parent's `sessionId`. Since 2.1 the file lies in
`<project>/<sessionId>/subagents/`, before that beside the parent's `<project>/<sessionId>.jsonl`. The
parent's Task/Agent call that started it is the one whose result (`toolUseResult.agentId`) or whose
`agent_progress` records name that agent. The CLI resumes sessions, never a subagent (`--resume` takes
the parent's id and loads its main thread), so a subagent's file is rerun but not continued.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.claude_code.chain import Session, safe_id
from replayer.floor.errors import BadInput, ReplayError
from replayer.floor.foreign import Folder, read_beside
from replayer.floor.trajectory import Step, SubagentFile, SubagentOf, Trajectory

PARENT_MAX_BYTES = 256 * 1024 * 1024
"""The parent session read to name the call that started the subagent (a long session is tens of MB)."""
MAX_SUBAGENT_FILES = 200
"""The subagent files a session lists at most."""
MAX_SCANNED_ENTRIES = 10_000
"""The entries of a `subagents/` folder looked at at most."""
_AGENT_FILE = re.compile(r"agent-([A-Za-z0-9_-]{1,64})\.jsonl")


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


def subagent_files(session: Session, path: Path, session_id: str, steps: list[Step]) -> list[SubagentFile]:
    """The subagents' own transcripts of a (main) session where the CLI writes them: every `agent-*.jsonl` of
    `<sessionId>/subagents/` beside its file (2.1 on), and the `agent-<agentId>.jsonl` beside it of each
    agent the session names (before 2.1 that folder holds every session's). Listed, not read: no link is
    followed, only regular files count, at most `MAX_SUBAGENT_FILES`."""
    if session.subagent_thread or not safe_id(session_id):
        return []
    calls = _agent_calls(session)
    step_of = {c.id: s.index for s in steps for c in s.calls}
    found: dict[str, Path] = {}
    for agent_id, file in _in_subagents_folder(path.parent, session_id):
        found.setdefault(agent_id, file)
    for agent_id in calls:
        if agent_id not in found and safe_id(agent_id) and _regular(path.parent, f"agent-{agent_id}.jsonl"):
            found[agent_id] = path.parent / f"agent-{agent_id}.jsonl"
    listed = sorted(found.items(), key=lambda item: str(item[1]))[:MAX_SUBAGENT_FILES]
    return [
        SubagentFile(
            file=str(file),
            agent_id=agent_id,
            parent_call=calls.get(agent_id),
            parent_step=step_of.get(calls.get(agent_id) or ""),
        )
        for agent_id, file in listed
    ]


def _agent_calls(session: Session) -> dict[str, str]:
    """agentId -> the session's tool call that started that subagent (its progress records, its result)."""
    found: dict[str, str] = {}
    for rec in session.records:
        data = rec.get("data")
        if isinstance(data, dict) and isinstance(data.get("agentId"), str):
            if isinstance(rec.get("parentToolUseID"), str):
                found.setdefault(data["agentId"], rec["parentToolUseID"])
            continue
        result = rec.get("toolUseResult")
        message = rec.get("message")
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(result, dict) and isinstance(result.get("agentId"), str) and isinstance(content, list):
            for block in content:
                if isinstance(block, dict) and isinstance(block.get("tool_use_id"), str):
                    found.setdefault(result["agentId"], block["tool_use_id"])
    return found


def _in_subagents_folder(folder: Path, session_id: str) -> Iterator[tuple[str, Path]]:
    """(agentId, file) of the regular `agent-*.jsonl` files of `folder/<sessionId>/subagents/`."""
    try:
        with (
            Folder.open(folder) as top,
            top.sub(f"{session_id}/subagents") as found,
            os.scandir(found.fd) as entries,
        ):
            for n, entry in enumerate(entries):
                if n >= MAX_SCANNED_ENTRIES:
                    break
                match = _AGENT_FILE.fullmatch(entry.name)
                if match and entry.is_file(follow_symlinks=False):
                    yield match.group(1), folder / session_id / "subagents" / entry.name
    except (BadInput, OSError):
        return


def _regular(folder: Path, name: str) -> bool:
    try:
        with Folder.open(folder) as found:
            return found.kind(name) == "file"
    except BadInput:
        return False
