"""Claude Code session -> Trajectory (steps), and the rebuilt native prefix with fresh observations."""

from __future__ import annotations

import copy
import re
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters import carried
from replayer.adapters.claude_code import chain, subagent
from replayer.adapters.claude_code.chain import Record, Session
from replayer.floor.errors import BadInput
from replayer.floor.trajectory import Observation, StartingState, Step, ToolCall, Trajectory

UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE)
"""A session id `claude --resume` takes (the CLI's own check); it names the session's file `<id>.jsonl`."""


@dataclass
class StepSpan:
    """Where a step lives in the expanded chain: its first assistant item and its last result item."""

    start: int
    end: int


@dataclass
class Native:
    session: Session
    items: list[Record]
    """The expanded active chain after the last compaction, root to leaf (the segment it kept after its summary)."""
    on_chain: set[str]
    spans: list[StepSpan]
    """One per post-compaction step, in order."""
    pre_compaction_steps: int
    repaired: dict[str, str] = field(default_factory=dict)
    pre_items: list[Record] = field(default_factory=list)
    """The expanded chain the last compaction summarized (from its logical parent back), root to leaf."""
    pre_spans: list[StepSpan] = field(default_factory=list)
    """One per pre-compaction step: a boundary among them cuts this chain, the compaction dropped."""


def parse(path: Path) -> Trajectory:
    session = chain.load(path)
    if not any(chain.looks_like_claude_code([r]) for r in session.records):
        raise BadInput(
            f"{path} is not a Claude Code session (no user/assistant record with a uuid, parentUuid and message)"
        )
    session_id, notes = _session_id(session, path)
    notes += [
        f"line {n} skipped, as Claude Code skips a line that is not JSON" for n in session.skipped_lines
    ]
    notes += carried.note((r.get("type") for r in session.records), chain.RECORD_TYPES)
    leaf = chain.select_leaf(session)
    links, kept = chain.preserved_links(session)
    walked, boundary, repaired = chain.walk(session, leaf, links)
    items = chain.expand(session, walked)
    pre_steps: list[Step] = []
    pre_items: list[Record] = []
    pre_spans: list[StepSpan] = []
    pre_walked: list[Record] = []
    if boundary is not None and isinstance(boundary.get("logicalParentUuid"), str):
        parent = session.by_uuid.get(boundary["logicalParentUuid"])
        if parent is not None:
            pre_walked, _, pre_repaired = chain.walk(session, parent)
            repaired = {**pre_repaired, **repaired}
            pre_items = chain.expand(session, pre_walked)
            pre_steps, pre_spans = _steps(pre_items, start=1, before_compaction=True)
    # the segment a compaction kept is on both sides of it: its steps are the summarized history's
    steps, spans = _steps(items, start=len(pre_steps) + 1, before_compaction=False, kept=set(kept))
    if pre_steps:
        notes.append(_compaction_note(boundary, len(pre_steps), len(kept)))
    traj = Trajectory(
        agent="claude_code",
        agent_version=session.first("version"),
        session_id=session_id,
        cwd=session.first("cwd"),
        source=str(path),
        source_sha256=session.sha256,
        steps=[*pre_steps, *steps],
        parse_notes=notes,
        start=StartingState.of(None, None, session.first("gitBranch")),
        subagent_of=subagent.subagent_of(session, path, session_id, parse),
        subagents=subagent.subagent_files(session, path, session_id, [*pre_steps, *steps]),
    )
    traj.keep_native(
        Native(
            session=session,
            items=items,
            on_chain={r["uuid"] for r in [*pre_walked, *walked]},
            spans=spans,
            pre_compaction_steps=len(pre_steps),
            repaired=repaired,
            pre_items=pre_items,
            pre_spans=pre_spans,
        )
    )
    return traj


def _compaction_note(boundary: Record | None, before: int, kept: int) -> str:
    meta = boundary.get("compactMetadata") if boundary is not None else None
    trigger = meta.get("trigger") if isinstance(meta, dict) else None
    how = f" ({trigger})" if isinstance(trigger, str) else ""
    note = (
        f"compacted after step {before}{how}: from that boundary on the prefix is the recorded summary and what "
        "follows it; the steps after it rerun by a CLI fed the summarized history uncompacted"
    )
    if kept:
        note += f"; the {kept} record(s) the compaction kept verbatim follow the summary, as the CLI's loader puts them"
    return note


