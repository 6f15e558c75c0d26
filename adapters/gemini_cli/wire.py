"""The `contents` Gemini CLI 0.61 sends after `--resume`, built from the session's messages (and what
the releases that wrote one JSON document, before 0.39, send: `document=True`).

Not the live history (shared/formats/gemini-cli.md §3): the CLI's `convertSessionToClientHistory`
skips the stored `<session_context>` and other ignored user texts, turns each gemini message into a
model turn (its content parts; else its thoughts, text and `toolCalls` as functionCall parts) followed by
a user turn of its calls' results, then keeps the recorded user functionResponse messages as well, so
consecutive user turns are merged and every response is sent twice. The request puts a fresh session
context first (the first part of the first user turn) and `stripToolCallIdPrefixes` sends call ids
without the `<tool name>__` prefix the CLI stores, and drops empty text parts. For Gemini 2 and 3 models
the history it sends has no thought parts (`stripThoughts`, before the merging): a real session's
recorded thoughts are not sent.

When that history ends with an unanswered tool response (a boundary right after a tool batch), the
CLI's `closeUnansweredToolResponseTurn` puts a model turn of its own before the new prompt
(`INTERRUPTED`), in memory only: the session file never records it (0.54 and later; 0.53 has none).

The document releases (0.34's `convertSessionToClientHistory`, read from its package) skip only user
texts that begin with `/` or `?`, build a gemini message from its thoughts, content and `toolCalls`
whatever its content holds, and send the turns as they are: no merging, no id prefixes taken off, no
empty text parts dropped.
"""

from __future__ import annotations

import copy
from typing import Any

from adapters.gemini_cli.session import parts

Content = dict[str, Any]
CONTEXT_TAGS = ("<session_context>", "<hook_context>")
INTERRUPTED = "[The previous response was interrupted before it completed.]"
"""0.61's `INTERRUPTED_RESPONSE_PLACEHOLDER`."""
SYNTHETIC_SIGNATURE = "skip_thought_signature_validator"
"""0.61's `SYNTHETIC_THOUGHT_SIGNATURE`, on a resumed call whose thoughts it no longer sends."""


def part_text(content: Any) -> str:
    """`partListUnionToString` for text: the text parts joined."""
    return "".join(str(p.get("text", "")) for p in parts(content) if isinstance(p.get("text"), str))


def ignored_user_text(text: str) -> bool:
    """`isIgnoredUserContent`: a blank message, a slash or ? command, or a context block."""
    t = text.strip()
    return not t or ignored_command(t) or t.startswith(CONTEXT_TAGS)


def ignored_command(text: str) -> bool:
    """The document releases' test: a slash or ? command."""
    return text.strip().startswith(("/", "?"))


def client_history(messages: list[dict[str, Any]], document: bool = False) -> list[Content]:
    """`convertSessionToClientHistory` (`document`: as the releases before 0.39 convert)."""
    out: list[Content] = []
    for msg in messages:
        kind = msg.get("type")
        if kind == "user":
            content = msg.get("content")
            has_response = any("functionResponse" in p for p in parts(content))
            text = part_text(content)
            if ignored_command(text) if document else not has_response and ignored_user_text(text):
                continue
            out.append({"role": "user", "parts": copy.deepcopy(parts(content))})
        elif kind == "gemini":
            content_parts = copy.deepcopy(parts(msg.get("content"))) if msg.get("content") else []
            model: list[dict[str, Any]] = []
            calls = msg.get("toolCalls") or []
            if not document and (
                any("functionCall" in p for p in content_parts)
                or any(p.get("thought") for p in content_parts)
            ):
                model += content_parts
            else:
                for thought in msg.get("thoughts") or []:
                    subject = thought.get("subject")
                    text = (
                        f"**{subject}** {thought.get('description')}"
                        if subject
                        else thought.get("description")
                    )
                    model.append({"text": text, "thought": True})
                model += content_parts
                model += [
                    {"functionCall": {"id": c["id"], "name": c.get("name"), "args": c.get("args")}}
                    for c in calls
                ]
            if not model:
                continue
            out.append({"role": "model", "parts": model})
            responses: list[dict[str, Any]] = []
            for call in calls:
                result = call.get("result")
                if not result:
                    continue
                if isinstance(result, str):
                    responses.append(
                        {
                            "functionResponse": {
                                "id": call["id"],
                                "name": call.get("name"),
                                "response": {"output": result},
                            }
                        }
                    )
                elif isinstance(result, list):
                    responses += copy.deepcopy(parts(result))
                else:
                    responses.append(copy.deepcopy(result))
            if responses:
                out.append({"role": "user", "parts": responses})
    return out


