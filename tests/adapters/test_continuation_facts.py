"""Each adapter's continuation facts: a typed model whose JSON is the replay's continuation.json, the shape
older replays wrote still loading (compare forks read it back), a malformed file a one-line error (no Docker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from replayer import adapters
from replayer.adapters.base import Continuation
from replayer.floor.errors import BadInput

OLD_SHAPES: dict[str, dict[str, Any]] = {
    # as the first versions wrote them (later keys have defaults that keep their old behaviour)
    "claude_code": {"session_id": "s-1", "prefix_last_was_string": True},
    "codex": {"rollout": ".codex/sessions/2025/01/01/rollout-x.jsonl", "thread_id": "t-1"},
    "mini_swe_agent": {"api_calls": 3, "format": "mini-swe-agent-1.1", "instance_cost": 0.0},
    "opencode": {"model": "openai/gpt-4o-mini", "session_id": "ses_1"},
    "pi": {"model": "openai/gpt-4o-mini", "session_file": ".pi/agent/sessions/x/s.jsonl"},
    "gemini_cli": {"session_file": ".gemini/tmp/ws/chats/session-x.jsonl", "session_id": "g-1"},
    "openhands": {"conversation": ".openhands/conversations/c1"},
    "openhands_v0": {},
}


def test_every_adapter_declares_a_frozen_continuation_model() -> None:
    assert set(OLD_SHAPES) == set(adapters.REGISTRY)
    for name in adapters.REGISTRY:
        model = adapters.by_name(name).continuation_type
        assert issubclass(model, Continuation) and model.model_config.get("frozen"), name


@pytest.mark.parametrize("name", list(OLD_SHAPES))
def test_an_old_continuation_file_loads_and_keeps_its_shape(name: str, tmp_path: Path) -> None:
    path = tmp_path / "continuation.json"
    path.write_bytes(orjson.dumps(OLD_SHAPES[name]))
    facts = adapters.by_name(name).load_continuation(path)
    dumped = facts.model_dump(mode="json")
    assert {k: dumped[k] for k in OLD_SHAPES[name]} == OLD_SHAPES[name]


def test_defaults_of_later_keys_keep_the_old_behaviour(tmp_path: Path) -> None:
    path = tmp_path / "continuation.json"
    path.write_bytes(orjson.dumps(OLD_SHAPES["codex"]))
    codex = adapters.by_name("codex").load_continuation(path)
    assert (codex.instructions_form, codex.instructions, codex.outputs_rendered) == (False, None, True)
    path.write_bytes(orjson.dumps(OLD_SHAPES["claude_code"]))
    assert adapters.by_name("claude_code").load_continuation(path).background_calls == []


@pytest.mark.parametrize(
    ("content", "says"),
    [
        (b"{not json", "file: Invalid JSON"),
        (b'{"session_file": 3, "model": "a/b"}', "session_file: Input should be a valid string"),
        (b'{"model": "a/b"}', "session_file: Field required"),
        (b'{"session_file": "s", "model": "a/b", "extra": 1}', "extra: Extra inputs are not permitted"),
        (b"[]", "file: Input should be an object"),
    ],
)
def test_a_malformed_continuation_file_is_a_one_line_error(tmp_path: Path, content: bytes, says: str) -> None:
    path = tmp_path / "continuation.json"
    path.write_bytes(content)
    with pytest.raises(BadInput) as caught:
        adapters.by_name("pi").load_continuation(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{path}: not pi's continuation: ")
    assert says in message, message


def test_a_missing_continuation_file_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match=r"^cannot read .*continuation\.json: No such file or directory$"):
        adapters.by_name("codex").load_continuation(tmp_path / "continuation.json")
