"""Many continuations, one prefix (replayer/pipeline/fanout.py): `run -n a,b --continue` replays once and
continues each boundary in a container forked from its snapshot, each result equal to what `run -n k
--continue` writes alone (gate, prefix, rebuilt session, the home at the boundary, reruns, continued
session, state), for every agent that continues: each agent's one test of a boundary taken mid-replay
against its own run (test_multiboundary's, without a continuation, is Claude Code's), whose standalone run
records the cassette that is then replayed offline (`TAPED`); `compare -n a,b` against a compare at each;
and a batch's continue jobs of one trajectory use one replay, resume only the missing boundaries. Real
containers, the real pinned CLIs, the scripted model (or the built-in mock) upstream."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any

import docker
import orjson
import pytest

from replayer.bridges.scripted import Script, TextBlock, ToolUseBlock, Turn
from replayer.pipeline.fanout import FANOUT_LABEL
from replayer.pipeline.fork import COMPARE_LABEL
from tests.conftest import CLAUDE, ROOT, replayer
from tests.replayer.pipeline.test_multiboundary import AGENTS as PASSED
from tests.replayer.pipeline.test_multiboundary import _content, _renewed, _same_result, _tree, same_names
from tests.replayer.verbs.test_cassette_replay import OFFLINE, Recording, _verified, verified_replay
from tests.replayer.verbs.test_compare import AGENTS as COMPARED
from tests.replayer.verbs.test_compare import CHECK as CLAUDE_CHECK
from tests.replayer.verbs.test_compare import SCRIPTS as CLAUDE_SCRIPTS
from tests.replayer.verbs.test_compare import made_in_every_run
from tests.support.continuing import KEY, scripted

pytestmark = [pytest.mark.docker, pytest.mark.agent]

FIXTURE = CLAUDE.fixture("write_edit")
SESSION = FIXTURE / "session.jsonl"
BOUNDARIES = (2, 5)
NO_KEY = {"ANTHROPIC_API_KEY": "", "REPLAYER_UPSTREAM": ""}
KEYS = {name: KEY for name in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY")}


def _made(tool: str, arguments: dict[str, str], model: str = "fake-model", end: Turn | None = None) -> Script:
    """One call writing made.txt (a shell's but OpenHands'), then the agent's end (`end`, else a final answer): per conversation
    (`by_history`), so every continuation of the module's upstream gets the whole script."""
    call = ToolUseBlock(id="call_fan_1", name=tool, input=arguments)
    return Script(
        by_history=True,
        model=model,
        turns=[Turn(blocks=[call]), end or Turn(blocks=[TextBlock(text="Made it.")])],
    )


def _ends(tool: str, arguments: dict[str, str]) -> Turn:
    return Turn(blocks=[ToolUseBlock(id="call_fan_2", name=tool, input=arguments)])


