"""Pi sessions recorded by other versions than the pin (tests/recorder_pi.py --version V): the wire prefix
that version sends at every boundary, reruns by that version's own code, and a continuation by the oldest
through the gate. Pi's files name the session format, not the CLI version: the tests state it
(`--agent-version V`). One scenario per version."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replayer.adapters.pi import PiAdapter
from replayer.adapters.pi.wire import to_wire
from replayer.bridges.scripted import Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn
from replayer.floor.pins import running_version
from tests.conftest import ROOT, replayer
from tests.support.continuing import KEY

VERSIONS = ROOT / "tests" / "fixtures" / "pi" / "versions"
RECORDED = sorted((p.name for p in VERSIONS.iterdir()), key=lambda v: tuple(map(int, v.split("."))))
OLDEST = RECORDED[0]


def _probe(version: str) -> Path:
    return VERSIONS / version / "probe"


def _sent(version: str) -> list[list[dict]]:
    """The `messages` (after the system message) of every request that version sent while recording."""
    lines = (_probe(version) / "upstream.jsonl").read_bytes().splitlines()
    return [r["body"]["messages"][1:] for r in map(orjson.loads, lines) if r["main_thread"]]


def _run(version: str, out: Path, after_step: int, *extra: str, env: dict[str, str] | None = None) -> dict:
    folder = _probe(version)
    args = ["run", str(folder / "session.jsonl"), "-n", str(after_step), "-w", str(folder / "workspace")]
    proc = replayer(*args, "-o", str(out), "--json", "--agent-version", version, *extra, env=env)
    assert proc.returncode == 0, proc.stderr
    return orjson.loads((out / "result.json").read_bytes())


def test_the_recordings_are_of_the_versions_they_are_filed_under() -> None:
    assert len(RECORDED) >= 2
    for version in RECORDED:
        meta = orjson.loads((_probe(version) / "meta.json").read_bytes())
        assert meta["cli_version"] == version


# pure: the wire form of each version, from its own recorded requests ----------------------------------
@pytest.mark.parametrize("version", RECORDED)
def test_the_wire_prefix_is_what_that_version_sent_at_every_boundary(version: str, tmp_path: Path) -> None:
    adapter = PiAdapter()
    traj = adapter.parse(_probe(version) / "session.jsonl")
    sent = _sent(version)
    with running_version("pi", version):
        for boundary in range(len(traj.steps) + 1):
            expected = adapter.rebuild(traj, boundary, {}, tmp_path / str(boundary)).expected_prefix
            assert expected in sent, f"boundary {boundary}: {version} sent no request with this prefix"


def test_before_0_58_assistant_text_goes_as_text_parts() -> None:
    message = {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    assert to_wire([message], "0.57.1")[0]["content"] == [
        {"type": "text", "text": "a"},
        {"type": "text", "text": "b"},
    ]
    assert to_wire([message], "0.58.0")[0]["content"] == "ab" == to_wire([message])[0]["content"]


# Docker and the real CLIs --------------------------------------------------------------------------------
def _reruns_exactly(result: dict, version: str, steps: int, out: Path) -> None:
    assert result["version"]["version"] == version and result["version"]["source"] == "stated"
    assert result["version"]["status"] == "unverified" and result["version"]["in_file"] is None
    assert result["version"]["reruns"] == f"pi {version}, its own code"
    statuses = [d["status"] for d in result["divergences"]]
    assert len(statuses) >= steps and set(statuses) <= {"exact", "normalized_equal"}, result["divergences"]
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert expected in _sent(version)


@pytest.mark.agent
@pytest.mark.docker
@pytest.mark.parametrize("version", [v for v in RECORDED if v != OLDEST])
def test_rerun_by_that_version_reproduces_every_observation(version: str, tmp_path: Path) -> None:
    """The oldest's reruns are checked on its continued run (one scenario per version)."""
    steps = len(PiAdapter().parse(_probe(version) / "session.jsonl").steps)
    _reruns_exactly(_run(version, tmp_path / "out", steps), version, steps, tmp_path / "out")


@pytest.mark.agent
@pytest.mark.docker
def test_the_oldest_version_reruns_every_observation_and_continues_through_the_gate(tmp_path: Path) -> None:
    steps = len(PiAdapter().parse(_probe(OLDEST) / "session.jsonl").steps)
    turns = [
        Turn(blocks=[ToolUseBlock(id="call_cont_1", name="bash", input={"command": "cat calc.py"})]),
        Turn(blocks=[TextBlock(text="Finished.")]),
    ]
    out = tmp_path / "out"
    with ScriptedUpstream(Script(turns=turns, model="fake-model"), expected_key=KEY) as upstream:
        result = _run(
            OLDEST, out, steps, "--continue", "--upstream", upstream.url, env={"OPENAI_API_KEY": KEY}
        )
        log = [r for r in upstream.log if r.main_thread]
    _reruns_exactly(result, OLDEST, steps, out)
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 2), cont
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert log[0].body["messages"][1:] == expected, "no nonce: the first request is the prefix itself"
    tool = log[1].body["messages"][-1]
    assert tool["role"] == "tool" and "a + b" in tool["content"], (
        "the continued agent ran in the rerun sandbox"
    )
