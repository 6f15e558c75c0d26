"""The OpenAI Responses dialect: the same bearer key and error shape as chat completions, `input` lists.

Agent specifics (which context items a CLI inserts on resume) stay in the adapter's gate.
"""

from __future__ import annotations

from typing import Any

import orjson

from replayer.bridges.chat import ChatDialect
from replayer.bridges.usage import UsageKeys

Item = dict[str, Any]


class ResponsesDialect(ChatDialect):
    """Bearer key, OpenAI error bodies (shared with chat completions)."""

    usage_keys = UsageKeys("usage", ("input_tokens",), ("output_tokens",))
    """In `response.completed`; `input_tokens` includes `input_tokens_details.cached_tokens`, `output_tokens`
    includes `output_tokens_details.reasoning_tokens`."""

    def to_chat(self, prefix: list[Item]) -> list[Item]:
        return to_chat(prefix)


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


def to_chat(items: list[Item]) -> list[Item]:
    """Responses input items in OpenAI chat form: developer messages as system, consecutive calls merged into
    one assistant message, outputs as tool messages; reasoning items (encrypted) are dropped. A freeform
    (custom) tool call becomes a function call whose arguments are {"input": <text>}."""
    out: list[Item] = []
    for item in items:
        kind = item.get("type")
        if kind == "message":
            content = item.get("content")
            parts = content if isinstance(content, list) else []
            text = "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
            role = {"developer": "system"}.get(str(item.get("role")), str(item.get("role")))
            out.append({"role": role, "content": text})
        elif kind in ("function_call", "custom_tool_call"):
            arguments = (
                item.get("arguments")
                if kind == "function_call"
                else orjson.dumps({"input": item.get("input", "")}).decode()
            )
            call = {
                "id": item.get("call_id"),
                "type": "function",
                "function": {"name": item.get("name"), "arguments": arguments},
            }
            if out and out[-1].get("role") == "assistant" and "tool_calls" in out[-1]:
                out[-1]["tool_calls"].append(call)
            elif out and out[-1].get("role") == "assistant":
                out[-1]["tool_calls"] = [call]
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            output = item.get("output")
            out.append(
                {
                    "role": "tool",
                    "tool_call_id": item.get("call_id"),
                    "content": output if isinstance(output, str) else orjson.dumps(output).decode(),
                }
            )
    return out


def tools_to_chat(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Function tools as chat functions; a custom (freeform) tool as a function taking {"input": string}.
    Hosted tools (web_search, tool_search) have no chat form and are left out."""
    out = []
    for tool in tools:
        if tool.get("type") == "function":
            out.append(
                {
                    "type": "function",
                    "function": {k: tool[k] for k in ("name", "description", "parameters") if k in tool},
                }
            )
        elif tool.get("type") == "custom":
            schema = {"type": "object", "properties": {"input": {"type": "string"}}, "required": ["input"]}
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": tool.get("name"),
                        "description": tool.get("description", ""),
                        "parameters": schema,
                    },
                }
            )
    return out
