"""OpenCode's server shapes: the body of `GET /session/{id}/message` and dumps of the SSE streams `GET /event`
and `GET /global/event`, recorded from the pinned `opencode serve` (tests/recorder_opencode.py --server)
together with the same session's `opencode export`. Each parses into the export's steps, prepares the same
prefix and rebuilt session, and a damaged one is refused in one line naming the line or field. No Docker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from replayer.adapters.opencode import session
from replayer.adapters.opencode.wire import to_wire
from replayer.floor.errors import BadInput
from tests.conftest import ROOT, replayer

SERVER = ROOT / "tests" / "fixtures" / "opencode" / "server"
API = SERVER / "api"
SHAPES = ("messages.json", "event.sse", "global-event.sse")
FORMS = {"messages.json": "messages", "event.sse": "stream", "global-event.sse": "stream"}


def _export() -> dict[str, Any]:
    return orjson.loads((API / "export.json").read_bytes())


def _steps(path: Path) -> list[tuple[str, bool, list[tuple[str, str, dict, str | None, bool | None]]]]:
    traj = session.parse(path)
    return [
        (
            s.message_id,
            s.complete,
            [
                (
                    c.id,
                    c.tool,
                    c.input,
                    c.historical and c.historical.content,
                    c.historical and c.historical.is_error,
                )
                for c in s.calls
            ],
        )
        for s in traj.steps
    ]


def _lines(name: str) -> list[bytes]:
    return (API / name).read_bytes().splitlines()


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data)
    return path


def _refusal(path: Path) -> str:
    with pytest.raises(BadInput) as caught:
        session.parse(path)
    message = str(caught.value)
    assert caught.value.exit_code == 3 and "\n" not in message
    return message


def _event_line(lines: list[bytes], kind: str, where: Any = lambda props: True) -> int:
    """The index of the first `data:` line of an event of `kind` whose properties satisfy `where`."""
    for i, line in enumerate(lines):
        if line.startswith(b"data:"):
            value = orjson.loads(line[5:])
            event = value.get("payload", value)
            if event.get("type") == kind and where(event["properties"]):
                return i
    raise AssertionError(f"no {kind} event")


def _data(event: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(event)


# the same session in every shape -------------------------------------------------------------------
@pytest.mark.parametrize("shape", SHAPES)
def test_each_shape_gives_the_steps_of_the_export(shape: str) -> None:
    expected = _steps(API / "export.json")
    assert len(expected) == 3 and all(complete for _, complete, _ in expected)
    assert _steps(API / shape) == expected
    traj = session.parse(API / shape)
    meta = orjson.loads((API / "meta.json").read_bytes())
    assert traj.session_id == meta["session_id"] and traj.cwd == "/testbed"
    assert traj.native_as(session.Native).form == FORMS[shape]
    assert traj.agent_version == (None if shape == "messages.json" else "1.18.33")  # the list names none


@pytest.mark.parametrize("shape", SHAPES)
def test_each_shape_holds_the_exported_messages(shape: str) -> None:
    native = session.parse(API / shape).native_as(session.Native)
    assert native.messages == _export()["messages"]
    if FORMS[shape] == "stream":  # session.updated carries the whole session record
        assert native.info == _export()["info"]


@pytest.mark.parametrize("shape", SHAPES)
def test_each_boundary_gives_the_prefix_of_the_export(shape: str) -> None:
    from replayer.adapters.opencode import _cut

    export = session.parse(API / "export.json").native_as(session.Native)
    other = session.parse(API / shape).native_as(session.Native)
    for after_step in range(len(export.step_messages) + 1):
        expected = to_wire(export.messages[: _cut(export, after_step)])
        assert to_wire(other.messages[: _cut(other, after_step)]) == expected, after_step


@pytest.mark.parametrize("shape", SHAPES)
def test_inspect_lists_the_steps_of_the_export(shape: str) -> None:
    def listed(path: Path) -> dict[str, Any]:
        report = orjson.loads(replayer("inspect", str(path), "--json", check=True).stdout)
        return {k: report[k] for k in ("agent", "session_id", "cwd", "steps")}

    assert listed(API / shape) == listed(API / "export.json")


@pytest.mark.docker  # an OpenCode import runs in a sandbox
def test_prepare_writes_the_session_and_prefix_of_the_export(tmp_path: Path) -> None:
    """At the last boundary, default settings: the prefix is the request the CLI sent right after it."""
    last = len(_steps(API / "export.json"))

    def prepared(name: str) -> tuple[dict[str, Any], bytes]:
        out = tmp_path / name
        replayer("prepare", str(API / name), "-n", str(last), "-o", str(out), "--json", check=True)
        assert (out / "native" / "home" / ".local" / "share" / "opencode" / "opencode.db").is_file()
        return orjson.loads((out / "native" / "export.json").read_bytes()), (
            out / "expected_prefix.json"
        ).read_bytes()

    before = {name: (API / name).read_bytes() for name in SHAPES}
    rebuilt, prefix = prepared("export.json")
    upstream = [orjson.loads(line) for line in (API / "upstream.jsonl").read_bytes().splitlines()]
    sent = [r["body"]["messages"][1:] for r in upstream if r["main_thread"]]
    assert orjson.loads(prefix) in sent
    for shape in SHAPES:
        other, other_prefix = prepared(shape)
        assert other_prefix == prefix, shape
        assert other["messages"] == rebuilt["messages"], shape
        if FORMS[shape] == "stream":
            assert other["info"] == rebuilt["info"], shape
        else:  # the list has no session record: its id and the assistant's cwd, the rest filled in
            assert {k: other["info"][k] for k in ("id", "directory")} == {
                k: rebuilt["info"][k] for k in ("id", "directory")
            }
    assert {name: (API / name).read_bytes() for name in SHAPES} == before


# the event stream's updates ---------------------------------------------------------------------
def test_a_text_streamed_in_deltas_is_rebuilt_without_its_final_update(tmp_path: Path) -> None:
    lines = _lines("event.sse")
    delta = orjson.loads(lines[_event_line(lines, "message.part.delta")][5:])["properties"]
    final = [
        i
        for i, line in enumerate(lines)
        if line.startswith(b"data:")
        and orjson.loads(line[5:])["type"] == "message.part.updated"
        and orjson.loads(line[5:])["properties"]["part"]["id"] == delta["partID"]
        and orjson.loads(line[5:])["properties"]["part"].get("text")
    ]
    assert final and delta["delta"]
    variant = [line for i, line in enumerate(lines) if i not in final]
    native = session.parse(_write(tmp_path, "event.sse", b"\n".join(variant))).native_as(session.Native)
    parts = {p["id"]: p for m in native.messages for p in m["parts"]}
    assert parts[delta["partID"]]["text"] == delta["delta"]


def test_a_removed_message_is_left_out(tmp_path: Path) -> None:
    lines = _lines("event.sse")
    last = _export()["messages"][-1]["info"]
    removed = {
        "type": "message.removed",
        "properties": {"sessionID": last["sessionID"], "messageID": last["id"]},
    }
    native = session.parse(_write(tmp_path, "event.sse", b"\n".join([*lines, _data(removed)]))).native_as(
        session.Native
    )
    assert native.messages == _export()["messages"][:-1]


# refusals -----------------------------------------------------------------------------------------
def test_a_damaged_message_of_the_list_is_named(tmp_path: Path) -> None:
    messages = orjson.loads((API / "messages.json").read_bytes())
    tool = next(p for p in messages[1]["parts"] if p["type"] == "tool")
    tool["state"]["status"] = "done"
    message = _refusal(_write(tmp_path, "messages.json", orjson.dumps(messages)))
    assert "message 1, field parts[" in message and "state" in message


def test_a_list_of_two_sessions_is_refused(tmp_path: Path) -> None:
    messages = orjson.loads((API / "messages.json").read_bytes())
    messages[-1]["info"]["sessionID"] = "ses_other"
    message = _refusal(_write(tmp_path, "messages.json", orjson.dumps(messages)))
    assert "holds 2 opencode sessions" in message


def test_a_page_of_the_session_is_refused(tmp_path: Path) -> None:
    messages = orjson.loads((API / "messages.json").read_bytes())
    message = _refusal(_write(tmp_path, "messages.json", orjson.dumps(messages[1:])))
    assert f"message {messages[1]['info']['id']} answers {messages[0]['info']['id']}" in message
    assert "not the whole session" in message


@pytest.mark.parametrize("shape", ["event.sse", "global-event.sse"])
def test_a_damaged_stream_line_is_named(shape: str, tmp_path: Path) -> None:
    lines = _lines(shape)
    at = _event_line(lines, "message.part.updated", lambda props: props["part"]["type"] == "tool")
    cut = [*lines[:at], lines[at][:60], *lines[at + 1 :]]
    assert f"line {at + 1} is not JSON" in _refusal(_write(tmp_path, shape, b"\n".join(cut)))

    value = orjson.loads(lines[at][5:])
    event = value.get("payload", value)
    del event["properties"]["part"]["messageID"]
    field = "payload.properties" if "payload" in value else "properties"
    damaged = [*lines[:at], _data(value), *lines[at + 1 :]]
    message = _refusal(_write(tmp_path, shape, b"\n".join(damaged)))
    assert f"line {at + 1}, field {field}.part.messageID: missing" in message


def test_a_stream_of_two_sessions_is_refused(tmp_path: Path) -> None:
    lines = _lines("event.sse")
    session_id = _export()["info"]["id"]
    other = [line.replace(session_id.encode(), b"ses_otherSessionOfTheDump") for line in lines]
    other = [line.replace(b'"msg_', b'"msg_x').replace(b'"prt_', b'"prt_x') for line in other]
    message = _refusal(_write(tmp_path, "event.sse", b"\n".join([*lines, *other])))
    assert "holds 2 opencode sessions" in message


TWO = SERVER / "two"


@pytest.mark.parametrize("shape", ["event.sse", "global-event.sse"])
def test_a_stream_of_two_sessions_is_split_into_their_exports(shape: str) -> None:
    """A real dump of two sessions one after the other on one server: each selected by --session is the
    session its own export holds, at every boundary."""
    from replayer.adapters.opencode import _cut
    from replayer.pipeline.engine import load
    from replayer.pipeline.multisession import held

    meta = orjson.loads((TWO / "meta.json").read_bytes())
    listed = held(TWO / shape)
    assert [(s.id, s.first_prompt) for s in listed] == list(
        zip(meta["session_ids"], meta["prompts"], strict=True)
    )
    for n, session_id in enumerate(meta["session_ids"], 1):
        export = session.parse(TWO / f"export-{n}.json").native_as(session.Native)
        traj = load(TWO / shape, session=session_id)[1]
        assert (traj.session_id, traj.source, traj.native_as(session.Native).messages) == (
            session_id,
            str(TWO / shape),
            export.messages,
        )
        for after_step in range(len(export.step_messages) + 1):
            expected = to_wire(export.messages[: _cut(export, after_step)])
            assert (
                to_wire(
                    traj.native_as(session.Native).messages[
                        : _cut(traj.native_as(session.Native), after_step)
                    ]
                )
                == expected
            )


@pytest.mark.docker  # an OpenCode import runs in a sandbox
def test_the_cli_lists_and_selects_the_sessions_of_a_stream(tmp_path: Path) -> None:
    meta = orjson.loads((TWO / "meta.json").read_bytes())
    report = orjson.loads(replayer("inspect", str(TWO / "event.sse"), "--json", check=True).stdout)
    assert [s["id"] for s in report["sessions"]] == meta["session_ids"] and report["steps"] == []
    refused = replayer("prepare", str(TWO / "event.sse"), "-n", "1", "-o", str(tmp_path / "o"))
    assert refused.returncode == 3 and "holds 2 sessions: pass --session ID" in refused.stderr
    second = meta["session_ids"][1]
    out = tmp_path / "second"
    replayer("prepare", str(TWO / "event.sse"), "-n", "1", "--session", second, "-o", str(out), check=True)
    assert orjson.loads((out / "result.json").read_bytes())["session_id"] == second


def test_a_stream_dumped_after_the_first_prompt_is_refused() -> None:
    """A real dump: /global/event subscribed after the prompt's part was written (an early recording)."""
    message = _refusal(SERVER / "late" / "global-event.sse")
    assert "user message msg_" in message and "has no part in the stream" in message


