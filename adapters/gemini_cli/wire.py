"""The `contents` a Gemini CLI release sends after `--resume`, built from the session's messages by that
release's rules (`Resume`, from adapters/gemini_cli/bundle.py: each rule names the first release that has
it, read from the packages); `LATEST` is the pinned 0.61's.

Not the live history (shared/formats/gemini-cli.md §3): the CLI's `convertSessionToClientHistory`
skips the stored `<session_context>` and other ignored user texts, turns each gemini message into a
model turn (its content parts; else its thoughts, text and `toolCalls` as functionCall parts) followed by
a user turn of its calls' results, then keeps the recorded user functionResponse messages as well, so
every response is sent twice: 0.53 and later merge consecutive turns of one role
(`coalesceConsecutiveRoles`, one user turn with both), earlier releases send the two user turns as they
are. The request puts a fresh session context first (the first part of the first user turn, or a turn of
its own before 0.53) and `stripToolCallIdPrefixes` (0.43 and later) sends call ids without the
`<tool name>__` prefix the CLI stores, and (0.57 and later) drops empty text parts. For Gemini 2 and 3
models the history 0.54 and later send has no thought parts (`stripThoughts`, before the merging): a real
session's recorded thoughts are not sent; earlier releases send them as thought parts.

When that history ends with an unanswered tool response (a boundary right after a tool batch), the
CLI's `closeUnansweredToolResponseTurn` puts a model turn of its own before the new prompt
(`INTERRUPTED`), in memory only: the session file never records it (0.54 and later; 0.53 has none).

Releases before 0.44 (the document releases, and the first log releases 0.39 to 0.43: the same
`convertSessionToClientHistory` as 0.34's, read from their packages) skip only user texts that begin
with `/` or `?`, and build a gemini message from its thoughts, content and `toolCalls` whatever its
content holds; 0.44 builds it as 0.61 does; 0.45 also skips the stored context blocks, 0.47 blank texts.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass
from typing import Any

from replayer.adapters.gemini_cli.session import parts

Content = dict[str, Any]
CONTEXT_TAGS = ("<session_context>", "<hook_context>")
INTERRUPTED = "[The previous response was interrupted before it completed.]"
"""0.61's `INTERRUPTED_RESPONSE_PLACEHOLDER`."""
SYNTHETIC_SIGNATURE = "skip_thought_signature_validator"
"""0.61's `SYNTHETIC_THOUGHT_SIGNATURE`, on a resumed call whose thoughts it no longer sends."""


@dataclass(frozen=True)
class Resume:
    """How a release turns a session back into the `contents` it sends (each rule: bundle.py names the
    first release that has it). The defaults are the pinned 0.61's."""

    content_parts: bool = True
    """A gemini message is its content parts when they hold calls or thoughts (`CONTENT_PARTS_SINCE`)."""
    skips_context: bool = True
    """Stored `<session_context>` / `<hook_context>` user messages are not sent (`SKIPS_CONTEXT_SINCE`)."""
    reuses_context: bool = True
    """A history whose first turn has the environment context's id (`ENVIRONMENT_ID`) is sent with that
    turn as the session context, no fresh one built (`getInitialChatHistory`, `REUSES_CONTEXT_SINCE`);
    it shows only before `skips_context` (0.44), which leaves the stored context out first."""
    skips_blank: bool = True
    """Blank user messages are not sent (`isIgnoredUserContent`, `SKIPS_BLANK_SINCE`)."""
    strips_prefixes: bool = True
    """`stripToolCallIdPrefixes` (`STRIPS_PREFIXES_SINCE`)."""
    drops_empty_text: bool = True
    """`stripToolCallIdPrefixes` also drops empty text parts (`DROPS_EMPTY_TEXT_SINCE`)."""
    strips_thoughts: bool = True
    """`stripThoughts` (`STRIPS_THOUGHTS_SINCE`)."""
    merges: bool = True
    """`coalesceConsecutiveRoles` (`MERGES_SINCE`)."""
    closes: bool = True
    """`closeUnansweredToolResponseTurn` (`CLOSES_SINCE`)."""


