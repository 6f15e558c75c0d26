"""`replayer verify AGENT@VERSION`: a probe session recorded by that version's own CLI, replayed and
continued at every boundary; a passing verdict makes the version verified, and only that."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from replayer import adapters
from replayer.adapters.base import recorded_tools
from replayer.bridges.request_tools import tool_names
from replayer.bridges.scripted import ItemBlock, ToolUseBlock
from replayer.floor.release import __version__
from replayer.floor.verdicts import Check, Verdict, is_verified, shipped, store
from replayer.sandboxes.base import OWNER_LABEL
from replayer.verbs.compatibility import DOC, rendered
from replayer.verbs.verify import FIXTURES, not_verified, probe_for, probe_script, verdict_of
from tests.conftest import CLAUDE, ROOT, replayer, replayer_argv
from tests.replayer.verbs.test_batch_interrupt import owner_of

VERSION = "2.0.64"  # installed by the suite's Claude Code version tests already
SINGLE = CLAUDE.fixture("single") / "session.jsonl"


def _status(tmp_path: Path, name: str, env: dict[str, str]) -> str:
    out = tmp_path / name
    args = ["prepare", str(SINGLE), "-n", "1", "-o", str(out), "--agent-version", VERSION]
    replayer(*args, env=env, check=True)
    return str(orjson.loads((out / "result.json").read_bytes())["version"]["status"])


@contextlib.contextmanager
def _created(client) -> Iterator[list[dict[str, str]]]:
    """The labels of every container the engine creates while the block runs (read as they come: the
    engine keeps few past events)."""
    seen: list[dict[str, str]] = []
    stream = client.events(filters={"type": "container", "event": "create"}, decode=True)

    def read() -> None:
        with contextlib.suppress(Exception):  # the stream closed
            for event in stream:
                seen.append(event["Actor"]["Attributes"])

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        yield seen
    finally:
        time.sleep(1)  # the last events on their way
        stream.close()
        reader.join(10)


@pytest.mark.agent
def test_a_passing_probe_verifies_the_version_and_only_in_its_verdict_folder(
    tmp_path: Path, docker_client
) -> None:
    env = {"REPLAYER_VERDICTS": str(tmp_path / "verdicts")}
    assert _status(tmp_path, "before", env) == "unverified"
    with _created(docker_client) as created:
        proc = subprocess.Popen(
            replayer_argv("verify", f"claude_code@{VERSION}", "--json"),
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **env},
        )
        owner = owner_of(proc.pid)  # while the process is there
        stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr
    [verdict] = orjson.loads(stdout)
    assert verdict["passed"] and verdict["version"] == VERSION and verdict["replayer"] == __version__
    assert verdict["probe"] == f"claude_code/versions/{VERSION}/probe ({VERSION})"
    assert verdict["probe_tools"] == ["Bash", "Read"] and "Edit" in verdict["tools_offered"]
    # the head, then the probe's three calls, each replayed and continued through the gate
    assert verdict["boundaries"] == [1, 2, 3, 4]
    names = [c["name"] for c in verdict["checks"]]
    assert "boundary 4: reruns" in names and "boundary 1: gate and continuation" in names
    assert all(c["passed"] for c in verdict["checks"]), verdict["checks"]
    stored = tmp_path / "verdicts" / f"claude_code@{VERSION}.json"
    assert orjson.loads(stored.read_bytes()) == verdict
    assert _status(tmp_path, "after", env) == "verified"
    assert _status(tmp_path, "elsewhere", {}) == "unverified"  # the suite's own (empty) verdict folder
    # the head ran once: its first request both checked and answered by the probe (it was a run of its
    # own, answered with a bare text, before the probe's run: 7 containers)
    assert sum(labels.get(OWNER_LABEL) == owner for labels in created) <= 6, created


@pytest.mark.agent
def test_gemini_cli_is_verified_by_its_probe(tmp_path: Path) -> None:
    """Gemini CLI's probe: its shell and read tools called on the Gemini wire (ScriptedGemini), each resume
    through the gate with the closing turn the CLI adds after the head's tool responses."""
    env = {"REPLAYER_VERDICTS": str(tmp_path / "verdicts")}
    version = adapters.by_name("gemini_cli").version()
    proc = replayer("verify", f"gemini_cli@{version}", "--json", env=env)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    [verdict] = orjson.loads(proc.stdout)
    assert verdict["passed"] and verdict["probe"] == f"gemini_cli/shell ({version})"
    assert verdict["probe_tools"] == ["read_file", "run_shell_command"]
    assert "replace" in verdict["tools_offered"] and verdict["boundaries"] == [1, 2, 3, 4]
    assert all(c["passed"] for c in verdict["checks"]), verdict["checks"]


def test_a_failed_first_gate_check_is_the_verdict_and_the_error() -> None:
    """When the version's first request does not pass the gate, the probe ends there (no tools are known
    to call): the stored verdict fails on that check, and verify exits 11 naming it, as it did for 0.45.2
    before its resume rules were known."""
    gate = Check(
        name="the head recording's prefix through the gate",
        passed=False,
        detail="gate refused at contents[2].parts[1]",
    )
    verdict = verdict_of("gemini_cli", "0.45.2", probe_for("gemini_cli", "0.45.2"), [gate], [], [], [])
    assert not verdict.passed and verdict.boundaries == [] and verdict.probe_tools == []
    failed = not_verified([verdict])
    assert failed is not None and (failed.exit_code, failed.kind) == (11, "verify_failed")
    assert str(failed) == (
        "gemini_cli@0.45.2 not verified (the head recording's prefix through the gate: gate refused at "
        "contents[2].parts[1])"
    )
    assert not_verified([_verdict("0.90.0")]) is None


