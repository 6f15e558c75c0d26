"""Conversations in chat form for the reports: a replay's prefix, a continuation after the boundary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replayer.adapters.base import Adapter
from replayer.floor.results import TimelineCall, TimelineEntry

TEXT_CHARS = 4000


def _clip(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit], True)


def entries(messages: list[dict[str, Any]], limit: int = TEXT_CHARS) -> list[TimelineEntry]:
    """Chat messages (a dialect's `to_chat`) as timeline entries, each text cut at `limit` characters."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
        text, cut = _clip(str(content or ""), limit)
        calls = []
        for call in message.get("tool_calls") or []:
            function = call.get("function", {})
            arguments, cut_args = _clip(str(function.get("arguments", "")), limit)
            cut = cut or cut_args
            calls.append(TimelineCall(name=str(function.get("name", "")), arguments=arguments))
        call_id = message.get("tool_call_id")
        out.append(
            TimelineEntry(
                role=str(message.get("role")),
                text=text,
                tool_calls=calls,
                call_id=str(call_id) if call_id is not None else None,
                truncated=cut,
            )
        )
    return out


def continued(
    adapter: Adapter,
    run_dir: Path,
    expected_prefix: list[dict[str, Any]],
    model: str | None,
    limit: int = TEXT_CHARS,
) -> list[TimelineEntry]:
    """What happened after the boundary, in chat form, from the cleaned continued native session (`model`:
    the one the continuation was launched with)."""
    session = adapter.continued_prefix(run_dir, model)
    if session is None:
        return []
    dialect = adapter.dialect()
    return entries(dialect.to_chat(session)[len(dialect.to_chat(expected_prefix)) :], limit)
