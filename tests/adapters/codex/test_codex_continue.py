"""Codex continuation with the real pinned CLI (`codex exec resume`) through the Responses bridge:
the nonce never reaches the upstream, the cleaned rollout resumes, inserted context items are
accepted and reported, a tampered prefix is refused, budgets and failures end the run cleanly."""

from __future__ import annotations

import os
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from replayer.adapters.codex import CodexAdapter, config_toml
from replayer.adapters.codex.gate import CodexGate
from replayer.bridges.scripted import LoggedRequest, Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn
from replayer.floor.pins import load_pins
from replayer.floor.requests import ContinueRequest, ReplayRequest
from replayer.pipeline.engine import execute
from replayer.sandboxes.docker import DockerSandbox, connect
from tests.conftest import CODEX, replayer
from tests.support.codex_cli import CWD, HOME, agent_mount, codex_argv, codex_env
from tests.support.continuing import KEY, files_containing

ROLLOUT = CODEX.fixture("exec") / "rollout.jsonl"


def _continue(
    after_step: int,
    out: Path,
    turns: list[Turn],
    *extra: str,
    rollout: Path | None = None,
    workspace: Path | None = None,
) -> tuple[int, dict, list[LoggedRequest], str]:
    """`rollout` defaults to the recording dated today: once its recording day has passed, the CLI
    inserts new context on resume (tested on its own below)."""
    ws = workspace or CODEX.fixture("exec") / "workspace"
    if rollout is None:
        today = datetime.now(UTC).date().isoformat()
        rollout = _dated(ROLLOUT, out.parent / f"today-{out.name}-{ROLLOUT.name}", today)
    with ScriptedUpstream(Script(turns=turns, model="gpt-5.5"), expected_key=KEY) as upstream:
        args = ["run", str(rollout), "-n", str(after_step), "-w", str(ws), "-o", str(out), "--json"]
        args += ["--continue", "--upstream", upstream.url, *extra]
        proc = replayer(*args, env={"OPENAI_API_KEY": KEY})
        log = list(upstream.log)
    result = orjson.loads((out / "result.json").read_bytes()) if (out / "result.json").exists() else {}
    return proc.returncode, result, log, proc.stderr


def _exec(n: int, cmd: str) -> Turn:
    return Turn(blocks=[ToolUseBlock(id=f"call_cont_{n}", name="exec_command", input={"cmd": cmd})])


