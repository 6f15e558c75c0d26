"""The reminders a session's attachment records put on the wire, per version, as the bundled CLI renders them.

Between model turns the CLI computes attachments (a TodoWrite nag, the task list, a file changed on disk,
...) and writes each as an `attachment` record on the chain (2.1.121, 2.1.197; 2.0.64 and 2.1.50 keep the
nag in memory only, so their resumes never send it). It never stores their wire text: every
request renders each recorded attachment again, as an isMeta user text wrapped in `<system-reminder>`, and
merges it into the user message before it. After a tool result whose content is a string, the text goes
*into* that tool result: `[content, *texts]`, each trimmed, empties dropped, joined by a blank line (the
merge read in the bundled JS of 1.0.51, 1.0.108, 2.0.64, 2.1.50, 2.1.121, 2.1.197). A resumed session's
request therefore carries them too, so the expected prefix renders them (`wire.to_messages`).

From 2.1.154 a model that takes mid-conversation system messages (the default for models newer than those
listed in `MERGED_MODELS`) gets every attachment as a `role:"system"` message of its own instead, which the
normalized form drops: nothing is merged then (`merged_inline`). So the prefix follows the model that
continues (the recorded one, unless another is asked for). 2.1.332 decides this by model capabilities, which
come to the same line for the models it knows (`MERGED_MODELS`; recorded with claude-sonnet-4-5: it merges).

Rendered here: the attachment kinds whose text the bundles read give, for the versions read, under the
continuation's own mode (`claude -p`, not interactive): the nags, and the notices a headless run can record
(`NOTICES`): a CLAUDE.md of a folder below the working directory, loaded when a file in it is read
(`nested_memory`, recorded by 2.1.121 and 2.1.197), a file changed on disk since it was read
(`edited_text_file`), a session that runs past midnight (`date_change`), the token budget left
(`total_tokens_reminder`, after every tool result from 2.1.177, recorded by 2.1.332), a prompt queued while the
agent worked (`queued_command`), a file too large to keep over a compaction (`compact_file_reference`) and a
selection in the IDE (`selected_lines_in_ide`). Any other kind renders nothing, as before: the gate
then still refuses a difference it makes inside a tool result, and takes only whole `<system-reminder>`
blocks beside the recorded ones (`ClaudeCodeGate.without_injected_context`).
"""

from __future__ import annotations

import re
from typing import Any

from replayer.floor.pins import release

TODO_FIRST = (1, 0, 108)
"""The oldest bundle read that renders `todo_reminder` (1.0.51 has no such kind)."""
TODO_TASKS_ON = (2, 1, 332)
"""From this version (read in 2.1.332) `todo_reminder` renders nothing while the task tools are on (the
default): the todo tools are retired."""
TASK_FIRST = (2, 1, 142)
"""`task_reminder` renders only while the task tools are on: from 2.1.142 by default (read in 2.1.142, 2.1.177,
2.1.196 and 2.1.197); 2.1.50 to 2.1.141 turn them on in an interactive session only, so `-p` renders nothing
(read in 2.1.50, 2.1.121, 2.1.126 and 2.1.141)."""
TASK_KEEPER_FROM = (2, 1, 332)
"""From here a task reminder that names its `statusKeeper` (the app, or Claude) is worded otherwise: not modelled;
without one 2.1.332 sends the nag as before (read; recorded with claude-sonnet-4-5)."""
NEVER_MENTION = ((2, 0, 64), (2, 1, 139))
"""The versions (from, before) whose nags end with the line below: read in 2.0.64, 2.1.50, 2.1.121 and 2.1.138;
1.0.108 and 2.1.139 on do not have it."""
NEVER_MENTION_LINE = " Make sure that you NEVER mention this reminder to the user"

