"""OpenCode fidelity with the real pinned CLI: at every boundary of every recording the expected prefix
is the `messages` list (after the system message) the CLI sent right after that step, from each native
form (export, event log, SQLite store) in `prepare`, and after the reruns by the pinned CLI in a real
container (`run`), where every observation is reproduced exactly; the rebuilt store is the CLI's own."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from replayer.adapters.opencode import OpenCodeAdapter, cli_box, rebuilt_document
from replayer.adapters.opencode.wire import to_wire
from replayer.pipeline.engine import load
from tests.conftest import CLAUDE, OPENCODE, OPENCODE_FORMS, first_and_last, replayer


def _boundaries() -> list[tuple[str, int]]:
    out = []
    for name in OPENCODE.scenarios:
        _, traj = load(OPENCODE.fixture(name) / "export.json")
        out += [(name, n) for n in range(0, len(traj.steps) + 1)]
    return out


def _request_after(name: str, expected: list[dict]) -> list[dict]:
    """The history the CLI sent right after the boundary: the first request as long as the prefix."""
    histories = [r["body"]["messages"][1:] for r in OPENCODE.requests(name)]
    return next((h for h in histories if len(h) == len(expected)), [])


def _walk_order_free(messages: list[dict]) -> list[dict]:
    """The messages with each glob/grep listing's lines sorted: ripgrep's parallel walk orders them, and
    under load the CLI itself lists them in another order than it did when recorded (`walk_order`)."""
    listing = {
        call["id"]
        for m in messages
        if m.get("role") == "assistant"
        for call in m.get("tool_calls") or []
        if call.get("function", {}).get("name") in OpenCodeAdapter.walk_order_tools
    }
    return [
        {**m, "content": "\n".join(sorted(m["content"].split("\n")))}
        if m.get("role") == "tool" and m.get("tool_call_id") in listing and isinstance(m.get("content"), str)
        else m
        for m in messages
    ]


def _cli(verb: str, source: Path, after_step: int, out: Path, *extra: str) -> dict:
    args = [verb, str(source), "--after-step", str(after_step), "--out", str(out), "--json", *extra]
    replayer(*args, check=True)
    return orjson.loads((out / "result.json").read_bytes())


RUN_AT = first_and_last(_boundaries())
"""Where `prepare` and `run` run for real: each scenario's first and last boundary."""


def _prepared_matrix() -> list[tuple[str, str, int]]:
    """Every boundary from the export; the store and the event log at their first and last (they parse into
    the export's messages, test_opencode_parse.py, and each prepare runs the CLI's import on the host)."""
    boundaries = _boundaries()
    other = first_and_last(boundaries)
    return [
        (form, name, n)
        for form in sorted(OPENCODE_FORMS)
        for name, n in (boundaries if form == "export" else other)
    ]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, str, int], Path]:
    """The result directory of `prepare -n K` of a form of a scenario: one `prepare -n 1,LAST` a form and
    scenario (each boundary's `after-K/` what `prepare -n K` writes), made when a test first asks for it."""
    made: dict[tuple[str, str], Path] = {}

    def after(form: str, name: str, after_step: int) -> Path:
        if (form, name) not in made:
            out = tmp_path_factory.mktemp(f"prepared-{form}-{name}") / "out"
            boundaries = ",".join(str(n) for scenario, n in RUN_AT if scenario == name)
            source = OPENCODE.fixture(name) / OPENCODE_FORMS[form]
            replayer("prepare", str(source), "-n", boundaries, "-o", str(out), "--json", check=True)
            made[(form, name)] = out
        return made[(form, name)] / f"after-{after_step}"

    return after


@pytest.mark.docker  # an OpenCode import runs in a sandbox
@pytest.mark.parametrize(("form", "name", "after_step"), _prepared_matrix())
def test_prepared_prefix_is_the_request_the_cli_sent(
    form: str, name: str, after_step: int, prepared: Callable[[str, str, int], Path]
) -> None:
    """`prepare` itself (its host import included) at each scenario's first and last boundary; between them
    the rebuild's own document, whose wire form is what `prepare` writes as the expected prefix."""
    source = OPENCODE.fixture(name) / OPENCODE_FORMS[form]
    if (name, after_step) not in RUN_AT:
        _, traj = load(source)
        expected = to_wire(rebuilt_document(traj, after_step, {})["messages"])
        assert expected and expected == _request_after(name, expected)
        return
    out = prepared(form, name, after_step)
    result = orjson.loads((out / "result.json").read_bytes())
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert expected and expected == _request_after(name, expected)
    assert all(d["status"] == "historical_kept" for d in result["divergences"])


def seeded_workspace(name: str, dest: Path) -> Path:
    """The recording's workspace made again the way the recorder seeded it: entries created in name order.

    OpenCode's glob and grep list files in the order ripgrep walks them, which is the directory's
    entry order (creation order on a small ext4 directory), not a sorted one: a checkout of the
    fixture creates them in another order, which would change those observations."""
    source = OPENCODE.fixture(name) / "workspace"
    dest.mkdir()
    for path in sorted(source.rglob("*")):
        target = dest / path.relative_to(source)
        if path.is_dir():
            target.mkdir()
        else:
            target.write_bytes(path.read_bytes())
    return dest


