"""`run --continue` with the real pinned CLI through the bridge, for every recording and boundary:
the gate accepts, the upstream sees a conversation ending at the fresh O'N, the agent finishes,
the key is never written, and the cleaned continued session resumes with the real CLI. A recording's
boundaries are continued by one `run -n a,b --continue` (one replay, a continuation forked at each, each
result directory what `run -n K --continue` writes: tests/replayer/pipeline/test_fanout.py), which the
module runs once and each boundary's test reads."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from replayer.adapters.claude_code import chain, envelope, wire
from replayer.bridges.scripted import LoggedRequest, Script, TextBlock, ToolUseBlock, Turn
from replayer.floor.pins import pinned_version
from replayer.pipeline.engine import load
from tests.conftest import CLAUDE, first_and_last
from tests.support.claude_cli import run_claude
from tests.support.continuing import KEY, changed_workspace, continue_runs, files_containing

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


BOUNDARIES = first_and_last(_boundaries(), every=("single", "continued"))


@dataclass
class Continued:
    """One recording continued at each of its boundaries of BOUNDARIES by one `run -n a,b --continue`."""

    code: int
    err: str
    out: Path
    results: dict[int, dict]
    log: list[LoggedRequest]


@pytest.fixture(scope="module")
def continued(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Continued]:
    """The recording's run, made once for the module (its boundaries' tests read it)."""
    made: dict[str, Continued] = {}

    def of(name: str) -> Continued:
        if name not in made:
            root = tmp_path_factory.mktemp(name)
            workspace = changed_workspace(name, root / "ws")
            turns = [
                Turn(
                    blocks=[
                        TextBlock(text="Checking."),
                        ToolUseBlock(id=f"toolu_cont_{name}_1", name="Bash", input={"command": "ls"}),
                    ]
                ),
                Turn(blocks=[TextBlock(text="Finished.")]),
            ]
            boundaries = [n for scenario, n in BOUNDARIES if scenario == name]
            out = root / "out"
            code, results, log, err = continue_runs(
                name, boundaries, out, workspace, turns, "--allow-degraded"
            )
            made[name] = Continued(code, err, out, results, log)
        return made[name]

    return of


def _continuing(main: list[LoggedRequest], expected: list[dict], call_id: str) -> list[LoggedRequest]:
    """The main requests of the continuation whose prefix is `expected`: the conversation is `expected`, or
    `expected` then the continuation's own call (another boundary's prefix goes on with the recorded steps)."""

    def own(request: LoggedRequest) -> bool:
        sent = wire.normalize_request(request.body["messages"])
        if sent[: len(expected)] != expected:
            return False
        return len(sent) == len(expected) or call_id in orjson.dumps(sent[len(expected)]).decode()

    return [r for r in main if own(r)]


@pytest.mark.parametrize(("name", "after_step"), BOUNDARIES)
def test_continue_from_the_boundaries(
    name: str, after_step: int, tmp_path: Path, continued: Callable[[str], Continued]
) -> None:
    run = continued(name)
    boundaries = [n for scenario, n in BOUNDARIES if scenario == name]
    out = run.out if len(boundaries) == 1 else run.out / f"after-{after_step}"
    code, result, log, err = run.code, run.results[after_step], run.log, run.err
    assert code == 0, err
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["input_condition"]) == (
        "accepted",
        "completed",
        "replayed_boundary_only",
    )
    assert cont["steps_used"] == 2 and cont["counters"]["refused_requests"] == 0
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    every_main = [r for r in log if r.main_thread]
    main = _continuing(every_main, expected, f"toolu_cont_{name}_1")
    assert len(main) == 2 and all(r.key_ok for r in log)
    # every boundary's continuation sent its two requests, and nothing else went to the upstream
    assert len(every_main) == 2 * len(boundaries)
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
    assert files_containing(run.out, KEY.encode()) == []
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