TODO_NAG = (
    "The TodoWrite tool hasn't been used recently. If you're working on tasks that would benefit from "
    "tracking progress, consider using the TodoWrite tool to track progress. Also consider cleaning up the "
    "todo list if has become stale and no longer matches what you are working on. Only use it if it's "
    "relevant to the current work. This is just a gentle reminder - ignore if not applicable."
)
TASK_NAG = (
    "The task tools haven't been used recently. If you're working on tasks that would benefit from tracking "
    "progress, consider using TaskCreate to add new tasks and TaskUpdate to update task status (set to "
    "in_progress when starting, completed when done). Also consider cleaning up the task list if it has "
    "become stale. Only use these if relevant to the current work. This is just a gentle reminder - ignore "
    "if not applicable."
)
MID_CONVERSATION_SYSTEM = (2, 1, 154)
"""The oldest release with the `role:"system"` path for attachments (read in 2.1.154, 2.1.160, 2.1.177 and on,
with the model list below; 2.1.153 has none)."""
MERGED_MODELS = frozenset(
    {
        "claude-opus-4-0", "claude-opus-4-1", "claude-opus-4-5", "claude-opus-4-6", "claude-opus-4-7",
        "claude-sonnet-4-0", "claude-sonnet-4-5", "claude-sonnet-4-6", "claude-haiku-4-5",
    }
)  # fmt: skip
"""The models 2.1.154 on send attachments to merged into the user message (with every claude-3-*): listed in 2.1.154
to 2.1.197; 2.1.332 asks for a system message by model capabilities, but not for claude-3-* or a model before
claude-opus-4-8 in its own list, which is this set (read; recorded: it merges for claude-sonnet-4-5); the rest
default to system messages unless a capability override the sandbox does not set says otherwise."""
_DATED = re.compile(r"(-\d{8})?(\[[^\]]*\])?\Z")
_JS_SPACE = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_TRIM = re.compile(f"^[{_JS_SPACE}]+|[{_JS_SPACE}]+$")


def js_trim(text: str) -> str:
    """JavaScript's `String.prototype.trim` (Python's `strip` also takes \\x1c-\\x1f and \\x85)."""
    return _JS_TRIM.sub("", text)


def wrapped(text: str) -> str:
    return f"<system-reminder>\n{text}\n</system-reminder>"


def merged_inline(version: str, model: str | None) -> bool:
    """Whether `version`, continuing with `model` (None: the CLI's default, a newer one), merges an attachment's
    text into the user message before it (else it sends a system message the normalized form drops)."""
    v = release(version)
    if v < MID_CONVERSATION_SYSTEM:
        return True
    if model is None:
        return False
    name = _DATED.sub("", model.lower())
    return "claude-3-" in name or name in MERGED_MODELS


def render(attachment: Any, version: str) -> list[str] | None:
    """The `<system-reminder>` texts `version` sends for one recorded attachment (one per message it makes),
    or None when this kind is not modelled for that version."""
    if not isinstance(attachment, dict):
        return None
    v = release(version)
    kind = attachment.get("type")
    if kind == "queued_command":
        text = _queued_command(attachment, v)
        return None if text is None else [wrapped(text)]
    if kind in NOTICES:
        first, notice = NOTICES[kind]
        text = notice(attachment, v) if first <= v else None
        return None if text is None else [wrapped(text)]
    items = attachment.get("content")
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        return None
    tail = NEVER_MENTION_LINE if NEVER_MENTION[0] <= v < NEVER_MENTION[1] else ""
    if kind == "todo_reminder" and v >= TODO_FIRST:
        if v >= TODO_TASKS_ON:
            return []
        listed = "\n".join(f"{n}. [{i.get('status')}] {i.get('content')}" for n, i in enumerate(items, 1))
        text = TODO_NAG + tail + "\n"
        if listed:
            text += f"\n\nHere are the existing contents of your todo list:\n\n[{listed}]"
        return [wrapped(text)]
    if kind == "task_reminder" and not (v >= TASK_KEEPER_FROM and "statusKeeper" in attachment):
        if v < TASK_FIRST:
            return []
        listed = "\n".join(f"#{i.get('id')}. [{i.get('status')}] {i.get('subject')}" for i in items)
        text = TASK_NAG + tail + "\n"
        if listed:
            text += f"\n\nHere are the existing tasks:\n\n{listed}"
        return [wrapped(text)]
    return None


