"""The OpenAI chat-completions dialect: bearer key, error shape, and the gate for an unwrapped prefix.

Agent specifics stay out: an agent whose continuation adds a resume envelope wraps this gate.
"""

from __future__ import annotations

from typing import Any

from bridges.core import Decision, Mismatch, first_difference

Message = dict[str, Any]


class ChatDialect:
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

    Nothing is stripped or rewritten: the body is forwarded as the agent sent it.
    """

    def __init__(self, expected: list[Message]):
        self.expected = expected
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
            diff = first_difference(self.expected, messages, "messages")
            if diff is not None:
                return Decision(kind="refuse", mismatch=diff)
            self.passed = True
            return Decision(kind="main")
        diff = first_difference(self.expected, messages[: len(self.expected)], "messages")
        if diff is not None:
            diff.reason = "a later request no longer carries the rebuilt prefix"
            return Decision(kind="refuse", mismatch=diff)
        return Decision(kind="main")
