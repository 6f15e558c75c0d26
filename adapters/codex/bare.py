"""Codex rollouts from before the `{type, payload}` envelope (the CLIs of mid 2025, up to about 0.33).

Line 1 is a bare header `{id, timestamp, instructions?, git?}`; every later line is either a state
snapshot `{"record_type": "state", ...}` or a bare response item (`{"type": "function_call", ...}`).
codex-rs reads them so (core/src/rollout.rs of that time): the first line is the SessionMeta, a
`record_type` "state" line is not history, any other line is a ResponseItem. Each line is read here
into the envelope record the later CLIs write, so that the rest of the adapter reads one form.
"""

from __future__ import annotations

import re
from typing import Any

from replayer.floor.errors import excerpt

Record = dict[str, Any]
RESUMED_BY = "0.58.0"
RESUMED_BECAUSE = (
    "a bare rollout records no version, and the CLIs that wrote them (mid 2025, before `exec resume`) "
    f"cannot resume one: {RESUMED_BY}, the oldest verified release that resumes it and offers its `shell` "
    "tool, runs it (--agent-version chooses another)"
)
ITEM_TYPES = {
    "message",
    "reasoning",
    "function_call",
    "function_call_output",
    "custom_tool_call",
    "custom_tool_call_output",
    "local_shell_call",
    "web_search_call",
}
"""The response item types such a CLI wrote (a sign of the form when detecting)."""
STATE = "state"
_CWD = re.compile(r"<cwd>([^<\x00]+)</cwd>")


def is_header(record: Any) -> bool:
    """A bare header: no envelope, an id and a timestamp (a later writer marked it `record_type` "session_meta")."""
    return (
        isinstance(record, dict)
        and "type" not in record
        and "payload" not in record
        and isinstance(record.get("id"), str)
        and isinstance(record.get("timestamp"), str)
        and record.get("record_type", "session_meta") == "session_meta"
    )


def looks_bare(head: list[Any]) -> bool:
    """A bare header followed by state lines or bare response items."""
    return bool(head) and is_header(head[0]) and any(_is_bare_line(r) for r in head[1:])


def _is_bare_line(record: Any) -> bool:
    if not isinstance(record, dict) or "payload" in record:
        return False
    return record.get("record_type") == STATE or record.get("type") in ITEM_TYPES


def envelope(record: Any, first: bool) -> Record | str:
    """The envelope record of a bare line, or what is wrong with it."""
    if not isinstance(record, dict):
        return "is not a rollout record"
    rest = {k: v for k, v in record.items() if k != "record_type"}
    kind = record.get("record_type")
    if first:  # a bare rollout is one whose first line is a header
        return {"timestamp": record["timestamp"], "type": "session_meta", "payload": rest}
    if kind == STATE:
        return {"type": STATE, "payload": rest}
    if kind is None or kind == "response":
        return {"type": "response_item", "payload": rest}
    return f"has record_type {excerpt(kind)}, which is not read (a rollout form not read yet)"


def context_cwd(records: list[Record]) -> str | None:
    """The session cwd, which a bare header does not record: the first `<environment_context>` user
    message's `<cwd>` (the CLI put one at the start of every session)."""
    for record in records:
        payload = record["payload"] if record.get("type") == "response_item" else None
        if not payload or payload.get("type") != "message" or payload.get("role") != "user":
            continue
        content = payload.get("content")
        for part in content if isinstance(content, list) else []:
            text = part.get("text") if isinstance(part, dict) else None
            if isinstance(text, str) and text.lstrip().startswith("<environment_context>"):
                found = _CWD.search(text)
                return found.group(1).strip() if found else None
    return None


def resumable(record: Record, meta_fields: dict[str, Any], timestamp: str) -> Record:
    """A record as a later CLI resumes it: every line needs a `timestamp` (a bare item has none: the
    header's is used; 0.171.0 reads no history without) and the session_meta a `cwd`, `originator` and
    `cli_version` (0.171.0 refuses the rollout without them). A response item loses its `id`: the CLIs that
    resume rollouts (`exec resume`, from about 0.39; 0.58 and 0.125 observed) neither write nor send item
    ids, and one written here would be sent by those that do (0.171)."""
    out = {"timestamp": timestamp, **record}
    if record.get("type") == "session_meta":
        out["payload"] = {**meta_fields, **record["payload"]}
    elif record.get("type") == "response_item":
        out["payload"] = without_id(record["payload"])
    return out


def without_id(payload: Record) -> Record:
    return {k: v for k, v in payload.items() if k != "id"}


def meta_fields(records: list[Record]) -> dict[str, Any]:
    """What a bare header lacks: the cwd its `<environment_context>` names, the Rust CLI's originator,
    and no version (none is recorded)."""
    return {"cwd": context_cwd(records) or "", "originator": "codex_cli_rs", "cli_version": ""}
