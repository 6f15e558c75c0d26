"""The prefix gate for a Gemini CLI continuation (`--resume SESSION -p PROMPT`), pure.

Main-thread requests are `:streamGenerateContent`; `:generateContent` calls (routing, next-speaker
checks) are side calls, forwarded ungated. The first main request's `contents`, once the session
context the CLI builds afresh (date, workspace tree) is taken out of the first user turn and reported
in the notes, must be exactly the rebuilt prefix as the running release resumes it
(`wire.resume_contents`), the CLI's closing model turn when the prefix ends with tool responses
(`wire.closing_turns`, 0.54 and later), then the prompt's user turn (0.53 merges it into the responses'
turn when no closing turn comes between); every later main request must begin with the same turns. A
nonce prompt is stripped from every forwarded request together with that closing turn: the model
continues from the tool responses themselves, as the recorded agent did.
"""

from __future__ import annotations

import copy
from typing import Any

from replayer.adapters.gemini_cli.wire import LATEST, Content, Resume, closing_turns, merged, without_context
from replayer.bridges.core import Decision
from replayer.bridges.difference import Mismatch, first_difference, mismatch_at
from replayer.bridges.gemini import is_generate, is_stream


class GeminiResumeGate:
    def __init__(
        self, prefix: list[Content], prompt: str | None, *, strip_prompt: bool = False, rules: Resume = LATEST
    ):
        """`strip_prompt`: the prompt is a nonce, removed from every main request before forwarding;
        `rules`: how the running release resumes (its closing turn, its merging of one role's turns)."""
        turn = [{"role": "user", "parts": [{"text": prompt}]}] if prompt is not None else []
        closing = closing_turns(prefix) if prompt is not None and rules.closes else []
        expected = [*prefix, *closing, *turn]
        self.expected = merged(expected) if rules.merges else expected
        self.prefix = prefix
        self.strip = prompt is not None and strip_prompt
        self.passed = False
        self.notes: list[str] = []

    def route(self, method: str, path: str, body: Any) -> Decision:
        if is_generate(method, path) or not is_stream(method, path):
            return Decision(kind="side")
        contents = body.get("contents") if isinstance(body, dict) else None
        if not isinstance(contents, list):
            found = Mismatch(path="contents", expected="a list", actual=type(contents).__name__)
            return Decision(kind="refuse", mismatch=found)
        history, context = without_context(contents)
        if context is None:
            found = mismatch_at("contents[0].parts[0]", "the CLI's <session_context>", contents[:1])
            found.reason = "the first user turn does not begin with the CLI's session context"
            return Decision(kind="refuse", mismatch=found)
        n = len(self.expected)
        if not self.passed:
            diff = first_difference(self.expected, history, "contents")
            if diff is not None:
                if len(history) > n and diff.path.startswith(f"contents[{n}]"):
                    diff = mismatch_at(diff.path, "<the end of the request>", history[n])
                return Decision(kind="refuse", mismatch=diff)
            self.passed = True
            self.notes.append(
                f"contents[0].parts[0]: the CLI's session context ({len(context)} chars: date, workspace "
                "tree) is built afresh on resume and not gated"
            )
            return self._main(body, contents, history)
        diff = first_difference(self.expected, history[:n], "contents")
        if diff is not None:
            diff.reason = "a later request no longer carries the rebuilt prefix and its prompt"
            return Decision(kind="refuse", mismatch=diff)
        return self._main(body, contents, history)

    def _main(self, body: dict[str, Any], contents: list[Content], history: list[Content]) -> Decision:
        if not self.strip:
            return Decision(kind="main")
        kept = copy.deepcopy([*self.prefix, *history[len(self.expected) :]])
        first = contents[0]
        context = {**first, "parts": first["parts"][:1]}
        if len(contents) == len(history) and kept and kept[0].get("role") == "user":
            # the context part came first in the prefix's first user turn (0.53 and later merge them)
            kept[0] = {**kept[0], "parts": [*context["parts"], *kept[0]["parts"]]}
        else:
            kept.insert(0, context)
        return Decision(kind="main", body={**body, "contents": kept})
