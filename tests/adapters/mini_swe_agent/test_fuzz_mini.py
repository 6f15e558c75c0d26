"""Mutated real mini-swe-agent `.traj.json` files: the parser and `detect` either succeed or refuse
with a bounded one-line `BadInput`, never crash (see tests/fuzzing.py)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replayer import adapters
from replayer.adapters.mini_swe_agent import MiniSweAgentAdapter
from replayer.floor.errors import BadInput
from tests.conftest import MINI
from tests.fuzzing import FUZZ_SETTINGS, expect_refusal_or_success, mutated_file

TRAJECTORIES = sorted(MINI.root.glob("*/*.traj.json"))


@pytest.mark.parametrize("original", TRAJECTORIES, ids=lambda p: p.parent.name)
@FUZZ_SETTINGS
@given(data=st.data())
def test_a_mutated_trajectory_is_parsed_or_refused(
    original: Path, tmp_path: Path, data: st.DataObject
) -> None:
    path = tmp_path / original.name
    path.write_bytes(data.draw(mutated_file(original.read_bytes())))
    expect_refusal_or_success(lambda: MiniSweAgentAdapter().parse(path))
    expect_refusal_or_success(lambda: adapters.detect(path))


TOOLCALL = MINI.root / "toolcall" / "trajectory.traj.json"


def _refusal(tmp_path: Path, doc: object) -> str:
    path = tmp_path / "variant.traj.json"
    path.write_bytes(orjson.dumps(doc))
    with pytest.raises(BadInput) as caught:
        MiniSweAgentAdapter().parse(path)
    message = str(caught.value)
    assert str(path) in message and "\n" not in message and len(message) < 600
    return message


def test_a_message_of_the_wrong_type_is_refused_with_its_index(tmp_path: Path) -> None:
    doc = orjson.loads(TOOLCALL.read_bytes())
    doc["messages"][3] = ["not", "a", "message"]
    assert "message 3" in _refusal(tmp_path, doc)


def test_an_action_command_of_the_wrong_type_names_the_field(tmp_path: Path) -> None:
    doc = orjson.loads(TOOLCALL.read_bytes())
    doc["messages"][2]["extra"]["actions"][0]["command"] = {"x": 1}
    message = _refusal(tmp_path, doc)
    assert "message 2" in message and "extra.actions[0].command" in message


def test_observation_content_of_the_wrong_type_names_the_field(tmp_path: Path) -> None:
    doc = orjson.loads(TOOLCALL.read_bytes())
    doc["messages"][3]["content"] = [1, 2]
    message = _refusal(tmp_path, doc)
    assert "message 3" in message and "content" in message


def test_a_huge_value_is_quoted_in_a_bounded_excerpt(tmp_path: Path) -> None:
    doc = orjson.loads(TOOLCALL.read_bytes())
    doc["messages"][2]["extra"]["actions"][0]["tool_call_id"] = ["y" * 100_000]
    assert len(_refusal(tmp_path, doc)) < 400


def test_a_1x_action_regex_that_does_not_compile_names_the_field(tmp_path: Path) -> None:
    doc = orjson.loads((MINI.root / "v1" / "trajectory.traj.json").read_bytes())
    doc["info"]["config"]["agent"]["action_regex"] = "```bash(("
    assert "field info.config.agent.action_regex" in _refusal(tmp_path, doc)


def test_deep_nesting_is_refused_with_where_it_starts(tmp_path: Path) -> None:
    doc = orjson.loads(TOOLCALL.read_bytes())
    deep: object = "deep"
    for _ in range(200):
        deep = [deep]
    doc["messages"][3]["extra"] = {"nested": deep}
    message = _refusal(tmp_path, doc)
    assert "messages[3].extra" in message and "nested more than" in message


@pytest.mark.timeout(20)
def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "fifo.traj.json"
    os.mkfifo(fifo)
    with pytest.raises(BadInput, match="FIFO"):
        MiniSweAgentAdapter().parse(fifo)
