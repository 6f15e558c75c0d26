"""The OpenAI chat-completions dialect: bearer key, error shape, and the gate for an unwrapped prefix.

Agent specifics stay out: an agent whose continuation adds a resume envelope wraps this gate.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import orjson

from replayer.bridges.core import Decision
from replayer.bridges.difference import Mismatch, first_difference, mismatch_at
from replayer.bridges.usage import UsageKeys

Message = dict[str, Any]


class ChatDialect:
    usage_keys = UsageKeys("usage", ("prompt_tokens",), ("completion_tokens",))
    """In the last chunk of a stream, or in the body; `prompt_tokens` includes `prompt_tokens_details.cached_tokens`,
    `completion_tokens` includes `completion_tokens_details.reasoning_tokens`."""

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {key}"}

    def error_body(self, message: str) -> dict[str, Any]:
        return {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": None,
                "code": "sandbox_replayer_refused",
            }
        }

    def to_chat(self, prefix: list[Message]) -> list[Message]:
        return [dict(m) for m in prefix]


def is_completion(method: str, path: str) -> bool:
    return method == "POST" and path.rstrip("/").endswith("/chat/completions")


def messages_of(body: Any) -> list[Message] | None:
    messages = body.get("messages") if isinstance(body, dict) else None
    return messages if isinstance(messages, list) else None


class ChatPrefixGate:
    """The first completion request must carry exactly `expected`; every later one must begin with it.

    With `system_from_agent` (a prefix whose file records no system message, while the agent puts its
    own first), the first request's messages[0] must be a system message and is taken as the agent's
    own, reported in the notes: it joins the expected prefix, so every later request carries it unchanged.
    Nothing is stripped or rewritten: the body is forwarded as the agent sent it.
    """

    def __init__(self, expected: list[Message], *, system_from_agent: bool = False):
        self.expected = expected
        self.system_from_agent = system_from_agent
        self.passed = False
        self.notes: list[str] = []

    def route(self, method: str, path: str, body: Any) -> Decision:
        if not is_completion(method, path):
            return Decision(kind="side")  # model listings and other probes: counted, not gated
        messages = messages_of(body)
        if messages is None:
            return Decision(
                kind="refuse",
                mismatch=Mismatch(path="messages", expected="a list", actual=type(body).__name__),
            )
        if not self.passed:
            expected = self.expected
            if self.system_from_agent:
                first = messages[0] if messages else None
                if not isinstance(first, dict) or first.get("role") != "system":
                    found = mismatch_at("messages[0]", "the agent's own system message", first)
                    found.reason = "the first request does not begin with the agent's system message"
                    return Decision(kind="refuse", mismatch=found)
                expected = [first, *expected]
            diff = first_difference(expected, messages, "messages")
            if diff is not None:
                return Decision(kind="refuse", mismatch=diff)
            self.expected, self.passed = expected, True
            if self.system_from_agent:
                self.notes.append(
                    f"messages[0]: the file records no system message; the agent's own ({_length(expected[0])} "
                    "chars) was taken as sent, and every later request must carry it unchanged"
                )
            return Decision(kind="main")
        diff = first_difference(self.expected, messages[: len(self.expected)], "messages")
        if diff is not None:
            diff.reason = "a later request no longer carries the rebuilt prefix"
            return Decision(kind="refuse", mismatch=diff)
        return Decision(kind="main")


class SystemPerRequestGate:
    """For an agent that builds its system message per request (date, environment): messages[0] is
    reported in the notes, not gated; the rest of the first request must be exactly `prefix`, then
    `appended` (the resume prompt) when given. A later request must begin the same way. With
    `strip_appended` the prompt message (a nonce) is removed from every request before forwarding.
    Requests `is_side` says are side calls (a title request) are forwarded ungated. `systems`: how many
    system messages the agent builds per request (all reported, none gated)."""

    def __init__(
        self,
        prefix: list[Message],
        appended: Message | None,
        *,
        strip_appended: bool,
        is_side: Callable[[Any], bool] = lambda body: False,
        systems: int = 1,
    ):
        self.expected = [*prefix, *([appended] if appended is not None else [])]
        self.systems = systems
        self.strip_at = systems + len(prefix) if appended is not None and strip_appended else None
        self.is_side = is_side
        self.passed = False
        self.notes: list[str] = []

    def route(self, method: str, path: str, body: Any) -> Decision:
        if not is_completion(method, path) or self.is_side(body):
            return Decision(kind="side")
        messages = messages_of(body)
        k = self.systems
        if not messages or not all(
            isinstance(m, dict) and m.get("role") in ("system", "developer") for m in messages[:k]
        ):
            found = Mismatch(
                path="messages[0]" if k == 1 else f"messages[:{k}]",
                expected="the agent's system message",
                actual=str(messages)[:200],
            )
            return Decision(kind="refuse", mismatch=found)
        history = messages[k:]
        n = len(self.expected)
        where = f"messages[{k}:]"
        if not self.passed:
            diff = first_difference(self.expected, history, where)
            if diff is not None:
                if len(history) > n and diff.path.startswith(f"{where}[{n}]"):
                    diff = mismatch_at(diff.path, "<the end of the request>", history[n])
                return Decision(kind="refuse", mismatch=diff)
            self.passed = True
            self.notes += [_system_note(m, i) for i, m in enumerate(messages[:k])]
        else:
            diff = first_difference(self.expected, history[:n], where)
            if diff is not None:
                diff.reason = "a later request no longer carries the rebuilt prefix and its prompt"
                return Decision(kind="refuse", mismatch=diff)
        if self.strip_at is None:
            return Decision(kind="main")
        out = copy.deepcopy(body)
        del out["messages"][self.strip_at]
        return Decision(kind="main", body=out)


def _length(message: Message) -> int:
    """The length of a message's text: its string content, or its text parts joined."""
    content = message.get("content", "")
    if isinstance(content, str):
        return len(content)
    parts = content if isinstance(content, list) else []
    return sum(len(str(p.get("text", ""))) for p in parts if isinstance(p, dict))


def _system_note(system: Message, index: int = 0) -> str:
    content = system.get("content", "")
    text = content if isinstance(content, str) else orjson.dumps(content).decode()
    dated = [
        line.strip()
        for line in text.splitlines()
        if line.strip().startswith(("Today's date:", "Current date:"))
    ]
    where = f", {dated[0]}" if dated else ""
    return f"messages[{index}]: the agent's own system message ({len(text)} chars{where}) is built per request and not gated"
