"""The chat `messages` Pi 0.73.1 sends for a session context (without its per-request system message).

Pi's own two steps, for a provider with the default compatibility settings: `convertToLlm`
(coding-agent `core/messages.js`: bash executions, custom messages and summaries become user
messages) and the openai-completions `convertMessages` (pi-ai): user content stays a list of text
parts; an assistant message is its non-blank text joined (null when none), thinking under its
signature's field (`reasoning_content`), tool calls with `JSON.stringify`ed arguments, and is left
out when it has neither content nor calls; each tool result is `{role: "tool", content, tool_call_id}`
with its text blocks joined by newlines.

Versions before 0.58.0 (pi-ai's openai-completions before pi-mono#2008) send an assistant message's
non-blank text blocks as a list of text parts instead of one joined string (`to_wire(..., version=)`).
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from replayer.floor.pins import release

Message = dict[str, Any]
COMPACTION = (
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n",
    "\n</summary>",
)
BRANCH = (
    "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n",
    "</summary>",
)


def bash_execution_text(m: Message) -> str:
    text = f"Ran `{m.get('command')}`\n"
    text += f"```\n{m['output']}\n```" if m.get("output") else "(no output)"
    if m.get("cancelled"):
        text += "\n\n(command cancelled)"
    elif m.get("exitCode") not in (None, 0):
        text += f"\n\nCommand exited with code {m['exitCode']}"
    if m.get("truncated") and m.get("fullOutputPath"):
        text += f"\n\n[Output truncated. Full output: {m['fullOutputPath']}]"
    return text


def to_llm(messages: list[Message]) -> list[Message]:
    """`convertToLlm`."""
    out: list[Message] = []
    for m in messages:
        role = m.get("role")
        if role == "bashExecution":
            if not m.get("excludeFromContext"):
                out.append({"role": "user", "content": [{"type": "text", "text": bash_execution_text(m)}]})
        elif role == "custom":
            content = m.get("content")
            out.append(
                {
                    "role": "user",
                    "content": [{"type": "text", "text": content}] if isinstance(content, str) else content,
                }
            )
        elif role in ("branchSummary", "compactionSummary"):
            head, tail = COMPACTION if role == "compactionSummary" else BRANCH
            out.append(
                {"role": "user", "content": [{"type": "text", "text": head + str(m.get("summary")) + tail}]}
            )
        elif role in ("user", "assistant", "toolResult"):
            out.append(m)
    return out


def _image(block: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "image_url",
        "image_url": {"url": f"data:{block.get('mimeType')};base64,{block.get('data')}"},
    }


_SURROGATE = re.compile("[\ud800-\udfff]")
"""A lone surrogate (a paired one is read as one character): Pi's files keep them, as JSON.stringify
writes them (`\\udXXX`)."""


def sanitize(text: str) -> str:
    """pi-ai's `sanitizeSurrogates`: lone surrogates removed from the text it sends."""
    return _SURROGATE.sub("", text)


def js_json(value: Any) -> str:
    """JSON.stringify: compact, keys in order, non-ASCII kept, a lone surrogate escaped."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:  # orjson writes no lone surrogate
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
        return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


ASSISTANT_TEXT_JOINED = (0, 58, 0)
"""The first version whose openai-completions provider sends assistant text as one string."""


def other_model(blocks: list[Message]) -> list[Message]:
    """An assistant message's blocks as pi-ai's `transformMessages` sends them to another model (provider,
    api or id): thinking becomes text, blank or redacted thinking is left out."""
    out = []
    for b in blocks:
        if b.get("type") != "thinking":
            out.append(b)
        elif not b.get("redacted") and str(b.get("thinking") or "").strip():
            out.append({"type": "text", "text": b["thinking"]})
    return out


def to_wire(
    messages: list[Message], version: str | None = None, target: tuple[str, str, str] | None = None
) -> list[Message]:
    """The chat messages Pi `version` (default: 0.58.0 and later) sends for `messages` to the model
    `target` (provider, api, id; None: the model that wrote each message)."""
    text_parts = version is not None and release(version) < ASSISTANT_TEXT_JOINED
    out: list[Message] = []
    for m in to_llm(messages):
        role = m["role"]
        if role == "user":
            content = m["content"]
            if isinstance(content, str):
                out.append({"role": "user", "content": sanitize(content)})
                continue
            parts = [
                {"type": "text", "text": sanitize(c["text"])} if c.get("type") == "text" else _image(c)
                for c in content
            ]
            if parts:
                out.append({"role": "user", "content": parts})
        elif role == "assistant":
            blocks = m.get("content") or []
            if target is not None and (m.get("provider"), m.get("api"), m.get("model")) != target:
                blocks = other_model(blocks)
            texts = [
                sanitize(b["text"]) for b in blocks if b.get("type") == "text" and b.get("text", "").strip()
            ]
            said: str | list[Message] | None = "".join(texts) or None
            if text_parts and texts:
                said = [{"type": "text", "text": t} for t in texts]
            wire: Message = {"role": "assistant", "content": said}
            thinking = [b for b in blocks if b.get("type") == "thinking" and b.get("thinking", "").strip()]
            if thinking and thinking[0].get("thinkingSignature"):
                wire[thinking[0]["thinkingSignature"]] = "\n".join(b["thinking"] for b in thinking)
            calls = [b for b in blocks if b.get("type") == "toolCall"]
            if calls:
                wire["tool_calls"] = [
                    {
                        "id": c["id"],
                        "type": "function",
                        "function": {"name": c["name"], "arguments": js_json(c.get("arguments", {}))},
                    }
                    for c in calls
                ]
            if wire["content"] is None and not calls:
                continue
            out.append(wire)
        else:
            blocks = (
                m["content"] if isinstance(m["content"], list) else [{"type": "text", "text": m["content"]}]
            )
            text = "\n".join(
                b.get("text") or "" for b in blocks if b.get("type") == "text"
            )  # join: null is ""
            out.append(
                {
                    "role": "tool",
                    "content": sanitize(text or "(see attached image)"),
                    "tool_call_id": m["toolCallId"],
                }
            )
    return out


def tool_text(result: Message) -> str:
    """What the model sees of one tool result."""
    return to_wire([result])[0]["content"]
