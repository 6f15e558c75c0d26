"""The tools a request offers, read from any protocol's request body."""

from __future__ import annotations

from typing import Any


def tool_names(body: Any) -> list[str]:
    """The tools a request offers (Anthropic and Responses: `name`; chat completions: `function.name`;
    Gemini: each group's `functionDeclarations[].name`)."""
    names = []
    for tool in body.get("tools") or [] if isinstance(body, dict) else []:
        if not isinstance(tool, dict):
            continue
        declared = tool.get("functionDeclarations")
        for each in declared if isinstance(declared, list) else [tool]:
            if isinstance(each, dict):
                name = each.get("name") or (each.get("function") or {}).get("name")
                if isinstance(name, str):
                    names.append(name)
    return names
