"""Codex input the replayer must refuse, or accept only when asked, each with one clear line.
Variants are derived from the real recordings."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from tests.conftest import CODEX, replayer

ORIGINAL = CODEX.fixture("exec") / "rollout.jsonl"
WORKSPACE = str(CODEX.fixture("exec") / "workspace")


def _records() -> list[dict]:
    return [orjson.loads(line) for line in ORIGINAL.read_bytes().splitlines()]


def _variant(tmp_path: Path, change: Callable[[list[dict]], list[dict] | None]) -> Path:
    records = _records()
    records = change(records) or records
    path = tmp_path / "rollout-variant.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return path


def _one_line_error(proc, code: int, needle: str) -> None:  # type: ignore[no-untyped-def]
    assert proc.returncode == code, proc.stderr
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def _output_of(records: list[dict], call_id: str) -> int:
    return next(
        i
        for i, r in enumerate(records)
        if r["payload"].get("type") == "function_call_output" and r["payload"].get("call_id") == call_id
    )


def test_a_damaged_line_is_named(tmp_path: Path) -> None:
    lines = ORIGINAL.read_bytes().splitlines()
    lines[5] = lines[5][:40]
    path = tmp_path / "rollout-damaged.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    _one_line_error(replayer("inspect", str(path)), 3, "line 6 is not JSON")


def test_an_output_without_its_call_is_refused(tmp_path: Path) -> None:
    def change(records: list[dict]) -> None:
        call = next(i for i, r in enumerate(records) if r["payload"].get("call_id") == "call_exec_02")
        del records[call]

    _one_line_error(
        replayer("inspect", str(_variant(tmp_path, change))), 3, "call_exec_02, which has no call"
    )


def test_a_call_without_its_output_splits_its_step(tmp_path: Path) -> None:
    def change(records: list[dict]) -> None:
        del records[_output_of(records, "call_exec_03")]

    path = _variant(tmp_path, change)
    replayer("prepare", str(path), "-n", "1", "-o", str(tmp_path / "ok"), check=True)
    _one_line_error(
        replayer("prepare", str(path), "-n", "3", "-o", str(tmp_path / "p")), 4, "would split step 2"
    )
    # several boundaries (one parse): a boundary past the split is refused before any is written
    several = replayer("prepare", str(path), "-n", "1,3", "-o", str(tmp_path / "both"))
    _one_line_error(several, 4, "boundary 3 is not one of 0..1")
    assert not (tmp_path / "both").exists()
    replayer("prepare", str(path), "-n", "all", "-o", str(tmp_path / "all"), check=True)
    assert sorted(p.name for p in (tmp_path / "all").iterdir()) == ["after-0", "after-1"]


@pytest.mark.agent
def test_an_unknown_tool_is_refused_before_any_container(tmp_path: Path) -> None:
    def change(records: list[dict]) -> None:
        for r in records:
            if r["payload"].get("call_id") == "call_exec_03" and r["payload"]["type"] == "function_call":
                r["payload"]["name"] = "write_stdin"

    path = _variant(tmp_path, change)
    proc = replayer("run", str(path), "-n", "2", "-w", WORKSPACE, "-o", str(tmp_path / "o"))
    _one_line_error(proc, 4, "unknown tool 'write_stdin' in step 2")
    assert not (tmp_path / "o").exists()
    proc = replayer(
        "run", str(path), "-n", "2", "-w", WORKSPACE, "-o", str(tmp_path / "d"), "--allow-degraded", "--json"
    )
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads(proc.stdout)
    assert {d["call_id"]: d["status"] for d in result["divergences"]}["call_exec_03"] == "historical_kept"


def test_a_boundary_before_the_last_compaction_cuts_it_off(tmp_path: Path) -> None:
    summary = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "SUMMARY"}]}

    def change(records: list[dict]) -> None:
        at = _output_of(records, "call_exec_03") + 1
        records.insert(
            at,
            {
                "timestamp": "x",
                "type": "compacted",
                "payload": {"message": "s", "replacement_history": [summary]},
            },
        )

    path = _variant(tmp_path, change)
    replayer("prepare", str(path), "-n", "1", "-o", str(tmp_path / "p"), check=True)
    before = orjson.loads((tmp_path / "p" / "expected_prefix.json").read_bytes())
    assert summary not in before and before[-1]["type"] == "function_call_output"
    replayer("prepare", str(path), "-n", "3", "-o", str(tmp_path / "q"), check=True)
    expected = orjson.loads((tmp_path / "q" / "expected_prefix.json").read_bytes())
    assert expected[1] == summary and expected[0]["role"] == "developer"
    assert expected[-1]["call_id"] == "call_exec_04"


def test_a_legacy_rollout_stays_legacy(tmp_path: Path) -> None:
    def change(records: list[dict]) -> None:
        records[0]["payload"].pop("history_mode")
        for r in records:
            r.pop("ordinal", None)

    path = _variant(tmp_path, change)
    out = tmp_path / "p"
    replayer("prepare", str(path), "-n", "2", "-o", str(out), check=True)
    rebuilt = next((out / "native").rglob("rollout-*.jsonl"))
    assert all("ordinal" not in orjson.loads(line) for line in rebuilt.read_bytes().splitlines())


@pytest.mark.agent
def test_another_model_makes_the_cli_compact_first_which_is_refused(tmp_path: Path) -> None:
    from replayer.bridges.scripted import Script, ScriptedUpstream, TextBlock, Turn

    with ScriptedUpstream(
        Script(turns=[Turn(blocks=[TextBlock(text="x")], repeat=True)]), expected_key="k"
    ) as upstream:
        args = ["run", str(ORIGINAL), "-n", "1", "-w", WORKSPACE, "-o", str(tmp_path / "o"), "--json"]
        args += ["--continue", "--upstream", upstream.url, "--model", "gpt-5.6-sol"]
        proc = replayer(*args, env={"OPENAI_API_KEY": "k"})
        forwarded = [r for r in upstream.log if r.main_thread]
    assert proc.returncode == 8, proc.stderr
    result = orjson.loads((tmp_path / "o" / "result.json").read_bytes())
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["model"]) == ("refused", "bridge_refused", "gpt-5.6-sol")
    assert forwarded == []
