"""The pinned Claude Code CLI: where it is mounted, what each version takes, and which of its tools are rerun
(by the CLI itself, driven: `rerun.py`) and which are pure."""

from __future__ import annotations

from replayer.adapters import sandbox_paths
from replayer.floor.pins import release

FILE_TOOLS = frozenset({"Read", "Write", "Edit"})
NOT_OFFERED = frozenset({"Glob", "Grep", "TodoWrite", "MultiEdit", "LS"})
"""Tools the pinned CLI does not offer: rerun too, the CLI answers a call with its own error."""
RERUN_TOOLS = frozenset({"Bash", *FILE_TOOLS, *NOT_OFFERED})
PURE_TOOLS = frozenset({"TaskCreate", "TaskGet", "TaskList", "TaskUpdate"})
"""Agent-internal state only (the task list); their historical result is kept."""


def agent_mount(version: str) -> str:
    return sandbox_paths.agent_mount("claude_code", version)


SESSION_ID_FROM = (1, 0, 53)
"""The first release whose `-p` takes `--session-id <uuid>` (1.0.51's cli.js has no such option: `error: unknown
option '--session-id'`; 1.0.53's has it; 1.0.52 was not published). Before it, a run starts a session of the
CLI's own choosing, and `--resume <id>` loads `<id>.jsonl` into a new session (with a new id) that holds the
loaded history: such a version is driven by the id each run reports."""


def takes_session_id(version: str) -> bool:
    """Whether `claude -p` at `version` takes `--session-id` (else the session is the CLI's own)."""
    return release(version) >= SESSION_ID_FROM


REPEATED_TURNS_UNTIL = (1, 0, 51)
"""Releases up to this one (observed: 1.0.44, 1.0.51; not 1.0.108) send a tool turn twice in a row on the wire
(the assistant message and its results, then both again), while their session file holds it once."""


def repeats_turns(version: str) -> bool:
    return release(version) <= REPEATED_TURNS_UNTIL
