"""A real key cannot lose to a loop: a continuation that sends the same request again after the same answer
`limit` rounds in a row is held by the bridge and ends as `loop` (bridges/loop.py, pure; then its hook)."""

from __future__ import annotations

from pathlib import Path

import orjson

from replayer.bridges import loop
from tests.bridges.conftest import CHAT, Held, scripted_bridge, send


def _chat(*contents: str) -> bytes:
    messages = [{"role": "user", "content": "go"}, *({"role": "assistant", "content": c} for c in contents)]
    return orjson.dumps({"model": "m", "messages": messages, "tools": [{"name": "bash"}]})


def _answer(n: int, text: str = "Done.") -> bytes:
    """A streamed answer as an upstream sends it: its own id, time and usage each time."""
    return f'data: {{"id":"chatcmpl-{n}x9","created":{1700000000 + n},"text":"{text}","usage":{n * 7}}}\n'.encode()


def _rounds(requests: list[bytes], answers: list[bytes]) -> loop.Rounds:
    rounds = loop.Rounds()
    for request, answer in zip(requests, answers, strict=True):
        rounds = rounds.sent(request).answered(answer)
    return rounds


def test_a_transcript_growing_by_the_same_answer_each_round_repeats() -> None:
    """OpenCode after its ids wrapped: each round the CLI sends the transcript again with the model's last
    answer appended, and the model says the same."""
    requests = [_chat(*["Finished."] * n) for n in range(8)]
    rounds = loop.Rounds()
    seen = []
    for n, request in enumerate(requests):
        rounds = rounds.sent(request)
        seen.append(rounds.repeats)
        rounds = rounds.answered(_answer(n, "Finished."))
    assert seen == [0, 0, 1, 2, 3, 4, 5, 6], "the second round is the first seen whole, each after repeats it"
    assert rounds.looping(loop.DEFAULT_LIMIT) and not _rounds(requests[:6], [_answer(0)] * 6).looping(5)


def test_the_same_request_sent_again_after_the_same_answer_repeats() -> None:
    same = _chat("a")
    assert _rounds([same] * 4, [_answer(n) for n in range(4)]).repeats == 2


def test_rounds_that_differ_do_not_repeat() -> None:
    """A working agent: each round adds another tool result, or the model answers something else."""
    working = [_chat(*[f"step {i}" for i in range(n)]) for n in range(8)]
    assert _rounds(working, [_answer(n) for n in range(8)]).repeats == 0
    same = [_chat(*["Finished."] * n) for n in range(8)]
    answers = [_answer(n, "Finished." if n % 2 else "Something else.") for n in range(8)]
    assert _rounds(same, answers).repeats == 0
    assert _rounds(same, [_answer(0)] * 7 + [b"x" * (loop.MAX_ANSWER_BYTES + 1)]).repeats == 6
    unreadable = _rounds(same[:4], [_answer(0)] * 4).answered(None).sent(same[4])
    assert unreadable.repeats == 0, "an answer not read whole starts the count again"


def test_the_bridge_holds_the_request_that_loops(tmp_path: Path) -> None:
    """The scripted upstream says "Done." every time; the agent sends the same request again: the request
    after `loop_limit` repeats is held, never forwarded, and the bridge says why."""
    with scripted_bridge(tmp_path, loop_limit=2) as on:
        for _ in range(3):
            assert send(on.unix, "POST", CHAT, on.main)[0] == 200
        fourth = Held(on)
        assert on.bridge.budget == "loop"
    assert fourth.answer()[0] == 503 and len(on.upstream.log) == 3
    [refusal] = on.bridge.refusals
    assert refusal.reason == "loop" and "the same request after the same answer 2 times" in refusal.detail