SENDS_TEXT = frozenset(
    {
        "file", "directory", "opened_file_in_ide", "compact_file_reference", "selected_lines_in_ide",
        "queued_command", "nested_memory", "edited_text_file", "date_change",
    }
)  # fmt: skip
"""Attachment kinds every version read (1.0.108 to 2.1.197) sends as text whenever it records one (`file` as a
Read call and its result), with `skill_listing` and `hook_additional_context` when their content is not empty."""


SILENT_2_1_332 = frozenset(
    {
        "advisor_stripped", "already_read_file", "async_hook_response_batch", "batching_reminder_sent",
        "command_permissions", "credential_org", "deferred_tools_record", "edited_image_file", "goal_status",
        "goals", "hook_cancelled", "hook_deferred_tool", "hook_error_during_execution", "hook_non_blocking_error",
        "hook_permission_decision", "hook_system_message", "max_turns_reached", "message_pdf_reads",
        "progress_reminder_sent", "project_doc_reads", "projects_thread_ask", "prompt_as_file",
        "prompt_render_point", "prompt_snapshot", "secondary_reminder_sent", "session_cron_carry",
        "structured_output", "teammate_shutdown_batch", "thinking_drop", "thinking_stripped",
        "tool_host_result_lines", "tool_offer_record", "tool_results_cut", "whole_texts_withdrawn",
        "withheld_memory",
    }
)  # fmt: skip
"""The kinds 2.1.332 renders as nothing, whatever they hold (`kind: () => []` in its renderer table); it renders
nearly every other kind as text (its environment, model, date and attribution notices ...)."""


def sends_text(attachment: Any, version: str) -> bool:
    """Whether `version` sends text for this recorded attachment, rendered here or not (before 2.1.332: only the
    kinds known to; from it: any kind but the silent ones)."""
    if not isinstance(attachment, dict):
        return False
    kind = attachment.get("type")
    if release(version) >= REWORDED:
        return kind not in SILENT_2_1_332
    if kind in ("skill_listing", "hook_additional_context"):
        return bool(attachment.get("content"))
    return kind in SENDS_TEXT


def _texts(record: dict[str, Any], *names: str) -> list[Any] | None:
    """The string fields `names` of a recorded attachment, or None when one is missing or not a string."""
    values = [record.get(n) for n in names]
    return values if all(isinstance(x, str) for x in values) else None


def _nested_memory(attachment: dict[str, Any], v: tuple[int, ...]) -> str | None:
    memory = attachment.get("content")
    fields = _texts(memory, "path", "content") if isinstance(memory, dict) else None
    if fields is None:
        return None
    if v < REWORDED:
        return f"Contents of {fields[0]}:\n\n{fields[1]}"
    replaces = attachment.get("replacesPath")
    text = (
        f"Contents of {fields[0]}{'' if replaces is None else f' (in its worktree it replaces {replaces})'}:"
    )
    text += f"\n\n{fields[1]}"
    # 2.1.332 neutralizes markup in the text and words an unverified memory otherwise: not modelled
    unmodelled = "<" in text or "\\u" in text or (isinstance(memory, dict) and memory.get("unverified"))
    return None if unmodelled or not isinstance(replaces, str | None) else text


