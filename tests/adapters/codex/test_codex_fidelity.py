"""Codex fidelity with the real pinned CLI: at every boundary of every recording the expected prefix
is the Responses `input` the CLI sent right after that step (`prepare`, and `run` in a real container
where exec_command and apply_patch are rerun), the rebuilt rollout is well formed, and every rerun
observation equals the recorded one up to the CLI's random chunk ids and wall times."""

from __future__ import annotations

import re
import shutil
import uuid
from pathlib import Path

import orjson
import pytest

from replayer.adapters.codex import session as rollout
from replayer.pipeline.engine import load
from tests.conftest import CODEX, first_and_last, replayer
from tests.support.prefixes import prepared, replayed

VOLATILE = {"durations", "random_ids", "trailing_whitespace"}


def _rollout(name: str) -> Path:
    return CODEX.fixture(name) / "rollout.jsonl"


def _boundaries() -> list[tuple[str, int]]:
    out = []
    for name in CODEX.scenarios:
        _, traj = load(_rollout(name))
        out += [(name, n) for n in range(0, len(traj.steps) + 1)]
    return out


def _request_after(name: str, after_step: int) -> list[dict]:
    """The request that carried step N's outputs last (boundary 0: the first request)."""
    _, traj = load(_rollout(name))
    requests = [r["body"]["input"] for r in CODEX.requests(name)]
    if after_step == 0:
        return requests[0]
    ids = {c.id for c in traj.steps[after_step - 1].calls}
    for inp in requests:
        last = inp[-len(ids) :]
        if {i.get("call_id") for i in last} == ids and all(i["type"].endswith("_output") for i in last):
            return inp
    raise AssertionError(f"no recorded request ends with the outputs of step {after_step}")


def _same_prefix(expected: list[dict], sent: list[dict]) -> None:
    first = sent[0]
    assert re.fullmatch(r"msg_[0-9a-f-]{36}", first["id"]) and uuid.UUID(first["id"][4:]).version == 5
    assert expected[0]["id"] is None, "the CLI derives the base-instructions id from the thread"
    assert [{**expected[0], "id": first["id"]}, *expected[1:]] == sent


def _cli(verb: str, name: str, after_step: int, out: Path, *extra: str) -> dict:
    args = [verb, str(_rollout(name)), "--after-step", str(after_step), "--out", str(out), "--json", *extra]
    replayer(*args, check=True)
    return orjson.loads((out / "result.json").read_bytes())


@pytest.mark.parametrize(("name", "after_step"), _boundaries())
def test_prepared_prefix_is_the_input_codex_sent(
    name: str, after_step: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = prepared(tmp_path_factory, _rollout(name), after_step)
    result = orjson.loads((out / "result.json").read_bytes())
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    _same_prefix(expected, _request_after(name, after_step))
    assert all(d["status"] == "historical_kept" for d in result["divergences"])


def _volatile_free(items: list[dict]) -> list[dict]:
    def clean(text: str) -> str:
        text = re.sub(r"Chunk ID: [0-9a-f]{6}", "Chunk ID: <ID>", text)
        text = re.sub(r"session ID \d+", "session ID <ID>", text)
        return re.sub(r"Wall time: [0-9.]+ seconds", "Wall time: <T> seconds", text)

    return [{**i, "output": clean(i["output"])} if isinstance(i.get("output"), str) else i for i in items]


RERUN = first_and_last(_boundaries())


def _rerun(factory: pytest.TempPathFactory, name: str, after_step: int) -> Path:
    """`run -n K` of the recording in its own workspace, of the one replay to its RERUN boundaries (and 4 of
    `patch`, which test_patches_land_in_the_workspace_copy_only reads)."""
    boundaries = sorted({n for s, n in RERUN if s == name} | ({4} if name == "patch" else set()))
    return replayed(
        factory, _rollout(name), boundaries, after_step, "-w", str(CODEX.fixture(name) / "workspace")
    )


@pytest.mark.agent
@pytest.mark.parametrize(("name", "after_step"), RERUN)
def test_rerun_reproduces_every_observation(
    name: str, after_step: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    out = _rerun(tmp_path_factory, name, after_step)
    result = orjson.loads((out / "result.json").read_bytes())
    for d in result["divergences"]:
        assert d["status"] in ("exact", "normalized_equal"), d
        assert set(d["normalizers"]) <= VOLATILE, d
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    sent = _request_after(name, after_step)
    _same_prefix(_volatile_free(expected), _volatile_free(sent))
    records = [orjson.loads(line) for line in (out / result["native_files"][0]).read_bytes().splitlines()]
    assert records[0]["type"] == "session_meta"
    assert [r["ordinal"] for r in records] == list(range(len(records)))
    assert {r["type"] for r in records} <= rollout.KEPT_TYPES
    assert (out / "native" / "home" / ".codex" / "config.toml").read_text().count("127.0.0.1:8765") == 1


@pytest.mark.agent
def test_a_changed_workspace_lands_in_the_rebuilt_rollout(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    shutil.copytree(CODEX.fixture("exec") / "workspace", workspace)
    (workspace / "a.txt").write_text("changed\n")
    result = _cli("run", "exec", 2, tmp_path / "out", "--workspace", str(workspace))
    by_id = {d["call_id"]: d for d in result["divergences"]}
    assert by_id["call_exec_01"]["status"] == "different"
    assert by_id["call_exec_02"]["status"] == "different"  # wc -l: 1 line now
    assert by_id["call_exec_03"]["status"] == "normalized_equal"
    expected = orjson.loads((tmp_path / "out" / "expected_prefix.json").read_bytes())
    outputs = {i["call_id"]: i["output"] for i in expected if i.get("type") == "function_call_output"}
    assert outputs["call_exec_01"].endswith("Original token count: 2\nOutput:\nchanged\n")
    assert (workspace / "a.txt").read_text() == "changed\n"


@pytest.mark.agent
def test_an_empty_workspace_is_pointed_at_from_the_outputs_first_character(tmp_path: Path) -> None:
    """Codex wraps each output in `Chunk ID: ...\nOutput:\n`: the difference is located in the output."""
    (tmp_path / "empty").mkdir()
    result = _cli("run", "exec", 3, tmp_path / "out", "--workspace", str(tmp_path / "empty"))
    different = [d for d in result["divergences"] if d["status"] == "different"]
    assert len(different) == 3
    assert all((d["line"], d["column"], d["in_wrapper"]) == (1, 1, False) for d in different)
    assert all(not d["historical_excerpt"].startswith("Chunk ID") for d in different)
    assert len(result["hints"]) == 1 and "3 of 4 reruns" in result["hints"][0]


@pytest.mark.agent
def test_patches_land_in_the_workspace_copy_only(tmp_path_factory: pytest.TempPathFactory) -> None:
    out = _rerun(tmp_path_factory, "patch", 4)
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["after_step"] == 4
    state = out / "state" / "workspace"
    assert (state / "new.txt").read_text() == "first\nsecond\n"
    assert "goodbye" in (state / "hello.py").read_text()
    assert not (state / "old.txt").exists() and (state / "moved" / "mv.txt").read_text() == "moved\n"
    assert (CODEX.fixture("patch") / "workspace" / "old.txt").exists()