def test_a_line_that_is_no_event_line_is_named(tmp_path: Path) -> None:
    lines = _lines("event.sse")
    variant = [*lines[:4], b"HTTP/1.1 200 OK", *lines[4:]]
    assert "line 5 is no server-sent-events line" in _refusal(
        _write(tmp_path, "event.sse", b"\n".join(variant))
    )


@pytest.mark.parametrize("shape", ["messages.json", "event.sse"])
def test_the_cli_refuses_a_damaged_shape_in_one_line(shape: str, tmp_path: Path) -> None:
    data = (API / shape).read_bytes()
    damaged = data.replace(b'"role":"user"', b'"role":"robot"', 1)
    proc = replayer("inspect", str(_write(tmp_path, shape, damaged)))
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith("replayer: bad_input: ") and len(proc.stderr.strip().splitlines()) == 1
    assert ("message 0" if shape == "messages.json" else "line ") in proc.stderr and "role" in proc.stderr


# the stream's events saved as one JSON array (issue 35 item 6) ----------------------------------------
def _as_array(tmp_path: Path, shape: str) -> Path:
    """The recorded stream's events as a client that collects them saves them: one JSON array."""
    values = [orjson.loads(line[5:]) for line in _lines(shape) if line.startswith(b"data:")]
    return _write(tmp_path, f"{shape}.json", orjson.dumps(values, option=orjson.OPT_INDENT_2))


