"""The Gemini API dialect (`x-goog-api-key`, Google's error shape) and its scripted model service.

Gemini CLI talks to `POST /v1beta/models/<model>:streamGenerateContent?alt=sse` for the main thread
(`contents` with `functionCall` / `functionResponse` parts, `tools`) and to `:generateContent` for side
calls without tools (model routing, "who speaks next"), which ask for JSON matching a response schema.
`ScriptedGemini` serves a `Script` on that wire: main requests take the script's turns (or the fed ones
of a driven rerun), side calls get the first answer their schema allows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import orjson

from replayer.bridges.scripted import (
    SIDE_TEXT,
    LoggedRequest,
    ScriptedUpstream,
    TextBlock,
    ToolUseBlock,
    Turn,
)
from replayer.bridges.usage import UsageKeys

if TYPE_CHECKING:
    from aiohttp import web


Content = dict[str, Any]
KEY_HEADER = "x-goog-api-key"
THOUGHT_SIGNATURE = "c2NyaXB0ZWQtc2lnbmF0dXJl"
"""The scripted model's signature on the first call of a turn (the real API sends one there)."""


class GeminiDialect:
    usage_keys = UsageKeys(
        "usageMetadata",
        ("promptTokenCount", "toolUsePromptTokenCount"),
        ("candidatesTokenCount", "thoughtsTokenCount"),
    )
    """In each chunk's `usageMetadata`; `promptTokenCount` includes `cachedContentTokenCount`, thinking
    (`thoughtsTokenCount`) and tool-use prompts are reported apart and billed."""

    def auth_headers(self, key: str) -> dict[str, str]:
        return {KEY_HEADER: key}

    def error_body(self, message: str) -> dict[str, Any]:
        return {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}

    def to_chat(self, prefix: list[Content]) -> list[dict[str, Any]]:
        return to_chat(prefix)


def is_stream(method: str, path: str) -> bool:
    return method == "POST" and path.split("?")[0].endswith(":streamGenerateContent")


def is_generate(method: str, path: str) -> bool:
    return method == "POST" and path.split("?")[0].endswith(":generateContent")


def to_chat(contents: list[Content]) -> list[dict[str, Any]]:
    """Gemini `contents` as OpenAI chat messages (text joined, calls as tool_calls, responses as tool).

    A resumed Gemini CLI sends each tool response twice in one user turn (its `_response` turn and the
    recorded user message, merged): the chat form keeps the first response of each call id in a turn, so
    that every call has one result."""
    out: list[dict[str, Any]] = []
    for content in contents:
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        text = "".join(
            str(p["text"]) for p in parts if isinstance(p.get("text"), str) and not p.get("thought")
        )
        if content.get("role") == "model":
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            calls = [p["functionCall"] for p in parts if isinstance(p.get("functionCall"), dict)]
            if calls:
                message["tool_calls"] = [
                    {
                        "id": str(c.get("id", "")),
                        "type": "function",
                        "function": {
                            "name": c.get("name"),
                            "arguments": orjson.dumps(c.get("args", {})).decode(),
                        },
                    }
                    for c in calls
                ]
            out.append(message)
            continue
        if text:
            out.append({"role": "user", "content": text})
        answered: set[str] = set()
        for p in parts:
            if isinstance(p.get("functionResponse"), dict):
                fr = p["functionResponse"]
                if str(fr.get("id", "")) in answered:
                    continue
                answered.add(str(fr.get("id", "")))
                out.append(
                    {
                        "role": "tool",
                        "tool_call_id": str(fr.get("id", "")),
                        "content": response_text(fr.get("response")),
                    }
                )
    return out


