"""The prefix gate for `claude --resume`: pure, no sockets (the bridge core calls it per request).

The first main-thread request must be, in normalized form, exactly the rebuilt prefix plus the
resume envelope (envelope.py). Every main-thread request then has the envelope stripped: the
meta "Continue from where you left off." block, the synthetic "No response requested." reply and
the nonce prompt, so that the model sees a conversation ending at the boundary's observations.
With a boundary prompt instead of a nonce, the prompt is kept and joined to that last user message.
"""

from __future__ import annotations

import copy
from typing import Any

from replayer.adapters.claude_code import envelope, wire
from replayer.adapters.claude_code.wire import main_thread
from replayer.bridges.anthropic import Message, non_system_indexes
from replayer.bridges.core import Decision
from replayer.bridges.difference import Mismatch, first_difference


class ClaudeCodeGate:
    def __init__(
        self,
        prefix: list[Message],
        prompt: str,
        *,
        keep_prompt: bool,
        prefix_last_was_string: bool,
        background_calls: frozenset[str] = frozenset(),
    ):
        self.background_calls = background_calls
        self.prefix = prefix
        self.prompt = prompt
        self.keep_prompt = keep_prompt
        self.last_was_string = prefix_last_was_string
        self.expected_first = envelope.resume_request(prefix, prompt, prefix_last_was_string)
        self.passed = False
        self.injected = 0
        """Context reminder blocks before the first prompt in the last request seen."""
        self.form = "continue_text"
        """The resume envelope the CLI sent: 2.1.x's continue_text, or 2.0.x's reminders."""
        self.notes: list[str] = []

    def route(self, method: str, path: str, body: Any) -> Decision:
        if method != "POST" or not path.startswith("/v1/messages") or path.startswith("/v1/messages/"):
            return Decision(
                kind="side"
            )  # HEAD probes, count_tokens and the like: allowed, counted, not gated
        if not self.passed and isinstance(body, dict) and not main_thread(path, body):
            return Decision(kind="side")  # a warm-up or a title call before the main request (2.0.x)
        messages = body.get("messages") if isinstance(body, dict) else None
        if not isinstance(messages, list):
            return Decision(
                kind="refuse",
                mismatch=Mismatch(path="messages", expected="a list", actual=str(type(messages))),
            )
        messages = self.without_stopped_shells(messages)
        body = {**body, "messages": messages}
        self.injected = 0
        normalized = self.without_injected_context(wire.normalize_request(messages))
        if not self.passed:
            diff = first_difference(self.expected_first, normalized, "messages")
            reminders = (
                None if diff is None else envelope.reminders_form(self.prefix, self.prompt, normalized)
            )
            before_prompt = (
                envelope.reminders_before_prompt(self.expected_first, normalized)
                if diff is not None and reminders is None
                else None
            )
            if diff is not None and reminders is None and before_prompt is None:
                return Decision(kind="refuse", mismatch=diff)
            if before_prompt is not None:
                self.expected_first = normalized[: len(self.expected_first)]
                self.notes.append(f"{before_prompt} context reminder(s) the CLI put before the prompt")
            if self.injected:
                self.notes.append(f"{self.injected} context reminder(s) the CLI put before the prompts")
            if reminders is not None:
                self.form = "reminders"
                self.expected_first = normalized[: len(self.prefix) + 1]
                self.notes.append(
                    f"resume envelope of the reminders form (1.0.x, 2.0.x), with {len(reminders)} system "
                    "reminder(s) before the prompt"
                )
            self.passed = True
            return Decision(kind="main", body=self.strip(body))
        if normalized[:1] != self.expected_first[:1]:
            return Decision(kind="side")  # another conversation: a sub-agent, a title or summary call
        diff = first_difference(self.expected_first, normalized[: len(self.expected_first)], "messages")
        if diff is not None:
            diff.reason = "a later main-thread request no longer carries the prefix and its envelope"
            return Decision(kind="refuse", mismatch=diff)
        return Decision(kind="main", body=self.strip(body))

    def without_injected_context(self, normalized: list[Message]) -> list[Message]:
        """The request as compared: without the `<system-reminder>` context blocks some versions (1.0.x,
        2.1.332) put into a user message of the prefix on the wire (before a prompt, also after the tool
        results that share its message), which the session does not store; counted."""
        out = list(normalized)
        for i, want in enumerate(self.prefix[: len(out)]):
            have, wanted = out[i].get("content"), want.get("content")
            if want.get("role") != "user" or not isinstance(have, list) or not isinstance(wanted, list):
                continue
            if len(have) > len(wanted) and (kept := _without_reminders(have, wanted)) is not None:
                out[i] = {**out[i], "content": kept}
                self.injected += len(have) - len(kept)
        return out

    def without_stopped_shells(self, messages: list[Message]) -> list[Message]:
        """Drop the CLI's resume-time notices about backgrounded calls of the prefix (after the synthetic reply)."""
        positions = non_system_indexes(messages)
        if len(positions) <= len(self.prefix) or not self.background_calls:
            return messages
        after = positions[len(self.prefix)]
        out: list[Message] = []
        for i, message in enumerate(messages):
            content = message.get("content")
            if i <= after or message.get("role") != "user" or not isinstance(content, list | str):
                out.append(message)
                continue
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            kept = [
                b
                for b in blocks
                if not (
                    isinstance(b, dict)
                    and b.get("type") == "text"
                    and envelope.stopped_shell_call(b.get("text", "")) in self.background_calls
                )
            ]
            if len(kept) == len(blocks):
                out.append(message)
            elif kept:
                out.append({**message, "content": kept})
        return out

    def strip(self, body: dict[str, Any]) -> dict[str, Any]:
        """The request without the resume envelope; everything else is forwarded as the CLI sent it."""
        out = copy.deepcopy(body)
        messages: list[Message] = out["messages"]
        positions = non_system_indexes(messages)
        n = len(self.prefix)
        last, synthetic, prompt = positions[n - 1], positions[n], positions[n + 1]
        last_msg = messages[last]
        blocks = last_msg["content"]
        cache = None
        if self.form == "continue_text":
            meta = blocks.pop()  # the "Continue from where you left off." block
            cache = meta.get("cache_control") if isinstance(meta, dict) else None
            if self.last_was_string and blocks and blocks[-1].get("type") == "text":
                blocks[-1]["text"] = blocks[-1]["text"].removesuffix("\n")
        else:  # 2.0.x puts the cache breakpoint on the synthetic reply
            reply = messages[synthetic].get("content")
            cache = (
                next((b.get("cache_control") for b in reply if isinstance(b, dict)), None)
                if isinstance(reply, list)
                else None
            )
        prompt_msg = messages[prompt]
        prompt_blocks = prompt_msg["content"] if isinstance(prompt_msg["content"], list) else None
        if prompt_blocks is None:
            prompt_blocks = [{"type": "text", "text": prompt_msg["content"]}]
        cache = cache or next(
            (b["cache_control"] for b in prompt_blocks if isinstance(b, dict) and b.get("cache_control")),
            None,
        )
        drop = {synthetic, prompt}
        if self.keep_prompt:
            blocks.extend(prompt_blocks)
        elif cache is not None and prompt == len(messages) - 1 and blocks:
            blocks[-1] = {**blocks[-1], "cache_control": cache}  # keep the cache breakpoint at the new end
        out["messages"] = [m for i, m in enumerate(messages) if i not in drop]
        return out


def _without_reminders(have: list[Any], wanted: list[Any]) -> list[Any] | None:
    """`have` without the system-reminder blocks that are not in `wanted`, if the rest is `wanted` in order."""
    kept: list[Any] = []
    for block in have:
        if len(kept) < len(wanted) and block == wanted[len(kept)]:
            kept.append(block)
        elif not envelope.is_system_reminder(block):
            return None
    return kept if len(kept) == len(wanted) else None
