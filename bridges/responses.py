"""The OpenAI Responses dialect: the same bearer key and error shape as chat completions, `input` lists.

Agent specifics (which context items a CLI inserts on resume) stay in the adapter's gate.
"""

from __future__ import annotations

from typing import Any

from bridges.chat import ChatDialect

Item = dict[str, Any]


class ResponsesDialect(ChatDialect):
    """Bearer key, OpenAI error bodies (shared with chat completions)."""


def is_response_request(method: str, path: str) -> bool:
    return method == "POST" and path.rstrip("/").endswith("/responses")


def input_of(body: Any) -> list[Item] | None:
    items = body.get("input") if isinstance(body, dict) else None
    return items if isinstance(items, list) else None


def message_text(item: Any) -> str | None:
    """The text of a message item whose content is one input_text, else None."""
    if not isinstance(item, dict) or item.get("type") != "message":
        return None
    content = item.get("content")
    part = content[0] if isinstance(content, list) and len(content) == 1 else None
    if isinstance(part, dict) and part.get("type") == "input_text" and isinstance(part.get("text"), str):
        return str(part["text"])
    return None
