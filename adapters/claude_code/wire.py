"""Chain records -> the Anthropic Messages `messages` the pinned CLI sends, and request normalization.

Normalized form (what expected_prefix.json holds and what the gate compares): no `role:"system"`
messages, no leading currentDate system-reminder block, no `cache_control`, every `content` a
list of blocks.
"""

from __future__ import annotations

import re
from typing import Any

from replayer.adapters.claude_code import reminders
from replayer.adapters.claude_code.chain import Record, message_id
from replayer.bridges.anthropic import as_blocks, normalize_messages
from replayer.floor.pins import release

Message = dict[str, Any]

CURRENT_DATE_REMINDER = re.compile(
    r"<system-reminder>\nAs you answer the user's questions, you can use the following context:\n"
    r"# currentDate\nToday's date is \d{4}-\d{2}-\d{2}\.\n\n      IMPORTANT: this context may or may not be "
    r"relevant to your tasks\. You should not respond to this context unless it is highly relevant to your "
    r"task\.\n</system-reminder>\n\n?\Z"
)
NO_CONTENT = [{"type": "text", "text": "(no content)"}]
DROPS_CALLER = (2, 0, 65)
"""The first version that sends every stored tool_use rebuilt from its `type`, `id`, `name` and `input` while
tool search is off (it is off in the sandbox: no deferred tools), which drops the API's `caller` (stored by
2.0.67 on): read in the bundled JS of 2.0.65, 2.0.67, 2.0.76, 2.0.77, 2.1.50 and the pin's `{type:"tool_use",
id,name,input}`; 2.0.64 sends the block as stored (`{...block, input}`)."""
DROPS_TOOL_REFERENCES = (2, 0, 67)
"""The oldest bundle read (2.0.67, 2.1.50, 2.1.121, 2.1.177, 2.1.197) that, while tool search is off (as in the
sandbox), takes the `tool_reference` blocks a ToolSearch result holds out of every tool result it sends, and
sends a result left empty as one text block (`TOOL_REFERENCES_REMOVED`); 2.0.64 knows no such block."""
TOOL_REFERENCES_REMOVED = "[Tool references removed - tool search not enabled]"
SEARCHES_TOOLS = (2, 1, 332)
"""From here (read in 2.1.332) the CLI searches tools in the sandbox too (its recordings hold the deferred tools'
notice) and keeps a result's `tool_reference` blocks, dropping only those of a tool it lacks (not modelled: a
session that names one is refused at the gate); seen: a real 2.1.332 resume of the 2.1.177 session with
claude-opus-4-6 sends its ToolSearch result's blocks as stored, and after them, in the same message, the text
below (`TOOL_LOADED`) unless a text there starts with it. With tool search on it sends a stored tool_use block as
stored, its `caller` too (read: the caller is dropped only with tool search off or for a `withoutCaller` request;
seen: a real 2.1.332 resume of the 2.1.112 session sends the stored `caller: {type: "direct"}`)."""
TOOL_LOADED = "Tool loaded."
HEAD_ORPHANS_REMOVED = (2, 1, 79)
"""From here (the oldest bundle read with it: 2.1.50 does not, 2.1.79, 2.1.121, 2.1.177, 2.1.197 and 2.1.332 do)
the CLI's pairing repair takes the tool results out of a user message no assistant message precedes (its first
message holds the CLI's context block before them, so it is kept, and its normalized form is empty); before it
such results are sent as stored (a real 2.1.12 and a real 2.1.29 resume of a transcript cut after a tool call,
Entire's checkpoint slices, sent the first message's tool_result; 2.1.50's repair looks only at the message after
an assistant message)."""
USER_SEAM = (2, 1, 79)
"""A version (the oldest bundle read: 2.1.50 does not, 2.1.79 does) whose merge of consecutive user
messages ends the earlier one's last text with a newline when the later one starts with text (e.g. a
slash command's line and its expanded prompt): `{...n, text: n.text + "\n"}` in the bundled JS."""