def _parameters(tool: dict[str, Any]) -> dict[str, Any]:
    """A tool definition's JSON schema, on any wire (Anthropic, Responses, chat, a Gemini declaration)."""
    for key in ("input_schema", "parameters", "parametersJsonSchema"):
        if isinstance(tool.get(key), dict):
            return dict(tool[key])
    return _parameters(tool["function"]) if isinstance(tool.get("function"), dict) else {}


def test_each_probe_calls_the_pinned_versions_tools_with_their_required_arguments() -> None:
    """Each adapter's declared probe, against the tool definitions its pinned CLI sent on the wire."""
    probed = [a for a in adapters.all_adapters() if a.probe_native is not None]
    assert {a.name for a in probed} == set(adapters.REGISTRY)
    for adapter in probed:
        version = adapter.version()
        wire = recorded_tools("openhands" if adapter.name == "openhands_v0" else adapter.name, version)
        declared = [d for t in wire for d in t.get("functionDeclarations") or [t]]
        schemas = {name: _parameters(d) for d in declared for name in tool_names({"tools": [d]})}
        script = probe_script(adapter, version, list(schemas), "/work")
        calls = [b for t in script.turns for b in t.blocks if isinstance(b, ToolUseBlock)]
        assert len(calls) >= 3, adapter.name
        for call in calls:
            required = set(schemas[call.name].get("required") or [])
            assert required <= set(call.input), f"{adapter.name} {call.name}: {call.input}"
        assert script.final == script.turns[-1:]


def test_the_codex_probe_puts_a_reasoning_item_with_its_id_before_each_call() -> None:
    """So that every boundary's prefix holds reasoning items the server named: later CLIs keep the id in the
    rollout and send it (0.171) or not (0.142)."""
    script = probe_script(adapters.by_name("codex"), "0.142.0", ["exec_command"], "/work")
    for turn in script.turns[:-1]:
        first = turn.blocks[0]
        assert isinstance(first, ItemBlock) and first.item["type"] == "reasoning"
        assert first.item["id"].startswith("rs_")


def test_tool_names_reads_gemini_function_declarations() -> None:
    first = (FIXTURES / "gemini_cli" / "shell" / "upstream.jsonl").read_bytes().splitlines()[0]
    offered = tool_names(orjson.loads(first)["body"])
    assert {"run_shell_command", "read_file", "replace"} <= set(offered)


def _verdict(version: str, passed: bool = True, by: str = __version__) -> Verdict:
    check = Check(name="boundary 1: reruns", passed=passed)
    return Verdict(
        agent="codex",
        version=version,
        replayer=by,
        passed=passed,
        probe="codex/exec (0.171.0)",
        tools_offered=["exec_command"],
        probe_tools=["exec_command"],
        boundaries=[1, 2],
        checks=[check],
        checked_at="2026-12-03T00:00:00+00:00",
    )


def test_only_a_passing_verdict_by_this_replayer_verifies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REPLAYER_VERDICTS", str(tmp_path))
    store(_verdict("0.90.0"))
    store(_verdict("0.91.0", passed=False))
    store(_verdict("0.92.0", by="0.0.1"))
    (tmp_path / "codex@0.93.0.json").write_text("{not json")
    assert is_verified("codex", "0.90.0")
    assert not any(is_verified("codex", v) for v in ("0.91.0", "0.92.0", "0.93.0", "0.94.0"))
    assert is_verified("codex", "0.171.0")  # the pinned version needs no verdict


def test_verify_refuses_an_unknown_agent_in_one_line() -> None:
    """A usage error, as in every verb (exit 2)."""
    proc = replayer("verify", "gemini@0.1.0")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "gemini" in proc.stderr


def test_the_probe_starts_from_the_nearest_recording() -> None:
    assert probe_for("codex", "0.140.0").recording == "codex/versions/0.125.0/probe"
    assert probe_for("codex", "0.171.0").recording == "codex/exec"
    # 0.101's workspace-write session (reasoning items, a web search call) heads 0.101 to 0.124
    assert probe_for("codex", "0.110.0").recording == "codex/turn_context/0.101.0/turn_context"
    assert probe_for("codex", "0.30.0").recording == "codex/versions/0.58.0/probe"  # none older: the oldest
    assert probe_for("mini_swe_agent", "1.17.5").recording == "mini_swe_agent/v1"
    assert probe_for("mini_swe_agent", "1.15.0").recording == "mini_swe_agent/v1_15"  # its own line
    assert probe_for("claude_code", "2.1.100").recording == "claude_code/single"  # 2.1.197: same minor line
    assert probe_for("claude_code", "2.0.1").recording == "claude_code/versions/2.0.64/probe"


def test_the_compatibility_doc_is_generated_from_the_shipped_verdicts() -> None:
    doc = DOC.read_text()
    assert doc == rendered(doc, shipped()), "run: python -m replayer.verbs.compatibility"
    assert all(v.passed or "not verified" in doc for v in shipped())


def test_a_shipped_verdict_verifies_its_version_for_users(tmp_path: Path) -> None:
    verified = [v for v in shipped() if v.passed and v.agent == "claude_code" and v.version == VERSION]
    assert verified, "the replayer ships a passing verdict for claude_code 2.0.64"
    env = {"REPLAYER_VERDICTS": ""}  # unset: the user's folder, then the shipped verdicts
    assert os.environ["REPLAYER_VERDICTS"] and _status(tmp_path, "shipped", env) == "verified"
