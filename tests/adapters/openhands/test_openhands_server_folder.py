"""The OpenHands agent server's folder of a conversation, `<id>/event_service/{base_state.json,events/}`
(issue 35 item 6): `inspect` and `run` take the `<id>` folder as they take the SDK's conversation folder,
read without following a link. The conversation is the real V1 SDK one of the field corpus (SOURCES.md),
nested where the agent server keeps it. No Docker."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson

from replayer.adapters import detect
from replayer.adapters.openhands import session as conversation
from tests.conftest import ROOT, replayer

REAL = ROOT / "tests" / "fixtures" / "field" / "openhands" / "v1-sdk-gpt4omini-pwd"
CONVERSATION_ID = "cd94562403b9487ebdd4018e3f531dfd"


def server_folder(tmp_path: Path, source: Path = REAL) -> Path:
    """`source` where the agent server stores it: `<conversations>/<id hex>/event_service/`."""
    folder = tmp_path / CONVERSATION_ID
    shutil.copytree(source, folder / "event_service")
    return folder


def test_the_server_folder_is_the_conversation(tmp_path: Path) -> None:
    folder = server_folder(tmp_path)
    assert detect(folder).name == "openhands"
    nested, plain = conversation.parse(folder), conversation.parse(REAL)
    assert nested.steps == plain.steps and nested.session_id == plain.session_id
    assert nested.source == str(folder) and nested.source_sha256 == plain.source_sha256
    listed = orjson.loads(replayer("inspect", str(folder), "--json", check=True).stdout)
    assert [c["tool"] for s in listed["steps"] for c in s["calls"]] == ["terminal", "finish"]


def test_a_linked_event_service_folder_is_not_followed(tmp_path: Path) -> None:
    folder = tmp_path / CONVERSATION_ID
    folder.mkdir()
    (folder / "event_service").symlink_to(REAL)
    proc = replayer("inspect", str(folder))
    assert proc.returncode == 3 and "not a trajectory of a known agent" in proc.stderr


def test_a_linked_base_state_is_not_followed(tmp_path: Path) -> None:
    folder = server_folder(tmp_path)
    (folder / "event_service" / "base_state.json").unlink()
    (folder / "event_service" / "base_state.json").symlink_to(REAL / "base_state.json")
    assert replayer("inspect", str(folder)).returncode == 3


def test_a_linked_events_folder_is_refused(tmp_path: Path) -> None:
    folder = server_folder(tmp_path)
    shutil.rmtree(folder / "event_service" / "events")
    (folder / "event_service" / "events").symlink_to(REAL / "events")
    proc = replayer("inspect", str(folder))
    assert proc.returncode == 3 and "no events directory" in proc.stderr
