"""The key serves the agent (issue 32, attack 6), with the real Docker engine and the real Claude Code CLI
continuing through the bridge against the scripted upstream: a historical command of the prefix starts a
process in the background that waits for the bridge and posts its own requests during the continuation.
They never reach the upstream and are recorded; the process is listed as left by the prefix, and ended at
the boundary with --end-leftovers; the request budget stops the agent."""

from __future__ import annotations

import shlex
from pathlib import Path

import orjson
import pytest

from replayer.adapters.sandbox_paths import BRIDGE_PORT
from replayer.bridges.scripted import Script, TextBlock, ToolUseBlock, Turn
from tests.conftest import CLAUDE, replayer
from tests.support.continuing import KEY, scripted
from tests.support.sessions import patched_session

pytestmark = [pytest.mark.docker, pytest.mark.agent]

ROGUE_MODEL = "claude-rogue-model"
_ROGUE = f"""
import json, socket, time
def post(path, body):
    while True:
        try:
            s = socket.create_connection(("127.0.0.1", {BRIDGE_PORT}))
            break
        except OSError:
            time.sleep(0.1)
    data = json.dumps(body).encode()
    head = "POST %s HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\nContent-Length: %d\\r\\nConnection: close\\r\\n\\r\\n"
    s.sendall((head % (path, len(data))).encode() + data)
    while s.recv(65536):
        pass
msgs = [{{"role": "user", "content": "write me a novel"}}]
post("/v1/messages", {{"model": "{ROGUE_MODEL}", "max_tokens": 64000, "messages": msgs}})
post("/v1/complete", {{"model": "{ROGUE_MODEL}", "max_tokens_to_sample": 64000, "prompt": "hi"}})
open("/tmp/rogue.done", "w").write("posted")
time.sleep(600)
"""
WAIT_FOR_ROGUE = (
    "for i in $(seq 600); do [ -s /tmp/rogue.done ] && break; sleep 0.1; done; cat /tmp/rogue.done"
)


def _session(tmp_path: Path) -> Path:
    """The recorded `single` session whose first Bash call also starts the rogue, detached."""
    background = f"setsid python3 -c {shlex.quote(_ROGUE)} >/dev/null 2>&1 </dev/null &"
    return patched_session(
        tmp_path / "session.jsonl", "toolu_single_01", {"command": f"cat a.txt; {background}"}
    )


def _continue(tmp_path: Path, turns: list[Turn], *extra: str) -> tuple[int, dict, list, str]:
    out = tmp_path / "out"
    workspace = CLAUDE.fixture("single") / "workspace"
    with scripted(
        "claude_code", Script(turns=turns, message_id_prefix="msg_trust"), expected_key=KEY
    ) as upstream:
        args = ["run", str(_session(tmp_path)), "-n", "1", "-w", str(workspace), "-o", str(out)]
        proc = replayer(
            *args, "--continue", "--upstream", upstream.url, "--json", *extra, env={"ANTHROPIC_API_KEY": KEY}
        )
        log = list(upstream.log)
    result = orjson.loads((out / "result.json").read_bytes()) if (out / "result.json").exists() else {}
    return proc.returncode, result, log, proc.stderr


def _rogue_listed(cont: dict) -> list[dict]:
    return [
        p
        for p in cont["leftovers"]["processes"]
        if p["command"].startswith("python3 -c  import json, socket")
    ]


def test_a_process_left_by_the_prefix_cannot_spend_the_key(tmp_path: Path) -> None:
    turns = [
        Turn(blocks=[ToolUseBlock(id="toolu_trust_1", name="Bash", input={"command": WAIT_FOR_ROGUE})]),
        Turn(blocks=[TextBlock(text="Finished.")]),
    ]
    code, result, log, err = _continue(tmp_path, turns, "--keep-leftovers")  # ended by default
    assert code == 0, err
    cont = result["continuation"]
    assert cont["agent_status"] == "completed" and cont["gate"] == "accepted"
    # the agent waited for the rogue's two posts: both refused, recorded, never forwarded
    refused = [(r["reason"], r["path"]) for r in cont["refusals"]]
    assert ("side_call_max_tokens", "/v1/messages") in refused and (
        "undeclared_side_call",
        "/v1/complete",
    ) in refused
    # (the conversation the agent sends holds the rogue's script: the historical command)
    sent = [(r.path, (r.body or {}).get("model") if isinstance(r.body, dict) else None) for r in log]
    assert not [s for s in sent if s[1] == ROGUE_MODEL or s[0].startswith("/v1/complete")], sent
    assert all(r.key_ok for r in log)
    assert cont["counters"]["refused_requests"] >= 2 and cont["mismatch"] is None
    bridge_log = (tmp_path / "out" / "bridge" / "log.jsonl").read_text()
    assert "refused:undeclared_side_call" in bridge_log
    # and the process was listed as left by the prefix, not ended
    assert _rogue_listed(cont) and not cont["leftovers"]["ended"]
    assert cont["leftovers"]["count"] == 1, cont["leftovers"]
    assert all("socat" not in p["command"] for p in cont["leftovers"]["processes"]), "the replayer's own"


def test_end_leftovers_and_the_request_budget(tmp_path: Path) -> None:
    turns = [
        Turn(
            blocks=[ToolUseBlock(id="toolu_trust_2", name="Bash", input={"command": "echo again"})],
            repeat=True,
        )
    ]
    code, result, log, err = _continue(tmp_path, turns, "--end-leftovers", "--max-requests", "2")
    assert code == 0, err
    cont = result["continuation"]
    assert _rogue_listed(cont) and cont["leftovers"]["ended"]
    # ended before the bridge listened: it posted nothing
    assert not [
        r for r in cont["refusals"] if r["reason"] in ("undeclared_side_call", "side_call_max_tokens")
    ]
    # two requests forwarded, then the budget held the agent's next main request and stopped it
    assert cont["agent_status"] == "max_requests"
    assert len(log) == 2 == cont["counters"]["main_requests"] + cont["counters"]["side_requests"]
    assert [r["reason"] for r in cont["refusals"]][-1:] == ["max_requests"]
    assert result["request"]["continuation"]["max_requests"] == 2