def tools_to_chat(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Gemini `tools` (groups of `functionDeclarations`) as chat functions; the parameters are the JSON
    schema (`parametersJsonSchema`, else `parameters`). Built-in tools (googleSearch ...) have no chat form."""
    out = []
    for group in tools:
        for declaration in group.get("functionDeclarations") or []:
            schema = declaration.get("parametersJsonSchema", declaration.get("parameters"))
            function = {"name": declaration.get("name"), "description": declaration.get("description", "")}
            out.append(
                {"type": "function", "function": {**function, "parameters": schema or {"type": "object"}}}
            )
    return out


def response_text(response: Any) -> str:
    """What a functionResponse's `response` says: its `output` or `error` text, else the JSON."""
    if isinstance(response, dict):
        for key in ("output", "error"):
            if isinstance(response.get(key), str):
                return str(response[key])
    return orjson.dumps(response).decode()


# the scripted model service ---------------------------------------------------------------------
def stream_chunks(turn: Turn, model: str, response_id: str) -> list[dict[str, Any]]:
    """The `alt=sse` chunks of one model turn: its text in pieces, then every call in one chunk, the last
    chunk with `finishReason` and the usage."""

    def chunk(parts: list[dict[str, Any]], finish: bool = False) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"parts": parts, "role": "model"}, "index": 0}
        out: dict[str, Any] = {"candidates": [candidate], "modelVersion": model, "responseId": response_id}
        if finish:
            candidate["finishReason"] = "STOP"
            out["usageMetadata"] = {
                "promptTokenCount": 100,
                "candidatesTokenCount": 20,
                "totalTokenCount": 120,
            }
        return out

    texts = [b.text for b in turn.blocks if isinstance(b, TextBlock)]
    calls = [b for b in turn.blocks if isinstance(b, ToolUseBlock)]
    chunks = [chunk([{"text": t}]) for t in texts if t]
    parts: list[dict[str, Any]] = []
    for n, call in enumerate(calls):
        part: dict[str, Any] = {"functionCall": {"id": call.id, "name": call.name, "args": call.input}}
        if n == 0:
            part["thoughtSignature"] = THOUGHT_SIGNATURE
        parts.append(part)
    if parts:
        chunks.append(chunk(parts))
    if not chunks:
        chunks.append(chunk([{"text": ""}]))
    chunks[-1] = chunk(chunks[-1]["candidates"][0]["content"]["parts"], finish=True)
    return chunks


def schema_answer(schema: Any) -> Any:
    """The first value a JSON schema allows: an enum's first member, each required property filled."""
    if not isinstance(schema, dict):
        return "Scripted."
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    kind = str(schema.get("type", "string")).lower()
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: schema_answer(props.get(k)) for k in schema.get("required") or list(props)}
    if kind == "array":
        return []
    if kind == "boolean":
        return False
    if kind in ("integer", "number"):
        return 0
    return "Scripted."


def side_answer(body: Any, model: str) -> dict[str, Any]:
    """A `generateContent` answer: JSON for the response schema the call asks for, else a short text."""
    config = body.get("generationConfig") if isinstance(body, dict) else None
    schema = None
    if isinstance(config, dict):
        schema = config.get("responseJsonSchema") or config.get("responseSchema")
    text = orjson.dumps(schema_answer(schema)).decode() if schema is not None else SIDE_TEXT
    return stream_chunks(Turn(blocks=[TextBlock(text=text)]), model, "side")[0]


class ScriptedGemini(ScriptedUpstream):
    """`ScriptedUpstream` on the Gemini wire (the key arrives as `x-goog-api-key`)."""

    def answered_call_ids(self, body: Any) -> set[str]:
        contents = body.get("contents") if isinstance(body, dict) else None
        parts = [p for c in contents or [] if isinstance(c, dict) for p in c.get("parts") or []]
        responses = [p["functionResponse"] for p in parts if isinstance(p, dict) and "functionResponse" in p]
        return {r["id"] for r in responses if isinstance(r, dict) and isinstance(r.get("id"), str)}

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        from aiohttp import web

        method, path = request.method, request.path_qs
        if not (is_stream(method, path) or is_generate(method, path)):
            return await super()._handle(request)
        raw = await request.read()
        body: Any = orjson.loads(raw) if raw else None
        hidden = (KEY_HEADER, "x-api-key", "authorization")
        headers = {k.lower(): v for k, v in request.headers.items() if k.lower() not in hidden}
        entry = LoggedRequest(method=method, path=path, headers=headers, body=body)
        if self.expected_key is not None:
            entry.key_ok = request.headers.get(KEY_HEADER) == self.expected_key
        self.log.append(entry)
        model = self.script.model
        if is_generate(method, path):
            return web.json_response(side_answer(body, model))
        entry.main_thread = True
        entry.turn = self.next_turn
        turn = await self._next_turn(body)
        if turn.stall_s:
            import asyncio

            await asyncio.sleep(turn.stall_s)
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for sent, chunk in enumerate(stream_chunks(turn, model, f"resp_{len(self.log):03d}")):
            if turn.fail_after_events is not None and sent >= turn.fail_after_events:
                request.transport.close()  # type: ignore[union-attr]
                return response
            await response.write(b"data: " + orjson.dumps(chunk) + b"\r\n\r\n")
        await response.write_eof()
        return response