@pytest.mark.parametrize("shape", ["event.sse", "global-event.sse"])
def test_an_array_of_the_stream_events_is_the_exported_session(shape: str, tmp_path: Path) -> None:
    path = _as_array(tmp_path, shape)
    assert _steps(path) == _steps(API / "export.json")
    native = session.parse(path).native_as(session.Native)
    assert native.messages == _export()["messages"] and native.info == _export()["info"]
    report = orjson.loads(replayer("inspect", str(path), "--json", check=True).stdout)
    assert report["agent"] == "opencode" and len(report["steps"]) == 3


def test_an_array_event_without_a_type_is_named(tmp_path: Path) -> None:
    values = [orjson.loads(line[5:]) for line in _lines("event.sse") if line.startswith(b"data:")]
    values[3] = {"properties": values[3]["properties"]}
    path = _write(tmp_path, "events.json", orjson.dumps(values))
    assert "event 3 is not an opencode server event" in _refusal(path)


def test_an_array_of_two_sessions_is_refused(tmp_path: Path) -> None:
    two = SERVER / "two" / "event.sse"
    values = [orjson.loads(line[5:]) for line in two.read_bytes().splitlines() if line.startswith(b"data:")]
    path = _write(tmp_path, "events.json", orjson.dumps(values))
    assert "holds 2 opencode sessions" in _refusal(path)
