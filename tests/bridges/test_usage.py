"""Token usage read off upstream answers at the bridge, for the three protocols, streamed or not."""

from __future__ import annotations

import orjson

from replayer.bridges.anthropic import AnthropicDialect
from replayer.bridges.chat import ChatDialect
from replayer.bridges.gemini import GeminiDialect
from replayer.bridges.responses import ResponsesDialect
from replayer.bridges.usage import TAIL_BYTES, AnswerEnds, Usage, usage_of

ANTHROPIC_KEYS, CHAT_KEYS, RESPONSES_KEYS = (
    d.usage_keys for d in (AnthropicDialect, ChatDialect, ResponsesDialect)
)


def _sse(*events: dict) -> bytes:
    return b"".join(b"event: x\ndata: " + orjson.dumps(e) + b"\n\n" for e in events)


ANTHROPIC = [
    {"type": "message_start", "message": {"id": "m", "usage": {"input_tokens": 321, "output_tokens": 1}}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}},
    {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 45}},
]


def test_anthropic_stream_counts_input_at_start_and_cumulative_output_at_the_end() -> None:
    assert usage_of([_sse(*ANTHROPIC)], ANTHROPIC_KEYS) == Usage(input_tokens=321, output_tokens=45)


def test_chat_and_responses_and_plain_bodies() -> None:
    chat = b"data: " + orjson.dumps({"choices": [{"delta": {"content": "x"}}]}) + b"\n\n"
    chat += b"data: " + orjson.dumps({"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
    chat += b"\n\ndata: [DONE]\n\n"
    assert usage_of([chat], CHAT_KEYS) == Usage(input_tokens=7, output_tokens=3)
    done = {"type": "response.completed", "response": {"usage": {"input_tokens": 9, "output_tokens": 4}}}
    assert usage_of([_sse({"type": "response.created"}, done)], RESPONSES_KEYS) == Usage(
        input_tokens=9, output_tokens=4
    )
    body = orjson.dumps({"id": "c", "usage": {"prompt_tokens": 11, "completion_tokens": 2}})
    assert usage_of([body], CHAT_KEYS) == Usage(input_tokens=11, output_tokens=2)
    assert usage_of([b'{"id": "no usage"}'], CHAT_KEYS) == Usage()


def test_only_the_dialects_own_keys_count() -> None:
    body = orjson.dumps({"usage": {"prompt_tokens": 11, "completion_tokens": 2}})
    assert usage_of([body], RESPONSES_KEYS) == Usage()
    assert usage_of([_sse(*ANTHROPIC)], CHAT_KEYS) == Usage()


def test_a_long_answer_keeps_its_head_and_tail() -> None:
    ends = AnswerEnds(ANTHROPIC_KEYS)
    events = (
        _sse(ANTHROPIC[0]),
        _sse(ANTHROPIC[1]) * (2 * TAIL_BYTES // len(_sse(ANTHROPIC[1]))),
        _sse(ANTHROPIC[2]),
    )
    for part in events:
        for i in range(0, len(part), 7000):
            ends.add(part[i : i + 7000])
    assert ends.size > TAIL_BYTES and len(ends.tail) == TAIL_BYTES
    assert ends.usage() == Usage(input_tokens=321, output_tokens=45)


def test_every_billed_field_counts_once() -> None:
    """Anthropic's cache fields are apart from `input_tokens`; Responses' cached and reasoning tokens are
    inside `input_tokens` / `output_tokens`; Gemini's thinking and tool-use prompts are apart from its
    prompt and candidates, its cached content inside the prompt."""
    start = {
        "type": "message_start",
        "message": {
            "usage": {
                "input_tokens": 4,
                "cache_creation_input_tokens": 2_000,
                "cache_read_input_tokens": 30_000,
                "output_tokens": 1,
            }
        },
    }
    assert usage_of([_sse(start, ANTHROPIC[2])], ANTHROPIC_KEYS) == Usage(
        input_tokens=32_004, output_tokens=45
    )
    usage = {
        "input_tokens": 900,
        "input_tokens_details": {"cached_tokens": 800},
        "output_tokens": 300,
        "output_tokens_details": {"reasoning_tokens": 250},
    }
    done = {"type": "response.completed", "response": {"usage": usage}}
    assert usage_of([_sse(done)], RESPONSES_KEYS) == Usage(input_tokens=900, output_tokens=300)
    metadata = {
        "promptTokenCount": 1_000,
        "cachedContentTokenCount": 600,
        "toolUsePromptTokenCount": 50,
        "candidatesTokenCount": 70,
        "thoughtsTokenCount": 400,
        "totalTokenCount": 1_520,
    }
    chunk = b"data: " + orjson.dumps({"candidates": [], "usageMetadata": metadata}) + b"\r\n\r\n"
    assert usage_of([chunk], GeminiDialect.usage_keys) == Usage(input_tokens=1_050, output_tokens=470)
