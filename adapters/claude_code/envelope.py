"""What `claude --resume <id> -p PROMPT` adds to the rebuilt prefix on the wire, in normalized form.

Observed with the recorder: resuming a session whose leaf is a user record (our boundary always
is: the step's tool results, or the first prompt for boundary 0), the CLI appends an isMeta user
text "Continue from where you left off." to that last user message, then a synthetic assistant
"No response requested." (no model call), then PROMPT as its own user message. A string prompt
merged with the meta text gains a trailing newline. The bridge strips this envelope.

2.0.64 (the "reminders" form) appends no meta text: the synthetic reply follows the prefix, then one
user message whose last text block is PROMPT, after the `<system-reminder>` texts the CLI adds at
resume (a file changed since it was read, the todo list): observed with 2.0.64, whose replays the suite
continues; any other form is refused.
"""

from __future__ import annotations

import copy
import re

from replayer.adapters.claude_code.wire import Message

CONTINUE_TEXT = "Continue from where you left off."
STOPPED_SHELL = re.compile(
    r"<task-notification>\n<task-id>[a-z0-9]+</task-id>\n<tool-use-id>(?P<call>[^<]+)</tool-use-id>\n"
    r"<status>stopped</status>\n<summary>No completion record was found for this background shell command from "
    r"the previous session\. It may have been stopped \(via the UI, Monitor timeout, or agent teardown — these "
    r"leave no transcript marker\), or it may have been running when the previous Claude Code process exited\. "
    r"Check the output file for partial results before assuming it completed\.</summary>\n</task-notification>\n?\Z"
)
"""On resume the CLI reports each backgrounded Bash call of the history that has no completion record
(a rerun leaves it running, as the CLI would have). It sits between the synthetic reply and the prompt."""


def stopped_shell_call(text: str) -> str | None:
    match = STOPPED_SHELL.match(text)
    return match.group("call") if match else None


SYNTHETIC_REPLY = "No response requested."


def is_system_reminder(block: object) -> bool:
    if not isinstance(block, dict) or block.get("type") != "text":
        return False
    text = block.get("text")
    return (
        isinstance(text, str)
        and text.startswith("<system-reminder>")
        and text.rstrip().endswith("</system-reminder>")
    )


def reminders_form(prefix: list[Message], prompt: str, normalized: list[Message]) -> list[str] | None:
    """The system reminders before PROMPT when `normalized` is a resume of `prefix` in the 2.0.x form."""
    n = len(prefix)
    synthetic = {"role": "assistant", "content": [{"type": "text", "text": SYNTHETIC_REPLY}]}
    if len(normalized) != n + 2 or normalized[:n] != prefix or normalized[n] != synthetic:
        return None
    last = normalized[n + 1]
    blocks = last.get("content") if last.get("role") == "user" else None
    if not isinstance(blocks, list) or not blocks or blocks[-1] != {"type": "text", "text": prompt}:
        return None
    if not all(is_system_reminder(b) for b in blocks[:-1]):
        return None
    return [str(b["text"]) for b in blocks[:-1]]


def reminders_before_prompt(expected: list[Message], normalized: list[Message]) -> int | None:
    """How many `<system-reminder>` blocks the CLI put before the prompt, when `normalized` is the 2.1.x
    resume `expected` but for them (2.1.50 lists its bundled skills there), else None."""
    if len(normalized) != len(expected) or normalized[:-1] != expected[:-1]:
        return None
    blocks, prompt = normalized[-1].get("content"), expected[-1]["content"]
    if normalized[-1].get("role") != "user" or not isinstance(blocks, list) or len(blocks) <= len(prompt):
        return None
    added = blocks[: len(blocks) - len(prompt)]
    if blocks[len(added) :] != prompt or not all(is_system_reminder(b) for b in added):
        return None
    return len(added)


def resume_request(prefix: list[Message], prompt: str, prefix_last_was_string: bool) -> list[Message]:
    """The normalized messages of the first request of a resume from `prefix` with `prompt` (2.1.x)."""
    messages = copy.deepcopy(prefix)
    last = messages[-1]
    if prefix_last_was_string and last["content"] and last["content"][-1].get("type") == "text":
        last["content"][-1]["text"] += "\n"
    last["content"].append({"type": "text", "text": CONTINUE_TEXT})
    messages.append({"role": "assistant", "content": [{"type": "text", "text": SYNTHETIC_REPLY}]})
    messages.append({"role": "user", "content": [{"type": "text", "text": prompt}]})
    return messages