def merged(contents: list[Content]) -> list[Content]:
    """Consecutive turns of one role as one turn."""
    out: list[Content] = []
    for content in contents:
        if out and out[-1]["role"] == content["role"]:
            out[-1] = {"role": content["role"], "parts": [*out[-1]["parts"], *content["parts"]]}
        else:
            out.append(content)
    return out


def _unprefixed(value: dict[str, Any], key: str) -> dict[str, Any]:
    inner = value[key]
    name = str(inner.get("name") or "").strip() or "generic_tool"
    ident = inner.get("id")
    if isinstance(ident, str) and ident.startswith(f"{name}__"):
        order = ("name", "args", "id") if key == "functionCall" else ("name", "response", "id")
        inner = {k: (ident[len(name) + 2 :] if k == "id" else inner.get(k)) for k in order}
    return {**value, key: inner}


def strip_prefixes(contents: list[Content]) -> list[Content]:
    """`stripToolCallIdPrefixes`."""
    out = []
    for content in contents:
        new_parts = []
        for part in content.get("parts") or []:
            new = dict(part)
            for key in ("functionCall", "functionResponse"):
                if isinstance(new.get(key), dict):
                    new = _unprefixed(new, key)
            others = any(k not in ("text", "thought", "callIndex") for k in new)
            if new.get("text") == "" and others:
                del new["text"]
            if new.get("text") == "" and not others:
                continue
            new_parts.append(new)
        out.append({**content, "parts": new_parts})
    return out


def without_thoughts(contents: list[Content]) -> list[Content]:
    """0.61's `stripThoughts` (its history for Gemini 2 and 3 and custom models, every model it offers):
    thought parts dropped, the first call of a model turn that had them given the synthetic thought
    signature, and turns left without parts dropped."""
    out = []
    for content in contents:
        all_parts = content.get("parts") or []
        kept = [p for p in all_parts if not p.get("thought")]
        if content.get("role") == "model" and len(kept) < len(all_parts):
            first = next((i for i, p in enumerate(kept) if p.get("functionCall")), None)
            if first is not None and not kept[first].get("thoughtSignature"):
                kept[first] = {**kept[first], "thoughtSignature": SYNTHETIC_SIGNATURE}
        if kept:
            out.append({**content, "parts": kept})
    return out


def resume_contents(messages: list[dict[str, Any]], document: bool = False) -> list[Content]:
    """What 0.61 sends for `messages` after `--resume`, without the fresh session context part
    (`document`: what a release before 0.39 sends)."""
    history = client_history(messages, document)
    return history if document else strip_prefixes(merged(without_thoughts(history)))


def without_context(contents: list[Content]) -> tuple[list[Content], str | None]:
    """A request's contents with the session context part taken out of the first user turn, and its text."""
    if not contents or contents[0].get("role") != "user":
        return contents, None
    first = contents[0].get("parts") or []
    text = first[0].get("text") if first and isinstance(first[0], dict) else None
    if not isinstance(text, str) or not text.startswith("<session_context>"):
        return contents, None
    rest = [{**contents[0], "parts": first[1:]}] if first[1:] else []
    return [*rest, *contents[1:]], text


def closing_turns(contents: list[Content]) -> list[Content]:
    """The model turn 0.61 adds before a new prompt when `contents` end with unanswered tool responses."""
    last = contents[-1] if contents else None
    if last is None or last.get("role") != "user":
        return []
    if not any(isinstance(p, dict) and "functionResponse" in p for p in last.get("parts") or []):
        return []
    return [{"role": "model", "parts": [{"text": INTERRUPTED}]}]
