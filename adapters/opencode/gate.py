"""The prefix gate for `opencode run --session`.

The CLI builds its system message per request (date, environment, skills), so messages[0] is not
gated but reported. The rest of the first request must be exactly the rebuilt prefix, then the
resume prompt as a user message (content: the plain string). The nonce is stripped from every
request; a boundary prompt is kept. The title side call (none is sent on resume) is forwarded.
"""

from __future__ import annotations

from typing import Any

from replayer.adapters.opencode.wire import is_title_request
from replayer.bridges.chat import SystemPerRequestGate


def opencode_gate(prefix: list[dict[str, Any]], prompt: str, *, keep_prompt: bool) -> SystemPerRequestGate:
    prompt_message = {"role": "user", "content": prompt}
    return SystemPerRequestGate(
        prefix, prompt_message, strip_appended=not keep_prompt, is_side=is_title_request
    )
