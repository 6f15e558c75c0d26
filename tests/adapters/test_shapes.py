"""The record checks validate first by each model's plain-Python check (`shapes.fits`, `record_checks`) and
refuse only what the models refuse: on recorded records and on mutations of them, what fits is valid, and
`check` refuses exactly the invalid."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, model_validator

from replayer.adapters.mini_swe_agent.session import _Message
from replayer.adapters.opencode import schema as opencode
from replayer.adapters.openhands.session import _EVENT_MODELS, _Event
from replayer.adapters.openhands.v0 import _V0Event
from replayer.adapters.pi import schema as pi
from replayer.adapters.record_checks import record_check
from replayer.adapters.shapes import MAX_DEPTH, check, fits, loads_within, too_deep
from replayer.floor.errors import BadInput
from tests.fuzzing import FUZZ_SETTINGS, mutated_json

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


def _pi() -> list[tuple[Any, Any]]:
    lines = (FIXTURES / "pi" / "tools" / "session.jsonl").read_bytes().splitlines()
    entries = [orjson.loads(line) for line in lines][1:]
    pairs: list[tuple[Any, Any]] = [(pi.ENTRIES.get(e["type"], pi.Entry), e) for e in entries]
    messages = [e["message"] for e in entries if e["type"] == "message"]
    whole = [(pi.MessageEntry, e) for e in entries if e["type"] == "message"]
    return pairs + whole + [(pi.MESSAGES.get(m["role"], pi.Message), m) for m in messages]


def _opencode() -> list[tuple[Any, Any]]:
    export = orjson.loads((FIXTURES / "opencode" / "tools" / "export.json").read_bytes())
    return [(opencode.Session, export["info"])] + [(opencode.Message, m) for m in export["messages"]]


def _mini() -> list[tuple[Any, Any]]:
    doc = orjson.loads((FIXTURES / "mini_swe_agent" / "toolcall" / "trajectory.traj.json").read_bytes())
    return [(_Message, m) for m in doc["messages"]]


def _openhands_v0() -> list[tuple[Any, Any]]:
    events = orjson.loads((FIXTURES / "openhands" / "v0" / "trajectory.json").read_bytes())
    return [(_V0Event, e) for e in events]


def _openhands() -> list[tuple[Any, Any]]:
    files = sorted((FIXTURES / "openhands" / "v1" / "conversation" / "events").glob("event-*.json"))
    events = [orjson.loads(f.read_bytes()) for f in files]
    return [(_EVENT_MODELS.get(e["kind"], _Event), e) for e in events]


RECORDS = _pi() + _opencode() + _mini() + _openhands_v0() + _openhands()


def _valid(model: Any, value: Any) -> bool:
    try:
        TypeAdapter(model).validate_python(value)
    except ValidationError:
        return False
    return True


def test_recorded_records_fit() -> None:
    assert all(fits(model, value) for model, value in RECORDS)


@FUZZ_SETTINGS
@given(data=st.data())
def test_what_fits_is_what_the_models_accept(data: st.DataObject) -> None:
    """A value with a tag no member names (an "other" member's) does not fit, and the model decides."""
    model, value = data.draw(st.sampled_from(RECORDS))
    mutated = data.draw(mutated_json(value))
    assume(not too_deep(mutated, MAX_DEPTH))  # refused by every parser before its fields are checked
    valid = _valid(model, mutated)
    assert valid or not fits(model, mutated)
    try:
        check(model, mutated, "file", "record")
    except BadInput:
        assert not valid
    else:
        assert valid


def test_every_record_kind_has_a_check_and_its_records_pass_it() -> None:
    """The plain check is what `fits` tries first: a kind without one is checked by the model alone, as
    many times slower as it copies every object."""
    for model, value in RECORDS:
        checked = record_check(model)
        assert checked is not None, model
        assert checked(value), (model, value)


@FUZZ_SETTINGS
@given(data=st.data())
def test_the_plain_check_accepts_only_what_the_model_accepts(data: st.DataObject) -> None:
    model, value = data.draw(st.sampled_from(RECORDS))
    mutated = data.draw(mutated_json(value))
    checked = record_check(model)
    assert checked is not None
    if checked(mutated):
        TypeAdapter(model).validate_python(mutated)


def test_refusal_names_the_field_as_the_model_does() -> None:
    message = dict(next(v for m, v in RECORDS if m is opencode.Message))
    message["info"] = {**message["info"], "id": "nope"}
    with pytest.raises(BadInput, match=r"message 3, field info.id: should be an id starting with 'msg'"):
        check(opencode.Message, message, "export.json", "message 3")


class _Checked(BaseModel):
    text: str | None = None

    @model_validator(mode="after")
    def _has_text(self) -> _Checked:
        if self.text is None:
            raise ValueError("no text")
        return self


def test_a_model_with_its_own_validator_is_never_read_as_a_typed_dict() -> None:
    """Its validator runs on the instance: only the model checks it."""
    assert not fits(_Checked, {})
    assert not fits(_Checked, {"text": "a"})  # not a refusal: the model decides
    check(_Checked, {"text": "a"}, "file", "record")
    with pytest.raises(BadInput, match="no text"):
        check(_Checked, {}, "file", "record")


class _Outer(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    name: str
    inner: _Checked | None = None


def test_a_model_with_its_own_validator_inside_a_record_is_checked_by_that_model() -> None:
    """The record's other fields are checked in plain Python; the field's model runs its own code."""
    assert fits(_Outer, {"name": "a", "inner": {"text": "b"}})
    assert fits(_Outer, {"name": "a"})
    assert not fits(_Outer, {"name": "a", "inner": {}})
    assert not fits(_Outer, {"name": 1, "inner": {"text": "b"}})


def _told_as_load_then_walk(text: bytes) -> None:
    """`loads_within` raises where the load alone refuses `text`, else tells its value and a walk's verdict."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        with pytest.raises(orjson.JSONDecodeError):
            loads_within(text, MAX_DEPTH)
        return
    assert loads_within(text, MAX_DEPTH) == (value, too_deep(value, MAX_DEPTH))


@FUZZ_SETTINGS
@given(
    record=st.sampled_from(RECORDS),
    depth=st.integers(0, 1100),
    opener=st.sampled_from([b"[", b'{"k":']),
    damage=st.sampled_from([b"", b"]", b"],[", b",", b"}", b"1],[2", b"]" * 30]),
    at=st.floats(0, 1),
    padded=st.booleans(),
)
def test_loads_within_tells_what_a_load_then_a_walk_tell(
    record: tuple[Any, Any], depth: int, opener: bytes, damage: bytes, at: float, padded: bool
) -> None:
    """The nesting told by the wrapped load, for records nested around and damaged anywhere, small and past
    the size from which brackets are no longer counted first."""
    closer = b"]" if opener == b"[" else b"}"
    text = opener * depth + orjson.dumps(record[1]) + closer * depth
    cut = int(at * len(text))
    text = text[:cut] + damage + text[cut:]
    if padded:
        text = b" " * 70_000 + text
    _told_as_load_then_walk(text)


@pytest.mark.parametrize(
    "text",
    [
        b"1],[2",
        b"[1]],[[2]",
        b'{"a":1}],[{"b":2}',
        b"",
        b" ",
        b"]",
        b"[" * 100 + b"]" * 100,
        b"[" * 101 + b"]" * 101,
    ],
)
@pytest.mark.parametrize("padded", [False, True])
def test_loads_within_is_not_fooled_by_a_text_that_closes_its_wrapping(text: bytes, padded: bool) -> None:
    text = b" " * 70_000 + text if padded else text
    _told_as_load_then_walk(text)
