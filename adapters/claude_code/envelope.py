"""What `claude --resume <id> -p PROMPT` (2.1.197) adds to the rebuilt prefix on the wire, in normalized form.

Observed with the recorder: resuming a session whose leaf is a user record (our boundary always
is: the step's tool results, or the first prompt for boundary 0), the CLI appends an isMeta user
text "Continue from where you left off." to that last user message, then a synthetic assistant
"No response requested." (no model call), then PROMPT as its own user message. A string prompt
merged with the meta text gains a trailing newline. The bridge strips this envelope.
"""

from __future__ import annotations

import copy

from adapters.claude_code.wire import Message

CONTINUE_TEXT = "Continue from where you left off."
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
