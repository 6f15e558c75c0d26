"""The Anthropic Messages dialect: key header, error shape, and the protocol-level normalization of `messages`.

Normalized form: no `role:"system"` messages, no `cache_control`, every `content` a list of blocks.
Agent-specific request-time additions (a CLI's own reminders) are the adapter's business.
"""

from __future__ import annotations

from typing import Any

import orjson

from replayer.bridges.usage import UsageKeys

Message = dict[str, Any]


class AnthropicDialect:
    usage_keys = UsageKeys(
        "usage",
        ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"),
        ("output_tokens",),
    )
    """In `message_start`, the cumulative counts in `message_delta`; `input_tokens` excludes both cache fields."""

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def error_body(self, message: str) -> dict[str, Any]:
        return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}

    def to_chat(self, prefix: list[Message]) -> list[Message]:
        return to_chat(prefix)


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


def to_chat(messages: list[Message]) -> list[Message]:
    """Anthropic messages in OpenAI chat form: text joined, tool_use -> tool_calls, tool_result -> tool messages.
    Thinking blocks are dropped (their signatures are only valid for the Anthropic API)."""
    out: list[Message] = []
    for message in messages:
        blocks = as_blocks(message.get("content"))
        if message.get("role") == "assistant":
            text = "".join(b.get("text", "") for b in blocks if b.get("type") == "text")
            calls = [
                {
                    "id": b.get("id"),
                    "type": "function",
                    "function": {"name": b.get("name"), "arguments": _json(b.get("input", {}))},
                }
                for b in blocks
                if b.get("type") == "tool_use"
            ]
            entry: Message = {"role": "assistant", "content": text or None}
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
            continue
        texts: list[str] = []
        for block in blocks:
            if block.get("type") == "tool_result":
                content = block.get("content")
                result = (
                    content
                    if isinstance(content, str)
                    else "".join(b.get("text", "") for b in as_blocks(content) if b.get("type") == "text")
                )
                out.append({"role": "tool", "tool_call_id": block.get("tool_use_id"), "content": result})
            elif block.get("type") == "text":
                texts.append(str(block.get("text", "")))
        if texts:
            out.append({"role": "user", "content": "\n\n".join(texts)})
    return out


def tools_to_chat(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": t.get("name"),
                "description": t.get("description", ""),
                "parameters": t.get("input_schema", {}),
            },
        }
        for t in tools
        if "name" in t
    ]


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()