REPLAYED_FROM = {"two_runs": "sqlite"}
"""The form a scenario's replay reads (else its export)."""


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str, int], Path]:
    """The result directory of `run -n K` of a scenario: one replay a scenario (`run -n 1,LAST`, each
    boundary's `after-K/` what `run -n K` writes), made when a test first asks for it. two_runs is replayed
    from its SQLite store (REPLAYED_FROM): that replay is also test_rerun_from_the_other_forms[sqlite]."""
    made: dict[str, Path] = {}

    def after(name: str, after_step: int) -> Path:
        if name not in made:
            root = tmp_path_factory.mktemp(f"replayed-{name}")
            workspace = seeded_workspace(name, root / "ws")
            boundaries = ",".join(str(n) for scenario, n in RUN_AT if scenario == name)
            source = OPENCODE.fixture(name) / OPENCODE_FORMS[REPLAYED_FROM.get(name, "export")]
            args = ["run", str(source), "-n", boundaries, "-o", str(root / "out"), "-w", str(workspace)]
            replayer(*args, "--json", check=True)
            made[name] = root / "out"
        several = sum(scenario == name for scenario, _ in RUN_AT) > 1
        return made[name] / f"after-{after_step}" if several else made[name]

    return after


@pytest.mark.agent
@pytest.mark.parametrize(("name", "after_step"), RUN_AT)
def test_rerun_by_the_cli_reproduces_every_observation(
    name: str, after_step: int, replayed: Callable[[str, int], Path], tmp_path: Path
) -> None:
    out = replayed(name, after_step)
    result = orjson.loads((out / "result.json").read_bytes())
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert _walk_order_free(expected) == _walk_order_free(_request_after(name, expected))
    reran = [d for d in result["divergences"] if d["kind"] == "rerun"]
    assert (len(reran) > 0) == (after_step > 0)
    # glob and grep list files in ripgrep's parallel walk order, which the CLI itself varies under load
    odd = [
        d
        for d in reran
        if not (
            d["status"] == "exact" or (d["tool"] in ("glob", "grep") and d["normalizers"] == ["walk_order"])
        )
    ]
    assert not odd, orjson.dumps(odd).decode()
    kept = [d for d in result["divergences"] if d["kind"] != "rerun"]
    assert all(d["status"] == "historical_kept" and d["tool"] == "invalid" for d in kept)
    # The rebuilt store is the pinned CLI's own, holding only the rebuilt session.
    with cli_box.cli_home(seed=out / "native" / "home") as cli:
        listed = cli.run("session", "list", "--format", "json")
    assert [s["id"] for s in orjson.loads(listed)] == [result["session_id"]]


@pytest.mark.agent
def test_a_changed_workspace_reaches_the_rebuilt_session(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    shutil.copytree(OPENCODE.fixture("tools") / "workspace", workspace)
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b  # changed\n")
    out = tmp_path / "out"
    result = _cli("run", OPENCODE.fixture("tools") / "export.json", 1, out, "--workspace", str(workspace))
    read = next(d for d in result["divergences"] if d["tool"] == "read")
    assert read["status"] == "different"
    export = orjson.loads((out / "native" / "export.json").read_bytes())
    tool = next(p for m in export["messages"] for p in m["parts"] if p.get("callID") == read["call_id"])
    assert "# changed" in tool["state"]["output"]
    assert "# changed" in orjson.loads((out / "expected_prefix.json").read_bytes())[2]["content"]


@pytest.mark.agent
@pytest.mark.parametrize("form", ["events", "sqlite"])
def test_rerun_from_the_other_forms(form: str, replayed: Callable[[str, int], Path], tmp_path: Path) -> None:
    if REPLAYED_FROM["two_runs"] == form:
        out = replayed("two_runs", 3)
    else:
        source = OPENCODE.fixture("two_runs") / OPENCODE_FORMS[form]
        workspace = OPENCODE.fixture("two_runs") / "workspace"
        out = tmp_path / "out"
        _cli("run", source, 3, out, "--workspace", str(workspace))
    result = orjson.loads((out / "result.json").read_bytes())
    assert Path(result["request"]["trajectory"]).name == OPENCODE_FORMS[form], "the replay read that form"
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert expected == _request_after("two_runs", expected)
    assert [d["status"] for d in result["divergences"]] == ["exact"] * 3


@pytest.mark.docker  # an OpenCode import runs in a sandbox
def test_an_event_log_alone_takes_its_prompt_from_task(tmp_path: Path) -> None:
    lone = tmp_path / "run.jsonl"
    shutil.copyfile(OPENCODE.fixture("tools") / "events.jsonl", lone)
    stood_in = _cli("prepare", lone, 2, tmp_path / "no")  # the reruns start; only a continuation needs it
    assert any("stores no user prompt" in n and "--task" in n for n in stood_in["parse_notes"])
    task = orjson.loads((OPENCODE.fixture("tools") / "meta.json").read_bytes())["task"]
    result = _cli("prepare", lone, 2, tmp_path / "out", "--task", task)
    assert result["version"]["source"] == "default", "an event log names no CLI version"
    expected = orjson.loads((tmp_path / "out" / "expected_prefix.json").read_bytes())
    assert expected == _request_after("tools", expected)
    assert sorted(tmp_path.iterdir()) == [tmp_path / "no", tmp_path / "out", lone], "nothing beside the input"


def test_task_is_refused_for_a_format_that_stores_its_prompt(tmp_path: Path) -> None:
    proc = replayer("inspect", str(CLAUDE.fixture("parallel") / "session.jsonl"), "--task", "x")
    assert proc.returncode == 3 and "--task" in proc.stderr