PARALLEL_RESULTS = (2, 1, 80)
"""The first release whose resume recovers the calls of a split API message whose results hang on sibling
branches (`tengu_chain_parallel_tr_recovered`: 2.1.79 has none; 2.1.80, 2.1.81, 2.1.83, 2.1.88, 2.1.96,
2.1.112 and 2.1.121 have it, in the same form). An older CLI walks the leaf's parents only: a call of the
message off that path is left out with its result, and so is a result off it that hangs off a call on it (a real
2.1.12 resume of a session whose split message's second call hangs off its first, each result off its own
call, sent the second call and its result only)."""


def as_loaded(items: list[Record], leaf: Record | None, version: str) -> list[Record]:
    """The chain items a resume of `version` loads from a session file holding `items` and naming `leaf`."""
    if release(version) >= PARALLEL_RESULTS:
        return _results_as_loaded(items, leaf)
    by_uuid = {r["uuid"]: r for r in items if isinstance(r.get("uuid"), str)}
    path: set[str] = set()
    while leaf is not None and leaf["uuid"] not in path:
        path.add(leaf["uuid"])
        leaf = by_uuid.get(leaf.get("parentUuid"))
    on_path = {message_id(by_uuid[u]) for u in path} - {None}
    off = {u for u, r in by_uuid.items() if u not in path and message_id(r) in on_path}
    off |= {u for u, r in by_uuid.items() if r.get("type") == "user" and r.get("parentUuid") in off}
    # a result hanging off a call on the path while the path goes on through a later call's result
    off |= {u for u, r in by_uuid.items() if u not in path and r.get("parentUuid") in path and _has_result(r)}
    return [r for r in items if r.get("uuid") not in off]


def _results_as_loaded(items: list[Record], leaf: Record | None) -> list[Record]:
    """`items` (each API message's records, then its tool results) with each run of tool results in the order
    a resume that recovers split calls loads them (read in 2.1.80, 2.1.121 and 2.1.177): the leaf's path, and after
    the last record on it of each API message, that message's records off the path, then the tool results
    hanging off any of its records off the path, each by timestamp. So a result off the path is sent before
    one on it, whatever the order of their tool_use blocks (the CLI merges the message's parts as before)."""
    by_uuid = {r["uuid"]: r for r in items if isinstance(r.get("uuid"), str)}
    path: list[Record] = []
    seen: set[str] = set()
    while leaf is not None and leaf["uuid"] not in seen:
        seen.add(leaf["uuid"])
        path.insert(0, leaf)
        leaf = by_uuid.get(leaf.get("parentUuid"))
    last_of = {message_id(r): r["uuid"] for r in path if message_id(r) is not None}
    after: dict[str, list[Record]] = {}
    for mid, last in last_of.items():
        group = [r for r in items if message_id(r) == mid]
        off = sorted((r for r in group if r["uuid"] not in seen), key=_timestamp)
        parents = {r["uuid"] for r in group}
        results = [r for r in items if r.get("type") == "user" and r.get("parentUuid") in parents]
        off += sorted((r for r in results if r["uuid"] not in seen), key=_timestamp)
        seen |= {r["uuid"] for r in off}
        after[last] = off
    position = {x["uuid"]: n for n, x in enumerate(x for r in path for x in (r, *after.get(r["uuid"], ())))}
    if len(position) != len(items):
        return items
    out: list[Record] = []
    run: list[Record] = []
    for rec in [*items, None]:
        if rec is not None and rec.get("type") == "user" and _has_result(rec):
            run.append(rec)
            continue
        out.extend(sorted(run, key=lambda r: position[r["uuid"]]))
        run = []
        if rec is not None:
            out.append(rec)
    return out


def _has_result(record: Record) -> bool:
    content = record.get("message", {}).get("content")
    return isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content
    )


def _timestamp(record: Record) -> str:
    stamp = record.get("timestamp")
    return stamp if isinstance(stamp, str) else ""


