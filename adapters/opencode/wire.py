"""The chat `messages` the pinned CLI sends for a stored session (without its per-request system message).

Observed with opencode-ai 1.18.33 through @ai-sdk/openai-compatible: a user message is its text (one
part: a string; several: text content parts); an assistant message is its text joined ("" when
none), its reasoning as `reasoning_content`, and its tool parts as `tool_calls` (arguments: the
input as compact JSON); each tool part then becomes a `tool` message carrying its output, or its
error text when it failed.
"""

from __future__ import annotations

from typing import Any

import orjson

Message = dict[str, Any]
INTERRUPTED = "[Tool execution was interrupted]"


def _texts(parts: list[dict[str, Any]], kind: str) -> list[str]:
    return [p.get("text", "") for p in parts if p.get("type") == kind and not p.get("ignored")]


def tool_result(state: dict[str, Any]) -> str:
    status = state.get("status")
    if status == "completed":
        return str(state.get("output", ""))
    if status == "error":
        return str(state.get("error", ""))
    return INTERRUPTED


def to_wire(messages: list[dict[str, Any]]) -> list[Message]:
    out: list[Message] = []
    for message in messages:
        role = message["info"].get("role")
        parts = message.get("parts", [])
        if role == "user":
            texts = _texts(parts, "text")
            content: Any = texts[0] if len(texts) == 1 else [{"type": "text", "text": t} for t in texts]
            out.append({"role": "user", "content": content})
            continue
        calls = [p for p in parts if p.get("type") == "tool"]
        wire: Message = {"role": "assistant", "content": "".join(_texts(parts, "text"))}
        reasoning = "".join(_texts(parts, "reasoning"))
        if reasoning:
            wire["reasoning_content"] = reasoning
        if calls:
            wire["tool_calls"] = [
                {
                    "id": p["callID"],
                    "type": "function",
                    "function": {
                        "name": p["tool"],
                        "arguments": orjson.dumps(p["state"].get("input", {})).decode(),
                    },
                }
                for p in calls
            ]
        out.append(wire)
        out += [
            {"role": "tool", "tool_call_id": p["callID"], "content": tool_result(p["state"])} for p in calls
        ]
    return out


def is_title_request(body: Any) -> bool:
    """OpenCode's side call that names a new session (its small model, no tools)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    first = messages[0] if isinstance(messages, list) and messages else {}
    content = first.get("content") if isinstance(first, dict) else None
    return isinstance(content, str) and content.startswith("You are a title generator")


def main_thread(path: str, body: Any) -> bool:
    """Every request but the title request is OpenCode's main conversation."""
    return not is_title_request(body)
