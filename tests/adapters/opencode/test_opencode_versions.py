"""OpenCode sessions recorded by other versions than the pin (tests/recorder_opencode.py --version V): the
wire prefix that version sent at every boundary, from each native form it wrote (1.1.65 keeps JSON files,
no SQLite store); reruns by that version's own CLI driven by the replay model; and a continuation by each
through the gate (before 1.15.0 the CLI makes "\\n" + prompt of a prompt on stdin). One scenario per version."""

from __future__ import annotations

from itertools import dropwhile
from pathlib import Path

import orjson
import pytest

from replayer.adapters.opencode import rebuilt_document
from replayer.adapters.opencode.wire import to_wire
from replayer.bridges.scripted import Script, TextBlock, Turn
from replayer.pipeline.engine import load
from tests.conftest import OPENCODE_FORMS, ROOT, replayer
from tests.support.continuing import KEY, files_containing, scripted

VERSIONS = ROOT / "tests" / "fixtures" / "opencode" / "versions"
RECORDED = sorted((p.name for p in VERSIONS.iterdir()), key=lambda v: tuple(map(int, v.split("."))))


def _probe(version: str) -> Path:
    return VERSIONS / version / "probe"


def _forms(version: str) -> list[str]:
    return [form for form, name in sorted(OPENCODE_FORMS.items()) if (_probe(version) / name).is_file()]


def _steps(version: str) -> int:
    _, traj = load(_probe(version) / "export.json")
    return len(traj.steps)


def _histories(version: str) -> list[list[dict]]:
    """The main requests' messages after the system messages (two before 1.0.162), as that version sent them."""
    lines = (_probe(version) / "upstream.jsonl").read_bytes().splitlines()
    sent = [r["body"]["messages"] for r in map(orjson.loads, lines) if r["main_thread"]]
    return [list(dropwhile(lambda m: m["role"] == "system", messages)) for messages in sent]