def to_messages(items: list[Record], version: str, model: str | None = None) -> list[Message]:
    """The model-visible conversation of the chain items as `version` sends it to `model` (None: the CLI's
    default), in normalized form: the recorded attachments' reminders merged where that version and model
    merge them (reminders.py)."""
    messages: list[Message] = []
    inline = reminders.merged_inline(version, model)
    # read by 2.1.332's wording of a queued notification only (older releases word it one way in any turn)
    human_turns = reminders.human_turns(items) if inline and release(version) >= reminders.REWORDED else {}
    if inline:
        items = _attachments_moved_up(items)
    last_mid: str | None = None
    seam = release(version) >= USER_SEAM
    searches = release(version) >= SEARCHES_TOOLS
    unmodelled_last = False
    """Whether an attachment that the CLI sends as text but this module does not render (`file`, ...) ends the
    last user message: the CLI's seam newline then goes on that block (which the gate takes off whole), not on
    the one before it."""
    for rec in items:
        kind = rec.get("type")
        if kind == "assistant":
            mid = message_id(rec)
            blocks = as_blocks(rec.get("message", {}).get("content"))
            if messages and messages[-1]["role"] == "assistant" and mid == last_mid:
                messages[-1]["content"].extend(blocks)
            else:
                messages.append({"role": "assistant", "content": blocks})
            last_mid = mid
        elif kind == "user":
            blocks = as_blocks(rec.get("message", {}).get("content"))
            if searches:
                blocks = _tool_loaded(blocks)
            if messages and messages[-1]["role"] == "user":
                before = messages[-1]["content"]
                if (
                    seam
                    and not unmodelled_last
                    and before
                    and blocks
                    and before[-1].get("type") == blocks[0].get("type") == "text"
                ):
                    before[-1] = {**before[-1], "text": str(before[-1].get("text", "")) + "\n"}
                before.extend(blocks)
            else:
                messages.append({"role": "user", "content": blocks})
            last_mid = None
            unmodelled_last = False
        elif kind == "attachment" and inline:
            texts = reminders.render(
                rec.get("attachment"), version, rec, human_turns.get(str(rec.get("uuid")))
            )
            if texts:
                unmodelled_last = False
            elif texts is None and reminders.sends_text(rec.get("attachment"), version):
                unmodelled_last = True
            for text in texts or []:
                if messages and messages[-1]["role"] == "user":
                    messages[-1]["content"] = reminders.merged(messages[-1]["content"], [text])
                else:
                    messages.append({"role": "user", "content": [{"type": "text", "text": text}]})
        # other attachments (or all, sent as role:"system" messages): not in the normalized conversation
    if DROPS_CALLER <= release(version) < SEARCHES_TOOLS:
        messages = [_rebuilt_tool_uses(m) if m["role"] == "assistant" else m for m in messages]
    if DROPS_TOOL_REFERENCES <= release(version) < SEARCHES_TOOLS:
        messages = [_without_tool_references(m) if m["role"] == "user" else m for m in messages]
    return _repair(messages, release(version) >= HEAD_ORPHANS_REMOVED)


def _attachments_moved_up(items: list[Record]) -> list[Record]:
    """The CLI's order before it merges (read in 1.0.108, 2.0.64, 2.1.50, 2.1.79, 2.1.121, 2.1.177, 2.1.197):
    each run of attachment records moves up to just after the nearest assistant record or tool-result user
    record before it, past the texts between (a Skill's expanded prompt after its result), so its reminder
    is merged into that tool result."""
    moved: list[Record] = []
    pending: list[Record] = []
    for rec in reversed(items):
        if rec.get("type") == "attachment":
            pending.append(rec)
            continue
        content = rec.get("message", {}).get("content") if rec.get("type") == "user" else None
        first = content[0] if isinstance(content, list) and content else None
        result_first = isinstance(first, dict) and first.get("type") == "tool_result"
        if pending and (rec.get("type") == "assistant" or result_first):
            moved.extend(pending)
            pending = []
        moved.append(rec)
    moved.extend(pending)
    return moved[::-1]


