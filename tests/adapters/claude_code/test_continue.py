"""`run --continue` with the real pinned CLI through the bridge, for every recording and boundary:
the gate accepts, the upstream sees a conversation ending at the fresh O'N, the agent finishes,
the key is never written, and the cleaned continued session resumes with the real CLI."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from replayer.adapters.claude_code import chain, envelope, wire
from replayer.bridges.scripted import Script, TextBlock, ToolUseBlock, Turn
from replayer.floor.pins import pinned_version
from replayer.pipeline.engine import load
from tests.conftest import CLAUDE, first_and_last
from tests.support.claude_cli import run_claude
from tests.support.continuing import KEY, changed_workspace, continue_run, files_containing

pytestmark = pytest.mark.agent


def _boundaries() -> list[tuple[str, int]]:
    out = []
    for name in CLAUDE.scenarios:
        _, traj = load(CLAUDE.fixture(name) / "session.jsonl")
        out += [(name, n) for n in range(len(traj.steps) + 1)]
    return out


def _conversation(path: Path) -> list[dict]:
    session = chain.load(path)
    walked, _, _ = chain.walk(session, chain.select_leaf(session))
    return wire.to_messages(chain.expand(session, walked), pinned_version("claude_code"))


@pytest.mark.parametrize(("name", "after_step"), first_and_last(_boundaries(), every=("single", "continued")))
def test_continue_from_the_boundaries(name: str, after_step: int, tmp_path: Path) -> None:
    out = tmp_path / "out"
    workspace = changed_workspace(name, tmp_path / "ws")
    turns = [
        Turn(
            blocks=[
                TextBlock(text="Checking."),
                ToolUseBlock(id=f"toolu_cont_{name}_1", name="Bash", input={"command": "ls"}),
            ]
        ),
        Turn(blocks=[TextBlock(text="Finished.")]),
    ]
    code, result, log, err = continue_run(name, after_step, out, workspace, turns, "--allow-degraded")
    assert code == 0, err
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["input_condition"]) == (
        "accepted",
        "completed",
        "replayed_boundary_only",
    )
    assert cont["steps_used"] == 2 and cont["counters"]["refused_requests"] == 0
    main = [r for r in log if r.main_thread]
    assert len(main) == 2 and all(r.key_ok for r in log)
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    # the model saw the rebuilt conversation ending at O'N, nothing of the envelope
    assert wire.normalize_request(main[0].body["messages"]) == expected
    assert "replayer-nonce" not in orjson.dumps([r.body for r in main]).decode()
    # fresh observations of changed files are what the model saw
    shown = {
        b["tool_use_id"]: b["content"]
        for m in expected
        for b in m["content"]
        if b.get("type") == "tool_result"
    }
    for d in result["divergences"]:
        if d["status"] == "different":
            assert d["fresh_excerpt"][:40] in str(shown[d["call_id"]])
    # the second request continues the same conversation: the agent's tool call and its result
    second = wire.normalize_request(main[1].body["messages"])
    assert second[: len(expected)] == expected
    assert second[len(expected)]["content"][1]["id"] == f"toolu_cont_{name}_1"
    # the key is never written, anywhere in the output (state directory included)
    assert files_containing(out, KEY.encode()) == []
    # the cleaned continued session is a real session: the pinned CLI resumes it and sends exactly it
    cleaned = out / cont["files"]["continued_session"]
    assert b"replayer-nonce" not in cleaned.read_bytes()
    home = tmp_path / "home"
    shutil.copytree(out / "state" / "home", home)
    target = next((home / ".claude" / "projects").rglob(f"{result['session_id']}.jsonl"))
    shutil.copy(cleaned, target)
    socks = tmp_path / "sock"
    socks.mkdir()
    _, again = run_claude(
        prompts=["And now?"],
        workspace=out / "state" / "workspace",
        home=home,
        sockets=socks,
        script=Script(turns=[], message_id_prefix=f"msg_again_{name}"),
        session_id=result["session_id"],
        resume_first=True,
    )
    first = next(r for r in again if r["main_thread"])
    conversation = _conversation(cleaned)
    sent = wire.normalize_request(first["body"]["messages"])
    # a backgrounded call of the history gets the CLI's "stopped" notice on every resume (envelope.py)
    notices, tail = 0, []
    for m in sent[len(conversation) :]:
        kept = [b for b in m["content"] if envelope.stopped_shell_call(b.get("text", "")) is None]
        notices += len(m["content"]) - len(kept)
        tail += [{**m, "content": kept}] if kept else []
    assert notices == len(orjson.loads((out / "continuation.json").read_bytes())["background_calls"])
    assert [*sent[: len(conversation)], *tail] == [
        *conversation,
        {"role": "user", "content": [{"type": "text", "text": "And now?"}]},
    ]
    assert conversation[: len(expected)] == expected