MADE = "echo made > made.txt"
"""One write, no output: what the continuation streams does not depend on timing (a command printing twice,
as test_cassette_replay's MAKE does, streams Pi's partial results and OpenHands' terminal echo in an order
that differs from run to run)."""
FIXTURES = ROOT / "tests" / "fixtures"
AGENTS: dict[str, tuple[Path, tuple[int, ...], Script, list[str]]] = {
    "claude_code": (SESSION, BOUNDARIES, _made("Bash", {"command": MADE, "description": "make"}, "claude-sonnet-5"), []),
    "codex": (FIXTURES / PASSED["codex"][0], PASSED["codex"][1], _made("exec_command", {"cmd": MADE}), []),
    "gemini_cli": (FIXTURES / PASSED["gemini_cli"][0], PASSED["gemini_cli"][1],
                   _made("run_shell_command", {"command": MADE}, "gemini-2.5-flash"), []),
    "mini_swe_agent": (FIXTURES / PASSED["mini_swe_agent"][0], PASSED["mini_swe_agent"][1],
                       _made("bash", {"command": MADE}, end=_ends("bash", {"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"})), []),
    "opencode": (FIXTURES / PASSED["opencode"][0], PASSED["opencode"][1],
                 _made("bash", {"command": MADE, "description": "make"}), []),
    # its file editor: the terminal's observation of MADE holds the echoed command line in some runs, not in
    # others (a busy machine), and the cassette recorded from one run then lacks the next run's request
    "openhands": (FIXTURES / PASSED["openhands"][0], PASSED["openhands"][1],
                  _made("file_editor", {"command": "create", "path": "/testbed/made.txt", "file_text": "made\n"}), []),
    # not step 4: its rerun is the flaky call 5 (docs/compatibility.md)
    "openhands_v0": (COMPARED["openhands_v0"][0], (1, 3),
                     _made("execute_bash", {"command": MADE, "security_risk": "LOW"},
                           end=_ends("finish", {"message": "done"})), COMPARED["openhands_v0"][4]),
    "pi": (FIXTURES / PASSED["pi"][0], PASSED["pi"][1], _made("bash", {"command": MADE}), ["--allow-degraded"]),
}  # fmt: skip
"""Each agent that continues: its recording, two boundaries, the model's script, the run's extra flags."""

_ANSWER_IDS = re.compile(r"(msg_fake_|chatcmpl-|resp_)\d{3}")
"""The scripted model's answer ids count the requests it has served: the many-boundary run's second
continuation meets a later count than the same continuation alone."""
_NONCE = re.compile(r"replayer-nonce-[0-9a-f]+")
"""The bridge's resume nonce, random per continuation (kept in the raw continued session only)."""
_FRESH_IDS = (
    re.compile(r"\b([a-z]{3}_)([0-9a-f]{12}[0-9A-Za-z]{14})\b"),
    re.compile(r'("(?:id|parentId)": ?")([0-9a-f]{8})"'),
)
"""Ids of what the continuation adds, random per run: OpenCode's (`msg_`, `prt_`: the clock and random
bytes), Pi's session entries'. Numbered by first appearance, so that what refers to what still counts."""


_ECHO = re.compile(r'\\u001b\[\?2004h\\n\\n[^"]*?\\n\\u001b\[\?2004l')
"""OpenHands' terminal echoing the command it was sent (bracketed paste off, on, two line breaks, the command)
or not: whether the shell had drawn its prompt when the command arrived, either way in a fork or a
standalone run (JSON text, its escapes as written)."""


def _numbered(pattern: re.Pattern[str], text: str) -> str:
    seen: dict[str, str] = {}
    return pattern.sub(lambda m: m.group(1) + seen.setdefault(m.group(2), f"<ID{len(seen)}>"), text)


_LS_TIMES = re.compile(r"\b[A-Z][a-z]{2} +\d{1,2} +\d{1,2}:\d{2}\b")
"""`ls -l`'s modification times in a tool's output: when each run wrote the files."""
_DIR_SIZES = re.compile(r"^(d[rwxsStT-]{9}\S* +\d+ +\S+ +\S+ +)\d+", re.MULTILINE)
"""`ls -l`'s size of a directory: on the container's own file system overlayfs reports the size of its
upper layer's copy, which depends on how the container was made (`/` is 38 in a run pre-started and given
the boundary's changes, 12 in one started from the snapshot image, in a compare alone as well: its
`fork_path`, which differs between a later boundary and a compare alone)."""
_MEASURED = re.compile(r"(_ms|_s|Ms)$|^(duration|latency|process_id|request_bytes|runtime_hosts|partial)$")
"""Keys of what the agent and the bridge measure: times (`duration_ms`, `ttft_ms`, `at_s`, Gemini CLI's
`totalLatencyMs`, Codex's `duration`, OpenHands' `latency`), the process ids of its tools, and the size
of a request that holds a tool's output naming its process id (Gemini CLI's shell output does); the local
ports OpenHands V0's runtime picks (`runtime_hosts`); and Pi's `partial` of a streamed message event, the
message as assembled when the event was printed: whether the answer's last chunk (its usage) had come yet
is a matter of timing (the message itself is compared)."""


