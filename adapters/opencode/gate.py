"""The prefix gate for `opencode run --session`.

The CLI builds its system message per request (date, environment, skills), so messages[0] is not
gated but reported (before 1.0.162: its two system messages, `SYSTEMS_JOINED_FROM`). The rest of the first request must be exactly the rebuilt prefix, then the
resume prompt as a user message (content: the plain string). The nonce is stripped from every
request; a boundary prompt is kept. The title side call (none is sent on resume) is forwarded.
"""

from __future__ import annotations

from typing import Any

from replayer.adapters.opencode import bundle
from replayer.adapters.opencode.wire import is_title_request
from replayer.bridges.chat import SystemPerRequestGate
from replayer.floor.pins import release

SYSTEMS_JOINED_FROM = (1, 0, 162)
"""The oldest release read that sends one system message: 1.0.61 and 1.0.152 send two (`[first, rest.join(" ")]`:
the provider's prompt, then the environment and instructions); no release between 1.0.152 and 1.0.162 is on the
npm mirror read."""


def opencode_gate(prefix: list[dict[str, Any]], prompt: str, *, keep_prompt: bool) -> SystemPerRequestGate:
    prompt_message = {"role": "user", "content": prompt}
    systems = 1 if release(bundle.version()) >= SYSTEMS_JOINED_FROM else 2
    return SystemPerRequestGate(
        prefix, prompt_message, strip_appended=not keep_prompt, is_side=is_title_request, systems=systems
    )