def _session_id(session: Session, path: Path) -> tuple[str, list[str]]:
    """The recorded sessionId; without one (the CLI resumes a session whose lines name none), the file
    name the CLI gives a session, `<uuid>.jsonl`, else an id derived from the file's content."""
    if session.session_id is not None:
        return session.session_id, []
    if UUID.fullmatch(path.stem):
        return path.stem, [f"no record names a sessionId: the session id is the file name's, {path.stem}"]
    derived = str(uuid.uuid5(uuid.NAMESPACE_OID, session.sha256))
    return derived, [
        f"no record names a sessionId and the file name is not a session id: the session id {derived} "
        "is derived from the file's content (uuid5 of its SHA-256)"
    ]


def _steps(
    items: list[Record], start: int, before_compaction: bool, kept: set[str] | None = None
) -> tuple[list[Step], list[StepSpan]]:
    """Each step is validated once, as a whole (one pydantic call, not one per call and observation). The
    records of `kept` (a segment a compaction kept) start no step."""
    steps: list[Step] = []
    spans: list[StepSpan] = []
    # message_id's, inline: a record of type assistant has a message object (chain.record_problem)
    mids = [r["message"].get("id") if r.get("type") == "assistant" else None for r in items]
    i, n = 0, len(items)
    while i < n:
        mid = mids[i]
        if mid is None:
            i += 1
            continue
        j = i + 1
        while j < n and mids[j] == mid:
            j += 1
        uses = [
            b
            for r in items[i:j]
            if isinstance(content := r["message"].get("content"), list)
            for b in content
            if b.get("type") == "tool_use"
        ]
        if not uses or (kept and items[i].get("uuid") in kept):
            i = j
            continue
        results: dict[str, tuple[dict[str, Any], Record]] = {}
        k = j
        while k < n and items[k].get("type") == "user" and (found := _results(items[k])):
            for block in found:
                results.setdefault(block["tool_use_id"], (block, items[k]))
            k += 1
        calls = [  # of checked records (chain.record_problem): no second validation
            ToolCall(
                u["id"],
                u.get("name", ""),
                u.get("input") or {},
                _observation(*results[u["id"]]) if u["id"] in results else None,
            )
            for u in uses
        ]
        steps.append(
            Step(
                start + len(steps),
                mid,
                calls,
                all(c.historical is not None for c in calls),
                before_compaction,
            )
        )
        spans.append(StepSpan(start=i, end=k - 1))
        i = k
    return steps, spans


def _results(rec: Record) -> list[dict[str, Any]]:
    """The tool_result blocks of a user record (its message is an object: `chain.record_problem`)."""
    content = rec["message"].get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if b.get("type") == "tool_result"]


def _observation(block: dict[str, Any], rec: Record) -> Observation:
    content = block.get("content", "")
    return Observation(
        content if isinstance(content, (str, list)) else str(content),
        block.get("is_error"),
        rec.get("toolUseResult"),
    )


def project_dir_name(cwd: str) -> str:
    """~/.claude/projects/<this>: the cwd with every non-alphanumeric character replaced by '-'."""
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


def prefix_items(traj: Trajectory, after_step: int) -> list[Record]:
    """The chain up to step `after_step`'s last result. A boundary before the last compaction cuts the
    chain the compaction summarized: the cut drops the compaction, and the CLI resumes that history whole."""
    native = traj.native_as(Native)
    local = after_step - native.pre_compaction_steps
    items, spans = (native.items, native.spans) if local >= 0 else (native.pre_items, native.pre_spans)
    local = local if local >= 0 else after_step
    if local == 0:
        end = spans[0].start if spans else len(items)
        return items[:end]
    return items[: spans[local - 1].end + 1]