def _edited_text_file(attachment: dict[str, Any], v: tuple[int, ...]) -> str | None:
    fields = _texts(attachment, "filename", "snippet")
    if fields is None:
        return None
    filename, snippet = fields
    if v >= REWORDED:
        shown = _path_2_1_332(attachment, filename)
        if shown is None:
            return None
        note = EDITED_2_1_332.format(shown)
        if snippet == "":
            return f"{note} {EDIT_NOT_SHOWN_2_1_332}"
        escaped = _closing_tags_escaped(snippet)
        tail = "" if escaped == snippet else "\n" + ESCAPED_NOTE.format(shown)
        return f"{note} Here are the relevant changes (shown with line numbers):\n{escaped}{tail}"
    note = f"Note: {filename} was modified, either by the user or by a linter. {EDITED_NOTE}"
    if snippet == "" and v >= EDIT_OMITTED_FROM:
        return f"{note} {EDIT_OMITTED}"
    return f"{note} Here are the relevant changes (shown with line numbers):\n{snippet}"


def _compact_file_reference(attachment: dict[str, Any], v: tuple[int, ...]) -> str | None:
    fields = _texts(attachment, "filename")
    if fields is None:
        return None
    shown = _path_2_1_332(attachment, fields[0]) if v >= REWORDED else fields[0]
    return None if shown is None else COMPACT_FILE.format(shown)


def _selected_lines_in_ide(attachment: dict[str, Any], v: tuple[int, ...]) -> str | None:
    fields = _texts(attachment, "filename", "content")
    lines = [attachment.get("lineStart"), attachment.get("lineEnd")]
    if fields is None or not all(isinstance(n, int) and not isinstance(n, bool) for n in lines):
        return None
    filename, content = fields
    shown = _path_2_1_332(attachment, filename) if v >= REWORDED else filename
    if shown is None:
        return None
    units = content.encode("utf-16-le", "surrogatepass")
    if len(units) > 2 * SELECTION_KEPT:
        kept = units[: 2 * SELECTION_KEPT]
        if v >= REWORDED and 0xD800 <= int.from_bytes(kept[-2:], "little") <= 0xDBFF:
            kept = kept[:-2]  # 2.1.332 drops half a surrogate pair at the cut
        try:
            content = kept.decode("utf-16-le") + "\n... (truncated)"
        except UnicodeDecodeError:
            return None  # JavaScript's cut leaves half a surrogate pair, which the prefix file cannot hold
    return SELECTED_LINES.format(lines[0], lines[1], shown, content)


_PATH_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")
_UNMODELLED_PATH = re.compile(r"download|\.[0-9a-f]{16}(?:[\\/]|\Z)", re.IGNORECASE)
_CLOSING_TAG = re.compile(
    f"<(?=[{_JS_SPACE}]*/[{_JS_SPACE}]*system-reminder(?![A-Za-z0-9_]))", re.IGNORECASE | re.ASCII
)


def _path_2_1_332(attachment: dict[str, Any], path: str) -> str | None:
    """A file's path as 2.1.332 shows it in a notice (`<` and `>` as entities, then control characters as
    numeric ones), or None where it shows another text or marks the file's text as a download: a file that may
    be a download (`mayHoldDownload`, or a path through a downloads folder or a session's own folder)."""
    if attachment.get("mayHoldDownload") is not None or _UNMODELLED_PATH.search(_ascii(path)):
        return None
    shown = path.replace("<", "&lt;").replace(">", "&gt;")
    return _PATH_CONTROLS.sub(lambda m: f"&#{ord(m.group())};", shown)


def _ascii(text: str) -> str:
    """`text` without what is not ASCII (the bundle also finds a folder name with invisible marks in it)."""
    return text.encode("ascii", "ignore").decode()


def _closing_tags_escaped(text: str) -> str:
    """2.1.332's guard for a file's text in a reminder: a closing `system-reminder` tag's `<` becomes `&lt;`."""
    return _CLOSING_TAG.sub("&lt;", text)


