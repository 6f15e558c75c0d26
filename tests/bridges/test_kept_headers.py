"""Which answer headers a cassette keeps: the common ones, and those the agent's adapter declares its CLI
reads (Codex's `x-codex-*`); never a cookie. No Docker."""

from __future__ import annotations

from replayer.adapters import by_name
from replayer.bridges.playback import kept_headers

ANSWER = {
    "Content-Type": "text/event-stream",
    "X-Codex-Turn-State": "state-1",
    "Set-Cookie": "session=secret",
    "X-Request-Id": "req_1",
}


def test_the_common_headers_are_kept_and_no_cookie() -> None:
    assert kept_headers(ANSWER) == {"content-type": "text/event-stream", "x-request-id": "req_1"}


def test_an_agent_keeps_the_headers_its_cli_reads() -> None:
    codex = kept_headers(ANSWER, by_name("codex").kept_answer_headers)
    assert codex["x-codex-turn-state"] == "state-1" and "set-cookie" not in codex
    assert "x-codex-turn-state" not in kept_headers(ANSWER, by_name("claude_code").kept_answer_headers)
