"""OpenCode's time-based ids wrapped on 2026-08-14 (48 bits of `ms * 4096`): the rebuild moves a recorded
prefix's message and part ids before now, order and spacing kept, every reference with them."""

from __future__ import annotations

import copy

import orjson

from replayer.adapters.opencode import ids
from tests.conftest import OPENCODE

WRAP_MS = 26 * (1 << 36)  # 2026-08-14T11:19:55Z: `ms * 4096` passed 2^48 for the 26th time
BEFORE = WRAP_MS - 3_600_000  # an hour before the wrap
AFTER = WRAP_MS + 10 * 86_400_000  # ten days after


def _minted(ms: int, counter: int = 1, prefix: str = "msg") -> str:
    """An id as the CLI's `Identifier.create` makes it at `ms`."""
    return f"{prefix}_{(ms * 4096 + counter) % (1 << 48):012x}" + "A" * 14


def _document(t0: int) -> dict:
    user, assistant = _minted(t0), _minted(t0 + 5000)
    return {
        "info": {"id": "ses_1", "revert": {"messageID": assistant, "partID": _minted(t0 + 5001, 2, "prt")}},
        "messages": [
            {
                "info": {"id": user, "role": "user", "sessionID": "ses_1"},
                "parts": [{"id": _minted(t0, 2, "prt"), "messageID": user, "type": "text", "text": user}],
            },
            {
                "info": {"id": assistant, "role": "assistant", "parentID": user},
                "parts": [
                    {"id": _minted(t0 + 5001, 1, "prt"), "messageID": assistant, "type": "step-start"},
                    {"id": _minted(t0 + 5001, 2, "prt"), "messageID": assistant, "type": "tool"},
                ],
            },
        ],
    }


def test_ids_recorded_before_the_wrap_sort_after_those_minted_now_until_moved() -> None:
    document = _document(BEFORE)
    assert _minted(AFTER) < document["messages"][-1]["info"]["id"], "the wrap: the new id sorts first"
    before = copy.deepcopy(document)
    moved = ids.move_before_now(document, AFTER)
    assert len(moved) == 5
    new_ids = ids.referenced(document["messages"])
    assert all(i[4:] < _minted(AFTER)[4:] for i in new_ids), "every recorded id sorts before one minted now"
    user, assistant = (m["info"] for m in document["messages"])
    assert user["id"] < assistant["id"] and assistant["parentID"] == user["id"]
    parts = document["messages"][1]["parts"]
    assert parts[0]["id"] < parts[1]["id"] and {p["messageID"] for p in parts} == {assistant["id"]}
    assert document["info"]["revert"] == {"messageID": assistant["id"], "partID": parts[1]["id"]}
    assert document["messages"][0]["parts"][0]["text"] == user["id"], "a string equal to an id is the id"
    pairs = list(zip(new_ids, ids.referenced(before["messages"]), strict=True))
    spacing = {int(new[4:16], 16) - int(old[4:16], 16) for new, old in pairs}
    assert len(spacing) == 1 and spacing.pop() % 4096 == 0, "shifted by whole milliseconds"
    assert all(new[16:] == old[16:] for new, old in pairs), "their random part kept"


def test_ids_already_before_now_are_kept() -> None:
    document = _document(AFTER - 60_000)
    assert ids.move_before_now(document, AFTER) == {} and document == _document(AFTER - 60_000)


def test_a_prefix_longer_than_the_time_since_the_wrap_is_numbered_densely_in_order() -> None:
    document = _document(WRAP_MS - 86_400_000)
    document["messages"][1]["info"]["id"] = _minted(WRAP_MS - 1000)
    moved = ids.moves(ids.referenced(document["messages"]), WRAP_MS + 1000)  # a second after the wrap
    assert moved and all(new[4:] < _minted(WRAP_MS + 1000)[4:] for new in moved.values())
    assert sorted(moved, key=lambda i: moved[i][4:16]) == sorted(moved, key=lambda i: i[4:16])


def test_a_recorded_export_is_moved_before_now() -> None:
    document = orjson.loads((OPENCODE.fixture("tools") / "export.json").read_bytes())
    ids.move_before_now(document, AFTER)
    referenced = ids.referenced(document["messages"])
    assert all(i[4:] < _minted(AFTER)[4:] for i in referenced)
    known = set(referenced)
    assert all(p["messageID"] == m["info"]["id"] for m in document["messages"] for p in m["parts"])
    assert all(m["info"].get("parentID", referenced[0]) in known for m in document["messages"])