def _queued_command(attachment: dict[str, Any], v: tuple[int, ...]) -> str | None:
    """A prompt queued while the agent worked (a user's message, or a background task's notification), as
    the version words it; None for what is not modelled: another origin (a coordinator, channel or peer),
    images, the bound-thread and batched relays of 2.1.196 on, and releases not read."""
    prompt = attachment.get("prompt")
    if isinstance(prompt, list) and v >= QUEUED_BLOCKS_FROM:
        texts = [b.get("text") for b in prompt if isinstance(b, dict)]
        if len(texts) != len(prompt) or not all(
            b.get("type") == "text" and isinstance(t, str) for b, t in zip(prompt, texts, strict=True)
        ):
            return None
        prompt = "\n".join(str(t) for t in texts)
    if not isinstance(prompt, str) or not QUEUED_FIRST <= v < REWORDED:
        return None
    if any(attachment.get(k) for k in QUEUED_UNMODELLED):
        return None
    origin = attachment.get("origin")
    kind = origin.get("kind") if isinstance(origin, dict) else None
    if origin is None and attachment.get("commandMode") == "task-notification":
        kind = "task-notification"
    if v < QUEUED_BY_ORIGIN:
        kind = None  # one wording for every queued prompt
    elif (origin is not None and not isinstance(origin, dict)) or kind not in QUEUED_ORIGINS:
        return None
    if kind == "task-notification":
        wording = TASK_NOTIFICATION if v >= TASK_NOTIFICATION_FROM else TASK_DONE
    else:
        wording = QUEUED_WHILE_WORKING if v >= QUEUED_WHILE_WORKING_FROM else QUEUED_MESSAGE
    return wording.format(prompt)


def _date_change(attachment: dict[str, Any], v: tuple[int, ...]) -> str | None:
    fields = _texts(attachment, "newDate")
    return (
        None
        if fields is None
        else (DATE_CHANGED_2_1_332 if v >= REWORDED else DATE_CHANGED).format(fields[0])
    )


def _total_tokens(attachment: dict[str, Any], v: tuple[int, ...]) -> str | None:
    fields = _texts(attachment, "text")
    return None if fields is None else fields[0]