def _unmeasured(value: Any) -> Any:
    if isinstance(value, str):
        return _DIR_SIZES.sub(r"\1<SIZE>", _LS_TIMES.sub("<MTIME>", value))
    if isinstance(value, dict):
        return {k: "<M>" if _MEASURED.search(k) else _unmeasured(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unmeasured(v) for v in value]
    return value


def _continued(data: bytes) -> Any:
    """A file of the continuation as compared: `_content`, without answer ids, nonces, fresh ids, file times
    and what the agent measures."""
    text = _ANSWER_IDS.sub(r"\1<N>", data.decode("utf-8", "replace"))
    text = _NONCE.sub("<NONCE>", _ECHO.sub("", text))
    for pattern in _FRESH_IDS:
        text = _numbered(pattern, text)
    return _unmeasured(_content(text.encode()))


def _output(path: Path) -> Any:
    """A file of the continuation (`_continued`), or a folder of them (OpenHands' conversation)."""
    if not path.is_dir():
        return _continued(path.read_bytes())
    return {_renewed(str(p.relative_to(path))): _output(p) for p in sorted(path.rglob("*")) if p.is_file()}


def _run(source: Path, *args: str, env: dict[str, str] = NO_KEY) -> dict:
    proc = replayer(
        "run", str(source), "-w", str(source.parent / "workspace"), *args, "--json", env=env
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return orjson.loads(proc.stdout)


def _same_continuation(alone: Path, forked: Path, agent: str) -> None:
    """What `run -n K --continue` wrote in `alone`, the fork of the many-boundary run in `forked`: equal but
    for what any two runs of the same continuation differ by (`_renewed`: timestamps, durations, fresh
    uuids, epoch times, process ids; `_continued`: the scripted model's answer ids, the bridge's nonce,
    OpenCode's and Pi's fresh ids, OpenHands V0's runtime ports, `ls -l` times and directory sizes, the times and process ids the agent and the
    bridge measure), and `continuation.leftovers` (a fork has none of the prefix's processes,
    docs/cli.md). The prefix as test_multiboundary's `_same_result` compares it: the boundary taken
    mid-replay (the fork's) is the one a replay ending there takes, the agent's home by its names in
    native/ (its rerunner's, as taken at the boundary) and the rebuilt session in it."""
    one = orjson.loads((alone / "result.json").read_bytes())
    many = orjson.loads((forked / "result.json").read_bytes())
    for field in ("after_step", "boundary_call_ids", "degradations", "hints"):
        assert many[field] == one[field], field
    assert [(d["call_id"], d["status"], d["kind"]) for d in many["divergences"]] == [
        (d["call_id"], d["status"], d["kind"]) for d in one["divergences"]
    ]
    # a standalone run may record a cassette (`TAPED`): the continuation is the same
    assert many["request"]["continuation"] == {**one["request"]["continuation"], "record_cassette": None}
    a, b = one["continuation"], many["continuation"]
    for field in (
        "gate",
        "agent_status",
        "input_condition",
        "steps_used",
        "mock",
        "agent_exit_code",
        "files",
        "gate_notes",
    ):
        assert b[field] == a[field], field
    assert b["gate"] == "accepted", b["mismatch"]
    assert b["agent_status"] == "completed"
    for name in ("expected_prefix.json", "continuation.json", "reruns.json"):  # the prefix the gate proved
        assert _content((forked / name).read_bytes()) == _content((alone / name).read_bytes()), name
    assert [_renewed(n) for n in many["native_files"]] == [_renewed(n) for n in one["native_files"]]
    for native in one["native_files"]:  # the rebuilt session
        mine = next(n for n in many["native_files"] if _renewed(n) == _renewed(native))
        assert _content((forked / mine).read_bytes()) == _content((alone / native).read_bytes()), native
    same_names(alone / "native", forked / "native", agent)  # the home at the boundary
    assert many["sandbox"]["skipped"] == one["sandbox"]["skipped"]
    # the continued session and the agent's output files (its stderr log by name only: diagnostics, which
    # OpenHands writes from several threads in their own order), the state as the continuation left it
    for rel in a["files"].values():
        if rel != "agent/stderr.log":
            assert _output(forked / rel) == _output(alone / rel), rel
    assert _tree(forked / "continued", contents=False) == _tree(alone / "continued", contents=False)
    assert _tree(forked / "state" / "workspace") == _tree(alone / "state" / "workspace")
    assert (forked / "state" / "workspace" / "made.txt").read_text() == "made\n", "the fork ran its tool"
    for place in ("agent", "bridge"):
        assert sorted(p.name for p in (forked / place).iterdir()) == sorted(
            p.name for p in (alone / place).iterdir()
        )


V0_COST = (
    "OpenHands V0's case starts V0's runtime for the replay and every continuation, minutes on this machine, "
    "more than the suite's time allows; run it with REPLAYER_V0_FANOUT=1 (checked that way: its boundary 1 "
    "equal, as this module compares)"
)


TAPED = {"codex", "mini_swe_agent", "opencode", "openhands", "pi"}
"""The agents whose standalone continuation (at the first boundary) records a cassette, replayed offline
after the comparison (test_cassette_replay's `verified_replay`, in a `run` or a compare: that module records
Claude Code's own, whose continuation also lists a file's time, which the oracle normalizes in any agent's
requests alike)."""


def _alone(agent: str, boundaries: tuple[int, ...]) -> tuple[int, ...]:
    """The boundaries a standalone run is made for, to compare with the one replay's: every one for Claude
    Code; for the other agents only the first, whose snapshot is taken while the replay goes on (the harder
    case: the last is taken where the replay ends). One standalone run less per agent keeps the suite's time."""
    return boundaries if agent == "claude_code" else boundaries[:1]


def _snapshots_of(containers: set[str]) -> list:
    """The snapshot images still on the engine of the replays that ran in `containers` (a replay's snapshots
    are labelled with its id, which names its container)."""
    ids = {f"mb-{c.removeprefix('replayer-')}" for c in containers}
    client = docker.from_env()
    return [i for r in ids for i in client.images.list(filters={"label": f"{FANOUT_LABEL}={r}"})]


@pytest.mark.parametrize(
    "agent",
    [
        pytest.param(a, marks=pytest.mark.skipif(not os.environ.get("REPLAYER_V0_FANOUT"), reason=V0_COST))
        if a == "openhands_v0"
        else a
        for a in sorted(AGENTS)
    ],
)
def test_each_continuation_of_one_replay_equals_its_own_run(agent: str, tmp_path: Path) -> None:
    source, boundaries, script, extra = AGENTS[agent]
    taped = tmp_path / "tape"
    with scripted(agent, script, expected_key=KEY) as upstream:
        flags = ["--continue", "--upstream", upstream.url, *extra]
        n = ",".join(map(str, boundaries))
        many = _run(source, "-n", n, "-o", str(tmp_path / "many"), *flags, env=KEYS)
        for k in _alone(agent, boundaries):
            tape = ["--record-cassette", str(taped)] if agent in TAPED and k == boundaries[0] else []
            _run(source, "-n", str(k), "-o", str(tmp_path / f"alone-{k}"), *flags, *tape, env=KEYS)
    shown = many["boundaries"]
    assert sorted(shown) == sorted(str(k) for k in boundaries)
    assert len({r["container"] for r in shown.values()}) == 1, "one replay, in one container"
    assert any(d["kind"] == "rerun" for r in shown.values() for d in r["divergences"]), "it reran calls"
    for k in _alone(agent, boundaries):
        _same_continuation(tmp_path / f"alone-{k}", tmp_path / "many" / f"after-{k}", agent)
    # the boundaries' snapshot images are gone with the run (this replay's: other modules fan out meanwhile)
    assert not _snapshots_of({r["container"] for r in shown.values()})
    if agent in TAPED:  # the standalone continuation's cassette replays offline, verified
        k = boundaries[0]
        recorded = orjson.loads((tmp_path / f"alone-{k}" / "result.json").read_bytes())
        recording = Recording(source, k, source.parent / "workspace", taped, recorded, tuple(extra))
        if agent in COMPARED_OFFLINE:
            _compared_offline(recording, tmp_path / "offline", agent)
        else:
            _verified(recording, tmp_path / "offline", listing=False)


COMPARED_OFFLINE = TAPED - {"codex"}
"""The agents whose cassette replays in a compare (test_compare's check of every agent's compare, here at the
first boundary from the cassette, offline; Codex's compare is `test_compare_at_several_boundaries_...`'s,
and its cassette replays in a `run`)."""


def _compared_offline(recording: Recording, out: Path, agent: str) -> None:
    """`compare -n K` of one variant, `--check "test -f made.txt"`, from `recording`'s cassette without an
    upstream or a key: its run's continuation verified (test_cassette_replay's `verified_replay`) and the
    compare as test_compare's `made_in_every_run` checks every agent's."""
    proc = replayer(
        "compare", str(recording.trajectory), "-n", str(recording.after_step), "-w", str(recording.workspace),
        "-o", str(out), "--cassette", str(recording.tape), "--variant", "shared=", "--check", "test -f made.txt",
        *recording.extra, "--json", env=OFFLINE,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    made_in_every_run(out, agent)
    [run] = orjson.loads((out / "compare.json").read_bytes())["runs"]
    verified_replay(recording, run["continuation"], out / run["dir"] / "state" / "workspace", listing=False)


def test_a_batch_continues_the_boundaries_of_a_trajectory_from_one_replay(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.jsonl"
    line = {
        "trajectory": str(SESSION),
        "boundaries": list(BOUNDARIES),
        "mode": "continue",
        "workspace": str(FIXTURE / "workspace"),
        "continuation": {"upstream": "mock"},
    }
    manifest.write_bytes(orjson.dumps(line) + b"\n")
    out = tmp_path / "out"
    proc = replayer("batch", "--trust-manifest", str(manifest), "-o", str(out), "--json", env=NO_KEY)
    assert proc.returncode == 0, proc.stderr
    assert orjson.loads(proc.stdout)["done"] == len(BOUNDARIES)
    jobs = sorted((out / "jobs").iterdir())
    results = [orjson.loads((job / "result.json").read_bytes()) for job in jobs]
    assert sorted(r["after_step"] for r in results) == list(BOUNDARIES), "a directory a job"
    assert len({r["container"] for r in results}) == 1, "one replay for the trajectory's continue jobs"
    assert all(r["continuation"]["agent_status"] == "completed" for r in results)
    assert all(r["continuation"]["mock"] is True for r in results), "the manifest's upstream: the mock"
    # a batch that lost one boundary's directory redoes that boundary only
    lost = next(j for j, r in zip(jobs, results, strict=True) if r["after_step"] == BOUNDARIES[0])
    shutil.rmtree(lost)
    again = replayer("batch", "--trust-manifest", str(manifest), "-o", str(out), "--json", env=NO_KEY)
    assert again.returncode == 0, again.stderr
    summary = orjson.loads(again.stdout)
    assert (summary["done"], summary["skipped"]) == (1, len(BOUNDARIES) - 1)
    redone = orjson.loads((lost / "result.json").read_bytes())
    assert redone["after_step"] == BOUNDARIES[0] and redone["continuation"]["agent_status"] == "completed"
    kept = [r for r in results if r["after_step"] != BOUNDARIES[0]]
    assert all(redone["container"] != r["container"] for r in kept), "a new replay for the missing one"
    # the boundaries' snapshot images are gone (no spare container of the batch's workers holds one)
    assert not _snapshots_of({r["container"] for r in results} | {redone["container"]})


def test_a_refused_boundary_does_not_sink_the_others_continuations(tmp_path: Path) -> None:
    out = tmp_path / "out"
    (out / f"after-{BOUNDARIES[0]}").mkdir(parents=True)  # its directory exists: that boundary is refused
    args = [
        "-n",
        ",".join(map(str, BOUNDARIES)),
        "-o",
        str(out),
        "--continue",
        "--upstream",
        "mock",
        "--json",
    ]
    proc = replayer("run", str(SESSION), "-w", str(FIXTURE / "workspace"), *args, env=NO_KEY)
    assert proc.returncode == 7, proc.stderr
    shown = orjson.loads(proc.stdout)["boundaries"]
    assert shown[str(BOUNDARIES[0])]["error_kind"] == "output"
    assert shown[str(BOUNDARIES[1])]["continuation"]["agent_status"] == "completed"
    assert not any((out / f"after-{BOUNDARIES[0]}").iterdir()), "the existing directory is left as it was"


COMPARES = {
    "claude_code": (SESSION, (2, 3), ["--variant", "good=model=claude-good", "--variant", "bad=model=claude-bad",
                                      "--check", CLAUDE_CHECK]),
    "codex": (ROOT / "tests" / "fixtures" / PASSED["codex"][0], PASSED["codex"][1],
              ["--variant", "shared=", "--check", "test -f made.txt"]),
}  # fmt: skip
"""Compare across two boundaries: the recording, the boundaries, the variants and the check."""


def _compare(agent: str, source: Path, out: Path, n: str, upstream: str, flags: list[str]) -> dict:
    args = ["compare", str(source), "-n", n, "-w", str(source.parent / "workspace"), "-o", str(out)]
    proc = replayer(*args, "--upstream", upstream, *flags, "--json", env=KEYS)
    assert proc.returncode == 0, proc.stderr
    return orjson.loads(proc.stdout)


def _same_compare(alone: Path, forked: Path, agent: str) -> None:
    """`compare -n K` alone in `alone`, boundary K of `compare -n a,b` in `forked`: the same replay, the
    same boundary (its check, its snapshot's workspace), every run the same (outcome, check, the
    conversation and the workspace diff as `_continued` compares them), the same tally; but for timings,
    ids, and how each run was forked (`fork_path`: only the first boundary's runs start ahead)."""
    _same_result(alone / "replay", forked / "replay", agent)
    one = orjson.loads((alone / "compare.json").read_bytes())
    many = orjson.loads((forked / "compare.json").read_bytes())
    for field in ("after_step", "divergences", "degradations", "version", "reference_run", "common_actions"):
        assert many[field] == one[field], field
    check = ("command", "exit_code", "passed", "output")
    assert [many["boundary_check"][f] for f in check] == [one["boundary_check"][f] for f in check]
    assert _tree(forked / "snapshot" / "workspace") == _tree(alone / "snapshot" / "workspace")
    tally = ("name", "runs", "failed_runs", "agent_status", "steps_used", "check_passed", "input_tokens")
    assert [[v[f] for f in tally] for v in many["variants"]] == [
        [v[f] for f in tally] for v in one["variants"]
    ]
    assert len(many["runs"]) == len(one["runs"])
    for a, b in zip(one["runs"], many["runs"], strict=True):
        assert (b["variant"], b["repeat"], b["status"], b["dir"]) == (
            a["variant"],
            a["repeat"],
            "ok",
            a["dir"],
        )
        for field in ("gate", "agent_status", "input_condition", "steps_used"):
            assert b["continuation"][field] == a["continuation"][field], field
        assert b["check"]["passed"] == a["check"]["passed"] and b["first_difference"] == a["first_difference"]
        for field in ("timeline", "workspace_diff", "patch_diff"):
            assert _continued(orjson.dumps(b[field])) == _continued(orjson.dumps(a[field])), field
        assert _tree(forked / b["dir"] / "state" / "workspace") == _tree(
            alone / a["dir"] / "state" / "workspace"
        )


@pytest.mark.parametrize("agent", sorted(COMPARES))
def test_compare_at_several_boundaries_equals_a_compare_at_each(
    agent: str, tmp_path: Path, docker_client
) -> None:
    source, boundaries, flags = COMPARES[agent]
    script = Script(turns=[]) if agent == "claude_code" else AGENTS[agent][2]
    by_model = CLAUDE_SCRIPTS if agent == "claude_code" else {}  # a variant a model, each its script
    with scripted(agent, script, expected_key=KEY, by_model=by_model) as upstream:
        many = _compare(agent, source, tmp_path / "many", ",".join(map(str, boundaries)), upstream.url, flags)
        for k in _alone(agent, boundaries):
            _compare(agent, source, tmp_path / f"alone-{k}", str(k), upstream.url, flags)
    shown = many["boundaries"]
    assert sorted(shown) == sorted(str(k) for k in boundaries)
    replays = [
        orjson.loads((tmp_path / "many" / f"after-{k}" / "replay" / "result.json").read_bytes())
        for k in boundaries
    ]
    assert len({r["container"] for r in replays}) == 1, "one replay, in one container"
    for k in _alone(agent, boundaries):
        _same_compare(tmp_path / f"alone-{k}", tmp_path / "many" / f"after-{k}", agent)
    if agent == "codex":  # test_compare's check of every agent's compare, Codex's here
        made_in_every_run(tmp_path / f"alone-{boundaries[0]}", agent)
    summary = orjson.loads((tmp_path / "many" / "summary.json").read_bytes())
    assert [(b["after_step"], b["dir"], b["error"]) for b in summary["boundaries"]] == [
        (k, f"after-{k}", None) for k in boundaries
    ]
    for row in (b for b in summary["boundaries"] if b["after_step"] in _alone(agent, boundaries)):
        alone = orjson.loads((tmp_path / f"alone-{row['after_step']}" / "compare.json").read_bytes())
        assert row["boundary_check"]["passed"] == alone["boundary_check"]["passed"]
        assert [v["check_passed"] for v in row["variants"]] == [v["check_passed"] for v in alone["variants"]]
    # every compare's containers and snapshot images are gone (this test's: other modules compare meanwhile)
    runs = [r for c in tmp_path.glob("*/**/compare.json") for r in orjson.loads(c.read_bytes())["runs"]]
    ids = {r["container"].removeprefix("replayer-").rsplit("-", 1)[0] for r in runs}
    assert ids and all(i.startswith("cmp-") for i in ids), ids
    for label in (f"{COMPARE_LABEL}={i}" for i in ids):
        assert not docker_client.containers.list(all=True, filters={"label": label})
        assert not docker_client.images.list(filters={"label": label})


def test_compare_refuses_unreadable_or_invalid_boundaries_before_anything_starts(tmp_path: Path) -> None:
    base = ["compare", str(SESSION), "-w", str(FIXTURE / "workspace"), "-o", str(tmp_path / "o")]
    base += ["--upstream", "mock", "--variant", "a="]
    usage = replayer(*base, "-n", "2-")
    assert usage.returncode == 2 and "--after-step" in usage.stderr
    beyond = replayer(*base, "-n", "2,99")
    assert beyond.returncode == 4 and "boundary 99 is not one of" in beyond.stderr, beyond.stderr
    assert len(beyond.stderr.strip().splitlines()) == 1 and not (tmp_path / "o").exists()