def with_observations(
    items: list[Record], observations: dict[str, Observation], repaired: dict[str, str]
) -> list[Record]:
    out = []
    for rec in items:
        ids = set(chain.tool_result_ids(rec)) & observations.keys()
        if not ids and rec.get("uuid") not in repaired:
            out.append(rec)
            continue
        rec = copy.deepcopy(rec)
        if rec.get("uuid") in repaired:
            rec["parentUuid"] = repaired[rec["uuid"]]
        for block in rec.get("message", {}).get("content", []) if ids else []:
            if isinstance(block, dict) and block.get("tool_use_id") in ids:
                obs = observations[block["tool_use_id"]]
                block["content"] = obs.content
                block.pop("is_error", None)
                if obs.is_error is not None:
                    block["is_error"] = obs.is_error
                if obs.structured is not None:
                    rec["toolUseResult"] = obs.structured
        out.append(rec)
    return out


def prefix_leaf(native: Native, items: list[Record]) -> Record | None:
    """The rebuilt session's leaf (its last-prompt names it): the last prefix record on the walked chain."""
    chain_like = [r for r in items if r.get("type") in chain.CHAIN_TYPES]
    on_chain = [r for r in chain_like if r["uuid"] in native.on_chain]
    return (on_chain or chain_like)[-1] if chain_like else None


def write_prefix(traj: Trajectory, items: list[Record], home: Path) -> Path:
    """The rebuilt session file: the prefix records in file order, then one last-prompt naming the leaf."""
    native = traj.native_as(Native)
    assert traj.session_id
    by_uuid = {r["uuid"]: r for r in items}
    records: list[Record] = []
    pending_queue: list[Record] = []
    for rec in native.session.records:
        if rec.get("type") == "queue-operation":
            pending_queue.append(rec)  # kept only when a prefix record follows it
        elif rec.get("uuid") in by_uuid:
            records.extend(pending_queue)
            pending_queue = []
            records.append(by_uuid[rec["uuid"]])
    leaf = prefix_leaf(native, items)
    if leaf is not None:
        records = [_latest(leaf, records) if r is leaf else r for r in records]
        records.append(
            {
                "type": "last-prompt",
                "lastPrompt": _last_prompt(items),
                "leafUuid": leaf["uuid"],
                "sessionId": traj.session_id,
            }
        )
    # no recorded cwd (prepare only: run refuses it): the project of "/", as the file tools' workspace check
    project = home / ".claude" / "projects" / project_dir_name(traj.cwd or "/")
    path = project / f"{traj.session_id}.jsonl"
    if traj.subagent_of is not None and traj.subagent_of.agent_id:  # where the CLI writes a subagent's file
        path = project / traj.session_id / "subagents" / f"agent-{traj.subagent_of.agent_id}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def _latest(leaf: Record, records: list[Record]) -> Record:
    """The leaf, with a timestamp after every other record's. 1.0.x resumes from the latest record (the
    first of equal ones), and a session it resumed once holds its copied history under one timestamp: a
    prefix ending there would resume as its first prompt alone. Timestamps are not sent to the model."""
    others = [r.get("timestamp") for r in records if r is not leaf and r.get("type") in chain.CHAIN_TYPES]
    latest = max((t for t in others if isinstance(t, str)), default=None)
    stamp = leaf.get("timestamp")
    if latest is None or not isinstance(stamp, str) or stamp > latest:
        return leaf
    try:
        moved = datetime.fromisoformat(latest.replace("Z", "+00:00")) + timedelta(milliseconds=1)
    except ValueError:
        return leaf
    return {**leaf, "timestamp": moved.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"}


def _last_prompt(items: list[Record]) -> str:
    for rec in reversed(items):
        content = rec.get("message", {}).get("content") if rec.get("type") == "user" else None
        if isinstance(content, str) and not rec.get("isMeta"):
            return content
    return ""


def background_calls(items: list[Record]) -> list[str]:
    """Bash calls of the prefix that the CLI moved to the background (their processes outlive the call)."""
    out = []
    for rec in items:
        data = rec.get("toolUseResult")
        if isinstance(data, dict) and data.get("backgroundTaskId"):
            out += chain.tool_result_ids(rec)
    return out
