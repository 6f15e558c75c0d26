"""Continue Claude Code from the rebuilt boundary: the command line, and the cleanup of the envelope afterwards."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.base import stdout_events
from replayer.adapters.claude_code import envelope
from replayer.adapters.claude_code import rerun as driven
from replayer.adapters.claude_code.chain import CHAIN_TYPES, Record
from replayer.adapters.claude_code.session import Native, project_dir_name
from replayer.adapters.sandbox_paths import AGENT_HOME, PLACEHOLDER_KEY
from replayer.floor.errors import ConfinementError
from replayer.floor.io import MAX_INPUT_BYTES, Workspace
from replayer.floor.limits import ReadBudget
from replayer.floor.trajectory import Trajectory


def recorded_model(traj: Trajectory) -> str | None:
    native = traj.native_as(Native)
    for rec in reversed(native.session.records):
        model = rec.get("message", {}).get("model") if rec.get("type") == "assistant" else None
        if isinstance(model, str) and model != "<synthetic>":
            return model
    return None


def command(traj: Trajectory, prompt: str, port: int, model: str | None) -> tuple[list[str], dict[str, str]]:
    assert traj.session_id
    argv = driven.cli_argv(prompt, ["--resume", traj.session_id], model)
    return argv, driven.cli_env(port, PLACEHOLDER_KEY)


def _text_of(rec: Record) -> str | None:
    content = rec.get("message", {}).get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict):
        return content[0].get("text")
    return None


def clean(records: list[Record], prefix_len: int, prompt: str, keep_prompt: bool) -> list[Record]:
    """Remove the resume envelope the CLI appended after the prefix, re-parenting what followed.

    Drops the isMeta "Continue from where you left off." record, the synthetic "No response
    requested." reply and (nonce mode) the nonce prompt with its queue operations; a kept
    boundary prompt is re-parented onto the boundary leaf. Records before `prefix_len` are untouched.
    """
    head, tail = records[:prefix_len], records[prefix_len:]
    leaf = next((r["uuid"] for r in reversed(head) if r.get("type") in CHAIN_TYPES), None)
    dropped: dict[str, str | None] = {}  # uuid -> the parent its children move to
    skip_dequeue = False
    out: list[Record] = []
    last_prompt = next((r.get("lastPrompt") for r in reversed(head) if r.get("type") == "last-prompt"), None)
    for rec in tail:
        uuid = str(rec.get("uuid"))
        kind = rec.get("type")
        text = _text_of(rec) if kind in CHAIN_TYPES else None
        parent: str | None = rec.get("parentUuid")
        is_meta = kind == "user" and rec.get("isMeta") and text == envelope.CONTINUE_TEXT
        is_synthetic = kind == "assistant" and rec.get("message", {}).get("model") == "<synthetic>"
        is_prompt = kind == "user" and text == prompt and not rec.get("isMeta")
        is_notice = kind == "user" and text is not None and envelope.stopped_shell_call(text) is not None
        if is_meta or is_synthetic or is_notice or (is_prompt and not keep_prompt):
            dropped[uuid] = dropped.get(parent, parent) if parent is not None else None
            continue
        if kind == "queue-operation" and not keep_prompt:
            content = str(rec.get("content", ""))
            if rec.get("operation") == "enqueue" and (
                content == prompt or envelope.stopped_shell_call(content)
            ):
                skip_dequeue = True
                continue
            if rec.get("operation") == "dequeue" and skip_dequeue:
                skip_dequeue = False
                continue
        rec = dict(rec)
        if parent in dropped:
            rec["parentUuid"] = dropped[parent] if dropped[parent] is not None else leaf
        if kind == "last-prompt" and rec.get("lastPrompt") == prompt and not keep_prompt:
            rec["lastPrompt"] = last_prompt
        out.append(rec)
    return [*head, *out]


def finish(
    traj: Trajectory, prefix_file: Path, home: Path, dest: Path, prompt: str, keep_prompt: bool
) -> dict[str, str]:
    """Write the continued session as the CLI left it and cleaned of the envelope; returns relative names."""
    found = _continued(traj, home, prompt)
    dest.mkdir(parents=True, exist_ok=True)
    files: dict[str, Any] = {}
    if found is None:
        return files
    raw, records = found
    (dest / "session.raw.jsonl").write_bytes(raw)
    prefix = [orjson.loads(line) for line in prefix_file.read_bytes().splitlines() if line.strip()]
    prefix_len = len(prefix)
    leaf = next((r["uuid"] for r in reversed(prefix) if r.get("type") in CHAIN_TYPES), None)
    at = next((i for i, r in enumerate(records) if r.get("uuid") == leaf), None)
    if at is not None and at + 1 != prefix_len and records[:prefix_len] != prefix:
        prefix_len = at + 1  # a new session file: its copy of the history ends at the prefix's leaf
    cleaned = clean(records, prefix_len, prompt, keep_prompt)
    (dest / "session.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in cleaned))
    files["continued_session"] = "continued/session.jsonl"
    files["continued_session_raw"] = "continued/session.raw.jsonl"
    return files


def _continued(traj: Trajectory, home: Path, prompt: str) -> tuple[bytes, list[Record]] | None:
    """The session file the CLI continued: the rebuilt one, or (1.0.x, which continues in a new session
    file holding a copy of the history) the file of that project whose records carry the prompt. The
    home is the sandbox's: read the confined way."""
    assert traj.cwd and traj.session_id
    confined = Workspace(home, AGENT_HOME)
    project = f"{AGENT_HOME}/.claude/projects/{project_dir_name(traj.cwd)}"
    own = f"{project}/{traj.session_id}.jsonl"
    names = [own]
    if confined.kind(project) == "dir":
        with os.scandir(home / ".claude" / "projects" / project_dir_name(traj.cwd)) as entries:
            others = sorted(
                e.name for e in entries if e.name.endswith(".jsonl") and e.is_file(follow_symlinks=False)
            )
        names += [f"{project}/{name}" for name in others if f"{project}/{name}" != own][:_MAX_SESSIONS]
    first: tuple[bytes, list[Record]] | None = None
    for name in names:
        try:
            raw = confined.read(name, _READ).data
        except ConfinementError:
            continue
        records = [r for r in map(_record, raw.splitlines()) if r is not None]
        if any(r.get("type") == "user" and _text_of(r) == prompt for r in records):
            return raw, records
        first = first or ((raw, records) if name == own else None)
    return first


_MAX_SESSIONS = 64
_READ = ReadBudget(max_scan_bytes=MAX_INPUT_BYTES)


def _record(line: bytes) -> Record | None:
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def reported_failure(stdout: bytes) -> bool:
    """The stream-json `result` event says the run failed."""
    result = next((e for e in reversed(stdout_events(stdout)) if e.get("type") == "result"), None)
    return bool(result.get("is_error")) if result else False