EDITED_NOTE = (
    "This change was intentional, so make sure to take it into account as you proceed (ie. don't revert it "
    "unless the user asks you to). Don't tell the user this, since they are already aware."
)
EDIT_OMITTED = (
    "The diff was omitted because other modified files in this turn already exceeded the snippet budget; use "
    "the Read tool if you need the current content."
)
EDIT_OMITTED_FROM = (2, 1, 126)
"""The oldest bundle read with the text of an omitted snippet (2.1.123 has none)."""
EDITED_2_1_332 = (
    "Note: {} changed on disk since you last read it. That's usually deliberate, so take it as the current state "
    "rather than reverting it; if the change looks wrong, say so rather than undoing it yourself \u2014 otherwise no "
    "need to call it out."
)
EDIT_NOT_SHOWN_2_1_332 = "The changes are not shown here; use Read if you need the current content."
ESCAPED_NOTE = (
    "Note: {} is not shown exactly as it is on disk. Each closing system-reminder tag in it starts with `<` on disk "
    "and is shown above with `&lt;` instead, so that it cannot end the reminder around the text."
)
"""2.1.332's note after a snippet whose closing `system-reminder` tags it escaped (read in its bundle)."""
DATE_CHANGED = (
    "The date has changed. Today's date is now {}. DO NOT mention this to the user explicitly because they are "
    "already aware."
)
COMPACT_FILE = (
    "Note: {} was read before the last conversation was summarized, but the contents are too large to include. "
    "Use Read tool if you need to access it."
)
SELECTED_LINES = (
    "The user selected the lines {} to {} from {}:\n{}\n\nThis may or may not be related to the current task."
)
SELECTION_KEPT = 2000
"""A selection longer than this (in UTF-16 units) is cut there and marked truncated (read in 1.0.108 to 2.1.197)."""
QUEUED_FIRST = (1, 0, 108)
"""The oldest bundle read that renders `queued_command` (1.0.51 has no such kind)."""
QUEUED_BLOCKS_FROM = (1, 0, 128)
"""From here a prompt of content blocks is sent as its texts joined by newlines (1.0.108 takes a string only)."""
QUEUED_ORIGINS = (None, "human", "task-notification")
QUEUED_UNMODELLED = ("renderedByBatchHead", "batchedRelayPrompts", "verifiedSlackHumanTurn")
"""2.1.196's fields for a prompt another's message renders, relayed prompts, a bound thread's turn."""
QUEUED_MESSAGE = (
    "The user sent the following message:\n{}\n\nPlease address this message and continue with your tasks."
)
QUEUED_WHILE_WORKING_FROM = (2, 1, 50)
"""The oldest bundle read with the wording below (2.0.67 has the one above)."""
QUEUED_WHILE_WORKING = (
    "The user sent a new message while you were working:\n{}\n\nIMPORTANT: After completing your current task, "
    "you MUST address the user's message above. Do not ignore it."
)
QUEUED_BY_ORIGIN = (2, 1, 79)
"""The oldest bundle read that words a queued prompt by its origin (a background task's notification: the
recorded `origin`, else `commandMode: task-notification`); 2.1.50 words every one alike."""
TASK_DONE = "A background agent completed a task:\n{}"
TASK_NOTIFICATION_FROM = (2, 1, 112)
"""The oldest bundle read with the notification's wording below (2.1.79 has the one above); the same to 2.1.197."""
TASK_NOTIFICATION = (
    "[SYSTEM NOTIFICATION - NOT USER INPUT]\nThis is an automated background-task event, NOT a message from the "
    "user.\nDo NOT interpret this as user acknowledgement, confirmation, or response to any pending question.\n\n{}"
)
DATE_CHANGED_2_1_332 = (
    "The date has changed. Today's date is now {}. No need to announce the new date \u2014 the user's own clock "
    "shows it."
)
REWORDED = (2, 1, 332)
"""2.1.332 (the newest release; read) words the date change and the file notice as above, names a memory file's
worktree, shows the path in the file notice, the compacted-file note and the IDE selection through its markup
filter (`_path_2_1_332`) and escapes closing tags in a changed file's snippet; its queued prompts go through
origin and relay filters not worked out: not rendered from there on."""
NOTICES = {
    "nested_memory": ((1, 0, 108), _nested_memory),
    "edited_text_file": ((1, 0, 128), _edited_text_file),
    "date_change": ((2, 1, 50), _date_change),
    "compact_file_reference": ((1, 0, 108), _compact_file_reference),
    "selected_lines_in_ide": ((1, 0, 108), _selected_lines_in_ide),
    "total_tokens_reminder": ((2, 1, 177), _total_tokens),
}
"""The notices by kind: the oldest bundle read that sends the text (1.0.108 words the file notice otherwise;
2.0.67 has no `date_change`), and the text from the recorded attachment (read in 1.0.108, 1.0.128, 2.0.64, 2.0.67,
2.1.50, 2.1.121, 2.1.196, 2.1.197, 2.1.332; the token budget's wrapped text as recorded, read in 2.1.177 to
2.1.332, absent from 2.1.126)."""


def merged(blocks: list[dict[str, Any]], texts: list[str]) -> list[dict[str, Any]]:
    """A user message's blocks with one attachment message's texts merged in, as the CLI merges them: into a
    last tool result of string content, else appended; tool results first."""
    last = blocks[-1] if blocks else None
    if last is not None and last.get("type") == "tool_result" and isinstance(last.get("content"), str):
        parts = [js_trim(p) for p in (last["content"], *texts)]
        return [*blocks[:-1], {**last, "content": "\n\n".join(p for p in parts if p)}]
    out = [*blocks, *({"type": "text", "text": t} for t in texts)]
    results = [b for b in out if b.get("type") == "tool_result"]
    return results + [b for b in out if b.get("type") != "tool_result"]
