"""Bare Codex rollouts from before the envelope (a header line, bare response items, `record_type` state
lines), read from a real public one (tests/fixtures/field/SOURCES.md). No Docker."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.conftest import ROOT, replayer

LEGACY = ROOT / "tests" / "fixtures" / "field" / "codex" / "acidicsoil-legacy-rollout-2025-09-10.jsonl"
THREAD = "cf4def41-21e0-4b91-adb4-5397c1492084"
CWD = "/home/user/projects/codex-session-viewer"


def _lines() -> list[dict]:
    return [orjson.loads(line) for line in LEGACY.read_bytes().splitlines() if line.strip()]


def _items() -> list[dict]:
    """The response items as the file holds them (no header, no state lines)."""
    return [r for r in _lines()[1:] if "record_type" not in r]


def _inspect(path: Path) -> dict:
    return orjson.loads(replayer("inspect", str(path), "--json", check=True).stdout)


def _one_line_error(proc, code: int, needle: str) -> None:  # type: ignore[no-untyped-def]
    assert proc.returncode == code, proc.stderr
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr


def _write(tmp_path: Path, lines: list[bytes]) -> Path:
    path = tmp_path / "legacy.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_inspect_lists_every_call_in_file_order() -> None:
    found = _inspect(LEGACY)
    assert (found["agent"], found["agent_version"]) == ("codex", "0.58.0")  # inferred: see the prepare
    assert (found["session_id"], found["cwd"]) == (THREAD, CWD)  # the cwd of its <environment_context>
    calls = [c for step in found["steps"] for c in step["calls"]]
    recorded = [(i["name"], i["call_id"]) for i in _items() if i["type"] == "function_call"]
    assert [(c["tool"], c["id"]) for c in calls] == recorded and len(recorded) == 246
    assert all(step["complete"] and len(step["calls"]) == 1 for step in found["steps"])
    shell = next(c for c in calls if c["id"] == "call_hJ0jZmpypAsgg7vBCsPaE9hO")
    assert shell["tool"] == "shell" and shell["input"]["command"] == ["bash", "-lc", "ls -la"]
    assert shell["kind"] == "rerun"  # 0.58.0 offers `shell` (the pinned CLI no longer does)


def test_prepare_at_default_settings_rebuilds_the_envelope(tmp_path: Path) -> None:
    out = tmp_path / "out"
    replayer("prepare", str(LEGACY), "-n", "246", "-o", str(out), check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    ran = result["version"]
    assert (ran["version"], ran["source"], ran["in_file"]) == ("0.58.0", "inferred", None)
    assert "records no version" in ran["note"] and "cannot resume" in ran["note"]
    assert result["degradations"] == []
    [native] = result["native_files"]
    assert native.endswith(f"sessions/2025/09/10/rollout-2025-09-10T18-58-38-{THREAD}.jsonl")
    rebuilt = [orjson.loads(line) for line in (out / native).read_bytes().splitlines()]
    assert all(set(r) == {"timestamp", "type", "payload"} for r in rebuilt)
    meta = rebuilt[0]["payload"]
    assert rebuilt[0]["type"] == "session_meta" and meta["id"] == THREAD
    assert (meta["cwd"], meta["originator"], meta["cli_version"]) == (CWD, "codex_cli_rs", "")
    assert meta["instructions"] == _lines()[0]["instructions"]
    # the file's items through the last output, in order, state lines dropped; the prefix is those items
    items = _items()
    through = max(i for i, item in enumerate(items) if item["type"] == "function_call_output") + 1
    assert through == len(items) - 1  # the final answer is after the boundary
    # without their ids, which the CLIs that resume rollouts neither write nor send
    unnamed = [{k: v for k, v in item.items() if k != "id"} for item in items[:through]]
    assert any("id" in item for item in items[:through])
    assert [r["payload"] for r in rebuilt[1:]] == unnamed
    assert {r["type"] for r in rebuilt[1:]} == {"response_item"}
    assert orjson.loads((out / "expected_prefix.json").read_bytes()) == unnamed


def test_shell_calls_rerun_at_a_driven_version(tmp_path: Path) -> None:
    out = tmp_path / "out"
    replayer("prepare", str(LEGACY), "-n", "3", "--agent-version", "0.58.0", "-o", str(out), check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    assert (result["version"]["source"], result["version"]["reruns"]) == (
        "stated",
        "codex 0.58.0, its own code",
    )
    kinds = [(d["tool"], d["kind"]) for d in result["divergences"]]
    assert kinds == [
        ("task-master-ai__next_task", "unknown"),
        ("task-master-ai__get_task", "unknown"),
        ("shell", "rerun"),
    ]


def test_a_version_in_the_header_is_read_as_recorded(tmp_path: Path) -> None:
    """The later bare writer (codex-rs source) marked its header and recorded cwd and cli_version."""
    lines = LEGACY.read_bytes().splitlines()
    header = orjson.loads(lines[0])
    header.update(record_type="session_meta", cwd="/work", originator="codex_cli_rs", cli_version="0.29.0")
    lines[0] = orjson.dumps(header)
    path, out = _write(tmp_path, lines), tmp_path / "out"
    assert _inspect(path)["cwd"] == "/work"
    replayer("prepare", str(path), "-n", "3", "-o", str(out), check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["version"]["in_file"] == "0.29.0"
    # issue 45: 0.29 has no `exec resume`, which the driven rerun calls (it ended in "unexpected argument
    # '<thread id>' found"): the nearest release that drives such a rollout runs, and the result says so
    assert (result["version"]["version"], result["version"]["source"]) == ("0.58.0", "default")
    assert (
        "codex 0.29.0 predates 0.36.0, the oldest version its runner drives: 0.58.0 ran"
        in result["version"]["note"]
    )
    assert result["divergences"][2]["kind"] == "rerun"


def test_a_damaged_line_is_named(tmp_path: Path) -> None:
    lines = LEGACY.read_bytes().splitlines()
    lines[28] = lines[28][:60]  # a shell call's output
    _one_line_error(replayer("inspect", str(_write(tmp_path, lines))), 3, "line 29 is not JSON")


def test_a_bad_field_is_named_as_the_line_spells_it(tmp_path: Path) -> None:
    lines = LEGACY.read_bytes().splitlines()
    call = orjson.loads(lines[27])
    assert call["type"] == "function_call"
    lines[27] = orjson.dumps({**call, "call_id": 7})
    _one_line_error(
        replayer("inspect", str(_write(tmp_path, lines))), 3, "line 28, field call_id: not a string"
    )


def test_a_record_type_not_read_is_refused(tmp_path: Path) -> None:
    lines = LEGACY.read_bytes().splitlines()
    lines[1] = orjson.dumps({"record_type": "event", "msg": {"type": "task_started"}})
    _one_line_error(
        replayer("inspect", str(_write(tmp_path, lines))),
        3,
        "line 2 has record_type 'event', which is not read",
    )