LATEST = Resume()
DOCUMENT = Resume(
    content_parts=False,
    skips_context=False,
    reuses_context=False,
    skips_blank=False,
    strips_prefixes=False,
    drops_empty_text=False,
    strips_thoughts=False,
    merges=False,
    closes=False,
)
"""The releases before 0.39, which keep a session as one JSON document (0.34's package)."""


ENVIRONMENT_ID = hashlib.sha256(b"environment-context").hexdigest()[:32]
"""`deriveStableId(["environment-context"])`: the id the CLI (0.44 and later) gives the session context turn
it records first in a session."""


def part_text(content: Any) -> str:
    """`partListUnionToString` for text: the text parts joined."""
    return "".join(str(p.get("text", "")) for p in parts(content) if isinstance(p.get("text"), str))


def ignored_user_text(text: str, rules: Resume = LATEST) -> bool:
    """A user text the release does not send: a slash or ? command, a context block (`skips_context`), a
    blank message (`skips_blank`; 0.61's `isIgnoredUserContent`)."""
    t = text.strip()
    return (
        t.startswith(("/", "?"))
        or (rules.skips_context and t.startswith(CONTEXT_TAGS))
        or (rules.skips_blank and not t)
    )


def client_history(messages: list[dict[str, Any]], rules: Resume = LATEST) -> list[Content]:
    """`convertSessionToClientHistory`, as the release of `rules` converts."""
    out: list[Content] = []
    for msg in messages:
        kind = msg.get("type")
        if kind == "user":
            content = msg.get("content")
            has_response = any("functionResponse" in p for p in parts(content))
            if not has_response and ignored_user_text(part_text(content), rules):
                continue
            out.append({"role": "user", "parts": copy.deepcopy(parts(content))})
        elif kind == "gemini":
            content_parts = copy.deepcopy(parts(msg.get("content"))) if msg.get("content") else []
            model: list[dict[str, Any]] = []
            calls = msg.get("toolCalls") or []
            if rules.content_parts and (
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


def strip_prefixes(contents: list[Content], drop_empty: bool = True) -> list[Content]:
    """`stripToolCallIdPrefixes` (`drop_empty`: with the empty text parts it drops from 0.57 on)."""
    out = []
    for content in contents:
        new_parts = []
        for part in content.get("parts") or []:
            new = dict(part)
            for key in ("functionCall", "functionResponse"):
                if isinstance(new.get(key), dict):
                    new = _unprefixed(new, key)
            if drop_empty and new.get("text") == "":
                if not any(k not in ("text", "thought", "callIndex") for k in new):
                    continue
                del new["text"]
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


def resume_contents(messages: list[dict[str, Any]], rules: Resume = LATEST) -> list[Content]:
    """What the release of `rules` sends for `messages` after `--resume`, without the fresh session
    context part."""
    if rules.reuses_context and not rules.skips_context:
        first = next((m for m in messages if m.get("type") in ("user", "gemini")), None)
        if first is not None and first.get("id") == ENVIRONMENT_ID:  # sent as the context: not the prefix
            messages = [m for m in messages if m is not first]
    history = client_history(messages, rules)
    history = without_thoughts(history) if rules.strips_thoughts else history
    history = merged(history) if rules.merges else history
    return strip_prefixes(history, rules.drops_empty_text) if rules.strips_prefixes else history


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
    """The model turn 0.54 and later add before a new prompt when `contents` end with unanswered tool responses."""
    last = contents[-1] if contents else None
    if last is None or last.get("role") != "user":
        return []
    if not any(isinstance(p, dict) and "functionResponse" in p for p in last.get("parts") or []):
        return []
    return [{"role": "model", "parts": [{"text": INTERRUPTED}]}]