def _records(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _same_as_prefix(expected: list[dict], sent: list[dict]) -> None:
    assert [{**expected[0], "id": sent[0]["id"]}, *expected[1:]] == sent


def _dated(path: Path, dest: Path, day: str) -> Path:
    """The rollout with its recorded date set to `day` (the CLI inserts new context when the date moved)."""
    records = _records(path)
    for r in records:
        if r["type"] == "world_state":
            r["payload"]["state"]["environments"]["current_date"] = day
    dest.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return dest


@pytest.mark.agent
def test_continues_without_the_nonce_and_the_cleaned_rollout_resumes(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    shutil.copytree(CODEX.fixture("exec") / "workspace", workspace)
    (workspace / "a.txt").write_text("fresh content\n")
    out = tmp_path / "out"
    today = datetime.now(UTC).date().isoformat()  # the fixture's recording day has passed
    code, result, log, stderr = _continue(
        3,
        out,
        [_exec(1, "cat a.txt"), Turn(blocks=[TextBlock(text="Done.")])],
        workspace=workspace,
        rollout=_dated(ROLLOUT, tmp_path / ROLLOUT.name, today),
    )
    assert code == 0, stderr
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 2)
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    _same_as_prefix(expected, log[0].body["input"])  # the nonce item was stripped
    assert "fresh content" in log[1].body["input"][-1]["output"], "the agent ran in the replayed sandbox"
    assert all(r.key_ok for r in log)
    raw = (out / cont["files"]["continued_rollout_raw"]).read_bytes()
    cleaned = _records(out / cont["files"]["continued_rollout"])
    nonce = next(line for line in raw.splitlines() if b"replayer-nonce-" in line)
    assert nonce and b"replayer-nonce-" not in (out / cont["files"]["continued_rollout"]).read_bytes()
    assert [r["ordinal"] for r in cleaned] == list(range(len(cleaned)))
    assert files_containing(out, KEY.encode()) == []
    # the cleaned rollout resumes with the real CLI, and sends exactly its items
    home = tmp_path / "home"
    sessions = home / ".codex" / "sessions" / "2026"
    sessions.mkdir(parents=True)
    rebuilt_name = Path(result["native_files"][0]).name
    shutil.copy(out / cont["files"]["continued_rollout"], sessions / rebuilt_name)
    (home / ".codex" / "config.toml").write_text(config_toml("gpt-5.5").replace("8765", "8766"))
    socks = tmp_path / "socks"
    socks.mkdir()
    thread = result["session_id"]
    with ScriptedUpstream(
        Script(turns=[Turn(blocks=[TextBlock(text="ok")])]), unix_path=socks / "u.sock"
    ) as upstream:
        binds = {CWD: (workspace, False), HOME: (home, False), "/run/s": (socks, False)}
        binds[agent_mount()] = (load_pins().bundle_dir("codex"), True)
        with DockerSandbox.start(
            connect(),
            load_pins().base_image.tag,
            binds=binds,
            workdir=CWD,
            run_id=f"cx-{uuid.uuid4().hex[:6]}",
        ) as box:
            box.forward_port(8766, "/run/s/u.sock")
            argv = codex_argv("resume", thread, "again")
            res = box.exec(
                ["bash", "-c", 'exec "$@" </dev/null', "codex", *argv],
                workdir=CWD,
                env=codex_env("k"),
                timeout_s=120,
            )
        sent = upstream.log[0].body["input"]
    assert res.exit_code == 0, res.stderr.decode()[-2000:]
    history = [
        {k: v for k, v in r["payload"].items() if k != "internal_chat_message_metadata_passthrough"}
        for r in cleaned
        if r["type"] == "response_item"
    ]
    assert sent[1:-1] == history and sent[-1]["content"][0]["text"] == "again"


@pytest.mark.agent
def test_a_stale_date_makes_the_cli_insert_context_which_is_reported(tmp_path: Path) -> None:
    stale = _dated(ROLLOUT, tmp_path / ROLLOUT.name, "2020-01-01")
    code, result, log, stderr = _continue(
        2, tmp_path / "out", [Turn(blocks=[TextBlock(text="ok")])], rollout=stale
    )
    assert code == 0, stderr
    cont = result["continuation"]
    assert cont["gate"] == "accepted" and len(cont["gate_notes"]) == 1
    assert "<environment_context>" in cont["gate_notes"][0]
    assert "<environment_context>" in log[0].body["input"][-1]["content"][0]["text"], "kept for the model"


class TamperingAdapter(CodexAdapter):
    def rebuild(self, trajectory, after_step, observations, dest):  # type: ignore[no-untyped-def]
        result = super().rebuild(trajectory, after_step, observations, dest)
        path = result.native_files[0]
        original = path.read_bytes()
        assert b"alpha\\nbeta" in original
        path.write_bytes(original.replace(b"alpha\\nbeta", b"alpha\\nBETA"))
        return result


@pytest.mark.agent
def test_a_tampered_rollout_is_refused_and_never_forwarded(tmp_path: Path) -> None:
    with ScriptedUpstream(Script(turns=[]), expected_key=KEY) as upstream:
        os.environ["OPENAI_API_KEY"] = KEY
        request = ReplayRequest(
            mode="run",
            trajectory=ROLLOUT,
            after_step=1,
            out=tmp_path / "out",
            workspace=CODEX.fixture("exec") / "workspace",
            continuation=ContinueRequest(upstream=upstream.url),
        )
        result = execute(request, adapter=TamperingAdapter())
        log = list(upstream.log)
    cont = result.continuation
    assert cont is not None and (cont.gate, cont.agent_status) == ("refused", "bridge_refused")
    assert cont.mismatch is not None and cont.mismatch.path == "input[6].output"
    assert log == []


@pytest.mark.agent
def test_the_step_budget_holds_the_next_request(tmp_path: Path) -> None:
    turns = [_exec(1, "ls"), _exec(2, "ls"), Turn(blocks=[TextBlock(text="x")])]
    code, result, log, stderr = _continue(1, tmp_path / "out", turns, "--max-steps", "1")
    assert code == 0, stderr
    cont = result["continuation"]
    assert (cont["agent_status"], cont["steps_used"], cont["counters"]["held_requests"]) == (
        "max_steps",
        1,
        1,
    )
    assert len(log) == 1


@pytest.mark.agent
def test_a_boundary_prompt_is_kept(tmp_path: Path) -> None:
    code, result, log, stderr = _continue(
        1, tmp_path / "out", [Turn(blocks=[TextBlock(text="ok")])], "--boundary-prompt", "Check b.txt too."
    )
    assert code == 0, stderr
    assert result["continuation"]["input_condition"] == "boundary_user_prompt_appended"
    assert log[0].body["input"][-1]["content"][0]["text"] == "Check b.txt too."


@pytest.mark.agent
def test_a_failing_upstream_is_an_agent_error(tmp_path: Path) -> None:
    turns = [Turn(blocks=[TextBlock(text="x")], fail_after_events=1, repeat=True)]
    code, result, _, stderr = _continue(1, tmp_path / "out", turns)
    assert code == 9 and stderr.startswith("replayer: agent_error:"), stderr
    assert result["continuation"]["agent_status"] == "agent_error"


def test_the_gate_accepts_only_known_context_items() -> None:
    prefix = [
        {"type": "message", "id": None, "role": "developer", "content": [{"type": "input_text", "text": "B"}]}
    ]
    base = {**prefix[0], "id": "msg_" + str(uuid.uuid5(uuid.NAMESPACE_URL, "x"))}

    def user(text: str) -> dict:
        return {
            "type": "message",
            "id": "msg_1",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        }

    gate = CodexGate(prefix, "nonce", keep_prompt=False)
    odd = gate.route("POST", "/v1/responses", {"input": [base, user("<other>x"), user("nonce")]})
    assert odd.kind == "refuse" and odd.mismatch is not None and odd.mismatch.path == "input[1]"
    bad_id = CodexGate(prefix, "nonce", keep_prompt=False).route(
        "POST", "/v1/responses", {"input": [{**base, "id": "msg_" + str(uuid.uuid4())}, user("nonce")]}
    )
    assert bad_id.kind == "refuse" and bad_id.mismatch is not None and bad_id.mismatch.path == "input[0].id"
    ok = CodexGate(prefix, "nonce", keep_prompt=False)
    first = ok.route(
        "POST", "/v1/responses", {"input": [base, user("<skills_instructions>s"), user("nonce")]}
    )
    assert first.kind == "main" and first.body == {"input": [base, user("<skills_instructions>s")]}
    assert ok.notes and "skills" in ok.notes[0]


@pytest.mark.agent
def test_the_mock_model_answers_on_the_responses_wire_without_a_key(tmp_path: Path) -> None:
    from replayer.pipeline.mock import FINAL_TEXT

    today = datetime.now(UTC).date().isoformat()
    rollout = _dated(ROLLOUT, tmp_path / ROLLOUT.name, today)
    out = tmp_path / "out"
    args = ["run", str(rollout), "-n", "3", "-w", str(CODEX.fixture("exec") / "workspace"), "-o", str(out)]
    proc = replayer(
        *args,
        "--json",
        "--continue",
        "--upstream",
        "mock",
        env={"OPENAI_API_KEY": "", "REPLAYER_UPSTREAM": ""},
    )
    assert proc.returncode == 0, proc.stderr
    cont = orjson.loads((out / "result.json").read_bytes())["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"], cont["mock"]) == (
        "accepted",
        "completed",
        1,
        True,
    )
    assert FINAL_TEXT.encode() in (out / cont["files"]["continued_rollout"]).read_bytes()
