"""OpenHands V1 conversations recorded by the pinned SDK: steps, refusals, and the prepared prefix at
every boundary against the request the SDK really sent there (no container needed)."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import orjson
import pytest

from replayer import adapters
from replayer.adapters.openhands import OpenHandsAdapter
from replayer.pipeline.engine import load
from tests.conftest import OPENHANDS, replayer

FIXTURE = OPENHANDS.root / "v1"
CONVERSATION = FIXTURE / "conversation"


def requests() -> list[dict]:
    return [orjson.loads(line) for line in (FIXTURE / "upstream.jsonl").read_bytes().splitlines()]


def _events(conv: Path) -> list[dict]:
    return [orjson.loads(p.read_bytes()) for p in sorted((conv / "events").glob("event-*.json"))]


def test_steps_are_llm_responses_with_their_observations() -> None:
    adapter, traj = load(CONVERSATION)
    assert isinstance(adapter, OpenHandsAdapter)
    assert (traj.agent, traj.agent_version, traj.cwd) == ("openhands", "1.34.0", "/testbed")
    assert traj.session_id == "6f0c2a4e-1b7d-4c3e-9a55-0d1e2f3a4b5c"
    assert [[c.tool for c in s.calls] for s in traj.steps] == [
        ["terminal", "file_editor"],
        ["terminal"],
        ["file_editor"],
        ["terminal"],
        ["finish"],
    ]
    assert [s.message_id for s in traj.steps] == [f"chatcmpl-00{n}" for n in range(1, 6)]
    assert all(s.complete for s in traj.steps) and [s.final for s in traj.steps] == [False] * 4 + [True]
    failing = traj.steps[1].calls[0]
    assert failing.historical is not None and "AssertionError: -1" in str(failing.historical.content)
    assert str(failing.historical.content).endswith("[Command finished with exit code 1]")
    assert traj.steps[0].calls[1].input == {"command": "view", "path": "/testbed/calc.py"}


@pytest.mark.parametrize("after_step", range(5))
def test_prepared_prefix_is_the_request_the_sdk_sent(after_step: int, tmp_path: Path) -> None:
    out = tmp_path / "out"
    replayer("prepare", str(CONVERSATION), "-n", str(after_step), "-o", str(out), "--json", check=True)
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert expected == requests()[after_step]["body"]["messages"]
    result = orjson.loads((out / "result.json").read_bytes())
    conv = out / Path(result["native_files"][0]).parent
    events = _events(conv)
    base = orjson.loads((conv / "base_state.json").read_bytes())
    assert base["leaf_event_id"] == events[-1]["id"] and base["execution_status"] == "idle"
    assert "parent_id" not in events[0]
    assert [e["parent_id"] for e in events[1:]] == [e["id"] for e in events[:-1]]
    if after_step:
        assert events[-1]["kind"] == "ObservationEvent", "the prefix ends with a complete pair"
    kept = {e["llm_response_id"] for e in events if e["kind"] == "ActionEvent"}
    latencies = base["stats"]["usage_to_metrics"]["agent"]["response_latencies"]
    assert {m["response_id"] for m in latencies} == kept


def test_a_boundary_after_finish_is_refused(tmp_path: Path) -> None:
    proc = replayer("prepare", str(CONVERSATION), "-n", "5", "-o", str(tmp_path / "out"))
    assert proc.returncode == 4 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def _copy(tmp_path: Path) -> Path:
    conv = tmp_path / "conv"
    shutil.copytree(CONVERSATION, conv)
    return conv


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("unknown_kind", "unknown event kind 'FancyEvent'"),
        ("condensed", "condensed conversation"),
        ("gap", "event 5 is missing"),
        ("not_json", "is not JSON"),
    ],
)
def test_bad_conversations_fail_closed_in_one_line(damage: str, message: str, tmp_path: Path) -> None:
    conv = _copy(tmp_path)
    files = sorted((conv / "events").glob("event-*.json"))
    if damage in ("unknown_kind", "condensed"):
        event = orjson.loads(files[5].read_bytes())
        event["kind"] = "FancyEvent" if damage == "unknown_kind" else "Condensation"
        files[5].write_bytes(orjson.dumps(event))
    elif damage == "gap":
        files[5].unlink()
    else:
        files[3].write_bytes(b"{not json")
    proc = replayer("inspect", str(conv))
    assert proc.returncode == 3, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_base_state_of_another_sdk_version_is_not_taken_for_the_pinned_one(tmp_path: Path) -> None:
    conv = _copy(tmp_path)
    replayer("prepare", str(conv), "-n", "1", "-o", str(tmp_path / "pinned"), check=True)
    inferred = orjson.loads((tmp_path / "pinned" / "result.json").read_bytes())["version"]
    assert (inferred["version"], inferred["source"], inferred["status"]) == ("1.34.0", "inferred", "verified")
    base = orjson.loads((conv / "base_state.json").read_bytes())
    (conv / "base_state.json").write_bytes(orjson.dumps({**base, "a_future_field": 1}))
    args = ["prepare", str(conv), "-n", "1"]
    replayer(*args, "-o", str(tmp_path / "other"), "--agent-version", "1.30.0", check=True)
    stated = orjson.loads((tmp_path / "other" / "result.json").read_bytes())["version"]
    assert (stated["version"], stated["source"], stated["status"]) == ("1.30.0", "stated", "unverified")
    replayer(*args, "-o", str(tmp_path / "default"), check=True)
    default = orjson.loads((tmp_path / "default" / "result.json").read_bytes())["version"]
    assert default["source"] == "default", "keys 1.34.0 does not write: not inferred as 1.34.0"


def test_unknown_tools_are_refused_and_other_directories_are_no_conversation(tmp_path: Path) -> None:
    _, traj = load(CONVERSATION)
    adapter = OpenHandsAdapter()
    call = dataclasses.replace(traj.steps[0].calls[0], tool="browser_navigate")
    kind, reason = adapter.classify(call, traj)
    assert kind == "unknown" and reason and "browser_navigate" in reason
    assert adapters.read_head(tmp_path) == []
    proc = replayer("inspect", str(tmp_path))
    assert proc.returncode == 3 and "unknown format" in proc.stderr


def test_an_observation_the_sdk_would_cut_is_refused_not_misrendered(tmp_path: Path) -> None:
    conv = _copy(tmp_path)
    path = sorted((conv / "events").glob("event-00004-*.json"))[0]
    event = orjson.loads(path.read_bytes())
    event["observation"]["content"][0]["text"] = "x" * 30_001
    path.write_bytes(orjson.dumps(event))
    replayer("prepare", str(conv), "-n", "0", "-o", str(tmp_path / "before"), check=True)
    proc = replayer("prepare", str(conv), "-n", "1", "-o", str(tmp_path / "out"))
    assert proc.returncode == 4 and "call_v1_01" in proc.stderr and "cut" in proc.stderr


def test_a_batch_prepares_a_conversation_directory_at_every_boundary(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(orjson.dumps({"trajectory": str(CONVERSATION)}) + b"\n")
    out = tmp_path / "batch"
    summary = orjson.loads(
        replayer("batch", "--trust-manifest", str(manifest), "-o", str(out), "--json", check=True).stdout
    )
    steps = len(load(CONVERSATION)[1].steps)
    assert summary["done"] == steps and summary["failed"] == 0  # 0..steps-1: the last step finishes
    records = tmp_path / "chat.jsonl"
    replayer("export", str(out), "--format", "chat", "-o", str(records), check=True)
    lines = [orjson.loads(line) for line in records.read_bytes().splitlines()]
    assert len(lines) == steps and all(r["tools"] for r in lines)


def test_an_early_sdk_s_openai_shaped_tool_calls_are_read_as_the_current_ones(tmp_path: Path) -> None:
    """Early SDKs stored an action's `tool_call` as litellm's ChatCompletionMessageToolCall (`{id, type,
    function: {name, arguments}}`); later ones as MessageToolCall (`{id, name, arguments, origin}`)."""
    conv = _copy(tmp_path)
    for path in sorted((conv / "events").glob("event-*.json")):
        event = orjson.loads(path.read_bytes())
        if event["kind"] == "ActionEvent":
            call = event["tool_call"]
            function = {"name": call["name"], "arguments": call["arguments"]}
            event["tool_call"] = {"id": call["id"], "type": "function", "function": function}
            path.write_bytes(orjson.dumps(event))
    _, recorded = load(CONVERSATION)
    _, traj = load(conv)
    assert traj.steps == recorded.steps
    assert any("`tool_call.function.name`" in n for n in traj.parse_notes)

    out = tmp_path / "out"
    replayer("prepare", str(conv), "-n", "1", "-o", str(out), check=True)
    assert orjson.loads((out / "expected_prefix.json").read_bytes()) == requests()[1]["body"]["messages"]
    [written] = (out / "native" / "home" / "conversations").iterdir()
    rebuilt = [e for e in _events(written) if e["kind"] == "ActionEvent"]
    assert rebuilt and all(set(e["tool_call"]) == {"id", "name", "arguments", "origin"} for e in rebuilt)
