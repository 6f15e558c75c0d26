"""What `claude --resume <id> -p PROMPT` (2.1.197) adds to the rebuilt prefix on the wire, in normalized form.

Observed with the recorder: resuming a session whose leaf is a user record (our boundary always
is: the step's tool results, or the first prompt for boundary 0), the CLI appends an isMeta user
text "Continue from where you left off." to that last user message, then a synthetic assistant
"No response requested." (no model call), then PROMPT as its own user message. A string prompt
merged with the meta text gains a trailing newline. The bridge strips this envelope.
"""

from __future__ import annotations

import copy
import re

from adapters.claude_code.wire import Message

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


def resume_request(prefix: list[Message], prompt: str, prefix_last_was_string: bool) -> list[Message]:
    """The normalized messages of the first request of a resume from `prefix` with `prompt`."""
    messages = copy.deepcopy(prefix)
    last = messages[-1]
    if prefix_last_was_string and last["content"] and last["content"][-1].get("type") == "text":
        last["content"][-1]["text"] += "\n"
    last["content"].append({"type": "text", "text": CONTINUE_TEXT})
    messages.append({"role": "assistant", "content": [{"type": "text", "text": SYNTHETIC_REPLY}]})
    messages.append({"role": "user", "content": [{"type": "text", "text": prompt}]})
    return messages
