"""Mutated real OpenHands recordings (a V1 conversation directory, one file mutated per example; a V0
event list): the parsers and `detect` either succeed or refuse with a bounded one-line `BadInput`."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from replayer import adapters
from replayer.adapters.openhands import OpenHandsAdapter
from replayer.adapters.openhands.v0_adapter import OpenHandsV0Adapter
from replayer.floor.errors import BadInput
from tests.conftest import OPENHANDS
from tests.fuzzing import FUZZ_SETTINGS, copy_tree, expect_refusal_or_success, mutated_file

FIXTURES = OPENHANDS.root
CONVERSATION = FIXTURES / "v1" / "conversation"
V1_FILES = ["base_state.json"] + sorted(
    f"events/{p.name}" for p in (CONVERSATION / "events").glob("event-*.json")
)
V0 = FIXTURES / "v0" / "trajectory.json"


@FUZZ_SETTINGS
@given(data=st.data())
def test_a_conversation_with_a_mutated_file_is_parsed_or_refused(tmp_path: Path, data: st.DataObject) -> None:
    conv = copy_tree(CONVERSATION, tmp_path / "conv")  # every example starts from the real files again
    name = data.draw(st.sampled_from(V1_FILES))
    (conv / name).write_bytes(data.draw(mutated_file((CONVERSATION / name).read_bytes())))
    expect_refusal_or_success(lambda: OpenHandsAdapter().parse(conv))
    expect_refusal_or_success(lambda: adapters.detect(conv))


@FUZZ_SETTINGS
@given(data=st.data())
def test_a_mutated_v0_event_list_is_parsed_or_refused(tmp_path: Path, data: st.DataObject) -> None:
    path = tmp_path / "trajectory.json"
    path.write_bytes(data.draw(mutated_file(V0.read_bytes())))
    expect_refusal_or_success(lambda: OpenHandsV0Adapter().parse(path))
    expect_refusal_or_success(lambda: adapters.detect(path))


def _v0_refusal(tmp_path: Path, events: list[dict]) -> str:
    path = tmp_path / "trajectory.json"
    path.write_bytes(orjson.dumps(events))
    with pytest.raises(BadInput) as caught:
        OpenHandsV0Adapter().parse(path)
    message = str(caught.value)
    assert str(path) in message and "\n" not in message and len(message) < 600
    return message


def test_a_v0_observation_kind_that_is_a_dict_is_refused_with_its_place(tmp_path: Path) -> None:
    events = orjson.loads(V0.read_bytes())
    events[5]["observation"] = {"kind": "run"}
    message = _v0_refusal(tmp_path, events)
    assert "event 5" in message and "observation" in message


def test_v0_extras_of_the_wrong_type_are_refused_with_the_field(tmp_path: Path) -> None:
    events = orjson.loads(V0.read_bytes())
    events[5]["extras"] = ["x" * 100_000]
    message = _v0_refusal(tmp_path, events)
    assert "event 5" in message and "extras" in message and len(message) < 400


def _v1_refusal(conv: Path) -> str:
    with pytest.raises(BadInput) as caught:
        OpenHandsAdapter().parse(conv)
    message = str(caught.value)
    assert "\n" not in message and len(message) < 600
    return message


def test_a_v1_observation_that_is_no_object_is_refused_with_its_file_and_field(tmp_path: Path) -> None:
    conv = copy_tree(CONVERSATION, tmp_path / "conv")
    event_file = next((conv / "events").glob("event-00004-*.json"))
    event = orjson.loads(event_file.read_bytes())
    event["observation"] = "not an object"
    event_file.write_bytes(orjson.dumps(event))
    message = _v1_refusal(conv)
    assert event_file.name in message and "observation" in message


def test_a_v1_action_without_tool_call_id_is_refused_with_its_file(tmp_path: Path) -> None:
    conv = copy_tree(CONVERSATION, tmp_path / "conv")
    event_file = next((conv / "events").glob("event-00002-*.json"))
    event = orjson.loads(event_file.read_bytes())
    del event["tool_call_id"]
    event_file.write_bytes(orjson.dumps(event))
    message = _v1_refusal(conv)
    assert event_file.name in message and "tool_call_id" in message


def test_a_v1_base_state_with_a_wrong_workspace_names_the_field(tmp_path: Path) -> None:
    conv = copy_tree(CONVERSATION, tmp_path / "conv")
    base = orjson.loads((conv / "base_state.json").read_bytes())
    base["workspace"] = {"working_dir": 7}
    (conv / "base_state.json").write_bytes(orjson.dumps(base))
    message = _v1_refusal(conv)
    assert "base_state.json" in message and "workspace.working_dir" in message


@pytest.mark.timeout(20)
def test_a_fifo_as_an_event_file_is_refused_without_blocking(tmp_path: Path) -> None:
    conv = copy_tree(CONVERSATION, tmp_path / "conv")
    event_file = next((conv / "events").glob("event-00003-*.json"))
    event_file.unlink()
    os.mkfifo(event_file)
    message = _v1_refusal(conv)
    assert event_file.name in message and "FIFO" in message


@pytest.mark.timeout(20)
def test_a_fifo_as_the_base_state_or_a_v0_file_is_refused_without_blocking(tmp_path: Path) -> None:
    conv = copy_tree(CONVERSATION, tmp_path / "conv")
    (conv / "base_state.json").unlink()
    os.mkfifo(conv / "base_state.json")
    assert "FIFO" in _v1_refusal(conv)
    os.mkfifo(tmp_path / "trajectory.json")
    with pytest.raises(BadInput, match="FIFO"):
        OpenHandsV0Adapter().parse(tmp_path / "trajectory.json")


@pytest.mark.timeout(20)
def test_an_event_file_linked_to_a_device_is_refused(tmp_path: Path) -> None:
    conv = copy_tree(CONVERSATION, tmp_path / "conv")
    event_file = next((conv / "events").glob("event-00003-*.json"))
    event_file.unlink()
    event_file.symlink_to("/dev/zero")
    message = _v1_refusal(conv)
    assert event_file.name in message and "is a link" in message  # not followed: the device is never opened


def test_a_conversation_without_events_is_refused(tmp_path: Path) -> None:
    conv = copy_tree(CONVERSATION, tmp_path / "conv")
    for p in (conv / "events").iterdir():
        p.unlink()
    (conv / "events").rmdir()
    assert "events" in _v1_refusal(conv)
