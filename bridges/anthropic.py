"""The Anthropic Messages dialect: key header, error shape, and the protocol-level normalization of `messages`.

Normalized form: no `role:"system"` messages, no `cache_control`, every `content` a list of blocks.
Agent-specific request-time additions (a CLI's own reminders) are the adapter's business.
"""

from __future__ import annotations

from typing import Any

Message = dict[str, Any]


class AnthropicDialect:
    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def error_body(self, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def as_blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [dict(b) for b in content] if isinstance(content, list) else []


def strip_cache_control(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: strip_cache_control(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_cache_control(v) for v in value]
    return value


def normalize_messages(messages: list[Message]) -> list[Message]:
    return [
        {"role": m.get("role"), "content": strip_cache_control(as_blocks(m.get("content")))}
        for m in messages
        if m.get("role") != "system"
    ]


def non_system_indexes(messages: list[Message]) -> list[int]:
    """Raw positions of the messages that survive normalization, in order."""
    return [i for i, m in enumerate(messages) if m.get("role") != "system"]