def _rebuilt_tool_uses(message: Message) -> Message:
    """An assistant message as the CLI sends it: each tool_use rebuilt from its id, name and input alone."""
    rebuilt = [
        {"type": "tool_use", "id": b.get("id"), "name": b.get("name"), "input": b.get("input")}
        if b.get("type") == "tool_use"
        else b
        for b in message["content"]
    ]
    return {**message, "content": rebuilt}


def _without_tool_references(message: Message) -> Message:
    """A user message as the CLI sends it with tool search off: no `tool_reference` block in a tool result."""
    blocks = []
    for b in message["content"]:
        content = b.get("content")
        if b.get("type") == "tool_result" and isinstance(content, list):
            kept = [x for x in content if not (isinstance(x, dict) and x.get("type") == "tool_reference")]
            if len(kept) != len(content):
                b = {**b, "content": kept or [{"type": "text", "text": TOOL_REFERENCES_REMOVED}]}
        blocks.append(b)
    return {**message, "content": blocks}


def _tool_loaded(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A user record's blocks as 2.1.332 sends them with tool search on: a `Tool loaded.` text after a tool
    result that holds `tool_reference` blocks, unless a text of the record starts with it."""
    loads = any(
        b.get("type") == "tool_result"
        and isinstance(b.get("content"), list)
        and any(isinstance(x, dict) and x.get("type") == "tool_reference" for x in b["content"])
        for b in blocks
    )
    said = any(b.get("type") == "text" and str(b.get("text", "")).startswith(TOOL_LOADED) for b in blocks)
    return [*blocks, {"type": "text", "text": TOOL_LOADED}] if loads and not said else blocks


def _repair(messages: list[Message], head_orphans_removed: bool) -> list[Message]:
    """The CLI's silent repairs: unanswered tool_use, orphan tool_result, duplicate tool_use ids; the tool
    results of a first user message before any assistant one as the version sends them (`HEAD_ORPHANS_REMOVED`)."""
    answered = {
        b.get("tool_use_id")
        for m in messages
        if m["role"] == "user"
        for b in m["content"]
        if b.get("type") == "tool_result"
    }
    seen: set[str] = set()
    results_seen: set[str] = set()
    out: list[Message] = []
    for m in messages:
        if m["role"] == "assistant":
            kept = []
            for b in m["content"]:
                if b.get("type") == "tool_use":
                    if b.get("id") in seen:
                        continue
                    if b.get("id") not in answered:
                        continue
                    seen.add(b.get("id"))
                kept.append(b)
            if kept:
                out.append({"role": "assistant", "content": kept})
            continue
        if not out and not head_orphans_removed:
            out.append({"role": "user", "content": m["content"]})
            continue
        kept = []
        for b in m["content"]:
            if b.get("type") == "tool_result":
                if b.get("tool_use_id") not in seen or b.get("tool_use_id") in results_seen:
                    continue
                results_seen.add(b.get("tool_use_id"))
            kept.append(b)
        if not out:
            out.append({"role": "user", "content": kept})
            continue
        out.append({"role": "user", "content": kept or [dict(x) for x in NO_CONTENT]})
    return out


def normalize_request(messages: list[Message]) -> list[Message]:
    """A request's `messages` in normalized form: the protocol's, minus the CLI's leading currentDate block."""
    out = normalize_messages(messages)
    if out and out[0]["role"] == "user" and out[0]["content"]:
        first = out[0]["content"][0]
        if first.get("type") == "text" and CURRENT_DATE_REMINDER.match(first.get("text", "")):
            out[0]["content"] = out[0]["content"][1:]
    return out


def main_thread(path: str, body: Any) -> bool:
    """Claude Code's main conversation offers Bash; warm-ups, titles, summaries, policy checks and
    sub-agents do not."""
    tools = body.get("tools") if isinstance(body, dict) else None
    return isinstance(tools, list) and any(isinstance(t, dict) and t.get("name") == "Bash" for t in tools)