def _cli(
    verb: str,
    version: str,
    form: str,
    after_step: int,
    out: Path,
    *extra: str,
    env: dict[str, str] | None = None,
) -> dict:
    source = _probe(version) / OPENCODE_FORMS[form]
    args = [verb, str(source), "-n", str(after_step), "-o", str(out), "--json"]
    if verb == "run":
        args += ["-w", str(_probe(version) / "workspace")]
    proc = replayer(*args, *extra, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return orjson.loads((out / "result.json").read_bytes())


def test_every_version_is_recorded_with_its_own_cli() -> None:
    assert len(RECORDED) >= 2
    for version in RECORDED:
        assert orjson.loads((_probe(version) / "meta.json").read_bytes())["cli_version"] == version
        assert orjson.loads((_probe(version) / "export.json").read_bytes())["info"]["version"] == version


# pure: the wire form of each version, from its own recorded requests ----------------------------------
@pytest.mark.docker  # an OpenCode import runs in a sandbox
@pytest.mark.parametrize("version", RECORDED)
def test_the_wire_prefix_is_what_that_version_sent_at_every_boundary(version: str, tmp_path: Path) -> None:
    """Every boundary from the export, by the rebuild's own document (what `prepare` writes the wire form
    of); at the last, `prepare` itself from each form that version wrote (export, event log, store), which
    imports the session with the pinned CLI on the host."""
    histories = _histories(version)
    _, traj = load(_probe(version) / "export.json")
    steps = len(traj.steps)
    for boundary in range(steps):
        expected = to_wire(rebuilt_document(traj, boundary, {})["messages"])
        assert expected in histories, f"export boundary {boundary}: {version} sent no such request"
    forms = _forms(version)
    assert len(forms) > 1, "an event log at least besides the export"
    for form in forms:
        out = tmp_path / f"{form}-{steps}"
        result = _cli("prepare", version, form, steps, out)
        assert result["version"]["version"] == version, (form, result["version"])
        expected = orjson.loads((out / "expected_prefix.json").read_bytes())
        assert expected in histories, f"{form} boundary {steps}: {version} sent no such request"


# Docker and the real CLIs --------------------------------------------------------------------------------
def _stream_race(divergence: dict, out: Path) -> bool:
    """A shell call that writes to both streams (the probe's `ls; echo err >&2`) whose rerun has the same
    lines in another order: OpenCode's bash tool reads stdout and stderr from two pipes and appends
    whichever it reads first, so the CLI itself varies their order from run to run."""
    rerun = next(
        r for r in orjson.loads((out / "reruns.json").read_bytes()) if r["call_id"] == divergence["call_id"]
    )
    mixed = divergence["tool"] == "bash" and rerun["fresh"] != rerun["historical"]
    return mixed and sorted(rerun["fresh"].splitlines()) == sorted(rerun["historical"].splitlines())


@pytest.mark.agent
@pytest.mark.docker
@pytest.mark.parametrize("version", RECORDED)
def test_that_version_reruns_every_observation_and_continues_through_the_gate(
    version: str, tmp_path: Path
) -> None:
    """One run a version (`run -n LAST --continue`): its reruns are the replay a plain `run` makes (the same
    rerun_prefix; the bridge folder is mounted besides), then its continuation. 1.15.13 exits before printing
    its last events (the model answers at once): the status then comes from the continued session the CLI
    exported."""
    out = tmp_path / "out"
    steps = _steps(version)
    script = Script(turns=[Turn(blocks=[TextBlock(text="Finished.")])], model="fake-model")
    with scripted("opencode", script, expected_key=KEY) as upstream:
        cont_args = ("--continue", "--upstream", upstream.url)
        result = _cli("run", version, "export", steps, out, *cont_args, env={"OPENAI_API_KEY": KEY})
        log = [r for r in upstream.log if r.main_thread]
    assert result["version"]["version"] == version and result["version"]["source"] == "recorded"
    assert result["version"]["status"] == "unverified"
    assert result["version"]["reruns"] == f"opencode {version}, its own code"
    divergences = result["divergences"]
    assert len(divergences) >= steps and "exact" in {d["status"] for d in divergences}
    for d in divergences:
        walk = d["status"] == "normalized_equal" and "walk_order" in d.get("normalizers", [])
        assert d["status"] == "exact" or (walk and d["tool"] in ("glob", "grep")) or _stream_race(d, out), d
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"]) == ("accepted", "completed"), cont
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    history = list(dropwhile(lambda m: m["role"] == "system", log[0].body["messages"])) if log else None
    assert history == expected, "the nonce was stripped: exactly the prefix"
    continued = orjson.loads((out / cont["files"]["continued_session"]).read_bytes())
    assert continued["info"]["version"] == version and b"replayer-nonce" not in orjson.dumps(continued)
    assert files_containing(out, KEY.encode()) == []


UNANSWERED = ROOT / "tests" / "fixtures" / "opencode" / "unanswered" / "1.0.98" / "probe"
"""A prompt the real 1.0.98 stored and exported without asking the model: it installs its provider package
from npm when a run starts (tests/recorder_opencode.py --unanswered 1.0.98)."""


@pytest.mark.agent
@pytest.mark.docker
def test_an_export_of_a_release_that_cannot_run_offline_runs_by_the_nearest_that_can(tmp_path: Path) -> None:
    """1.0.98 (as 1.0.0 and 1.0.61) cannot load its model provider in the sandbox: 1.0.152 runs its export,
    the result says why, and it continues through the gate (two system messages before 1.0.162)."""
    out = tmp_path / "out"
    args = ["run", str(UNANSWERED / "export.json"), "-n", "0", "-w", str(UNANSWERED / "workspace")]
    proc = replayer(*args, "-o", str(out), "--continue", "--upstream", "mock")
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    ran = result["version"]
    assert (ran["version"], ran["in_file"]) == ("1.0.152", "1.0.98")
    assert "opencode 1.0.98 predates 1.0.152" in ran["note"]
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"]) == ("accepted", "completed"), cont
    assert [n for n in cont["gate_notes"] if "system message" in n][1].startswith("messages[1]")
