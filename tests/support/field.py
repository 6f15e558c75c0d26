"""The field corpus (tests/fixtures/field/, sources in its SOURCES.md) as the tests run it: the files each agent
reruns and continues, and the checks the agents' field modules (tests/adapters/<agent>/test_*_field.py) share.
The corpus-wide tests (every file listed, read by one form, prepared or refused) are tests/replayer/pipeline/test_field.py."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from replayer import api
from replayer.adapters import by_name
from replayer.bridges.gemini import ScriptedGemini
from replayer.bridges.scripted import LoggedRequest, Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn
from tests.conftest import ROOT, replayer
from tests.support.continuing import KEY

FIELD = ROOT / "tests" / "fixtures" / "field"
V0_LIST = FIELD / "openhands" / "v0-replay-basic.json"  # records no working directory

RUN = {
    # file: (boundary, the agent and version that rerun it, text its fresh observations put in the rebuild,
    # the options it needs)
    "claude_code/erk-2.1.50.jsonl": (3, "claude_code 2.1.50", b"erk: command not found", ()),
    "codex/acidicsoil-0.58.0-rollout-2025-11-17.jsonl": (3, "codex 0.58.0", b"No files were searched", ()),
    # 0.117.0-alpha.12 is not published: 0.117.0 runs, stated; boundary 10 lies after an interrupted turn the
    # user rolled back (`thread_rolled_back`) and after web searches, in the recorded personality
    "codex/caseware-0.117.0-alpha.12-rollout-2026-03-28.jsonl": (
        10,
        "codex 0.117.0",
        b"No such file or directory",
        ("--agent-version", "0.117.0"),
    ),
    # a bare rollout (no version: 0.58.0 is inferred); its first two steps call MCP servers not published
    "codex/acidicsoil-legacy-rollout-2025-09-10.jsonl": (
        4,
        "codex 0.58.0",
        b"total 0",
        ("--allow-degraded",),
    ),
    # a session that records no version: the release current at its `startTime` (npm's publish times) runs,
    # inferred; it is 0.34.0, whose banner the same user's CLI printed in a shell output of that session
    # (SOURCES.md). Its directory is not recorded (its read names a relative path): given
    "gemini_cli/aim-0.34.0-session-2026-03-18T01-56-3afe7bdc.json": (
        1,
        "gemini_cli 0.34.0",
        b"File not found",
        ("--cwd", "/home/kingb/aim"),
    ),
    # inferred it would be 0.35.0 (current on its day); --agent-version overrides that: the banner the same
    # user's CLI printed eight days before, v0.34.0, is stated
    "gemini_cli/aim-benchmark-control-pro-run4.json": (
        1,
        "gemini_cli 0.34.0",
        b"File not found",
        ("--agent-version", "0.34.0"),
    ),
    # a SWE-bench run: ProgressTrackingAgent, rerun as DefaultAgent (version.note says so)
    "mini_swe_agent/deepseek-v2.2.7-sqlfluff-2419.traj.json": (
        3,
        "mini_swe_agent 2.2.7",
        b"No such file or directory",
        (),
    ),
    # `opencode run --format json` prints no prompt and no directory: the prompt is given (it is unknown),
    # the directory inferred from the paths its reads name
    "opencode/sandcastle-run-format-json-stdout.jsonl": (
        1,
        "opencode 1.18.33",
        b"File not found",
        ("--task", "Summarize this repository."),
    ),
    # an earlier SDK's directory: the oldest SDK inferred, 1.26.0 (1.11 was current on its day)
    "openhands/v1-sdk-gpt4omini-pwd": (1, "openhands 1.26.0", None, ()),
    # the first of three runs appended to one log: its prompt is not in the log (given), its directory is
    # where its write resolved a relative path
    "opencode/repo-explainer-kubernetes-3-runs-format-json.jsonl": (
        2,
        "opencode 1.18.33",
        b"root root",
        ("--session", "ses_41198ad99ffe5ywIptV4Z4x4MH", "--task", "Write planning/overview.md."),
    ),
    "pi/pi-mono-large-session.jsonl": (1, "pi 0.73.1", b"ENOENT", ()),
}
ENDING = {
    # one scripted turn that ends the agent, as it ends: mini submits, OpenHands calls finish
    "mini_swe_agent": [
        ToolUseBlock(
            id="call_field_1", name="bash", input={"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"}
        )
    ],
    "openhands": [ToolUseBlock(id="call_field_1", name="finish", input={"message": "Finished."})],
}


def run_files(agent: str) -> list[str]:
    """The RUN files of `agent`'s folder of the corpus."""
    return sorted(name for name in RUN if name.split("/")[0] == agent)


def continue_field(
    name: str,
    boundary: int,
    agent: str,
    options: tuple[str, ...],
    tmp_path: Path,
    fork: bool = False,
    variants: tuple[str, ...] = ("one=",),
) -> tuple[subprocess.CompletedProcess[str], Path, list[LoggedRequest]]:
    """`replayer run --continue` of a field file in an empty workspace against the scripted upstream of the
    agent's wire, which ends the agent in one turn; `fork`: `replayer compare` of one run per variant
    instead."""
    out, empty = tmp_path / "out", tmp_path / "workspace"
    empty.mkdir()
    ending = Turn(blocks=ENDING.get(agent, [TextBlock(text="Finished.")]))
    scripted = ScriptedGemini if agent == "gemini_cli" else ScriptedUpstream
    spec = [a for v in variants for a in ("--variant", v)]
    verb = ("compare", *spec, "--repeat", "1") if fork else ("run", "--continue")
    script = Script(turns=[ending], model="fake-model", by_history=fork)
    with scripted(script, expected_key=KEY) as upstream:
        args = [verb[0], str(FIELD / name), "-n", str(boundary), "-w", str(empty), "-o", str(out), *options]
        proc = replayer(*args, *verb[1:], "--upstream", upstream.url, env={by_name(agent).key_env: KEY})
        sent = [r for r in upstream.log if r.main_thread]
    return proc, out, sent


def steps(path: Path, *, cwd: str | None = None) -> list[dict[str, Any]]:
    """What `replayer inspect --json` says of the file's steps (api.inspect, in this process)."""
    return api.inspect(path, cwd=cwd).model_dump(mode="json")["steps"]


def check_runs_at_its_own_version(name: str, tmp_path: Path) -> None:
    """Its workspace is not published, so the calls that read it differ; they are rerun all the same, by
    the agent of the version that recorded them, which then continues through the gate."""
    boundary, reruns, fresh, options = RUN[name]
    proc, out, sent = continue_field(name, boundary, reruns.split()[0], options, tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["version"]["reruns"] == f"{reruns}, its own code"
    statuses = [d["status"] for d in result["divergences"] if d["kind"] == "rerun"]
    assert statuses and "different" in statuses, result["divergences"]
    if fresh is not None:
        rebuilt = b"".join((out / f).read_bytes() for f in result["native_files"] if (out / f).is_file())
        assert fresh in rebuilt, "the fresh observation is in the rebuilt session"
    if name.startswith("claude_code"):
        assert statuses == ["different", "exact", "different"]
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1)
    assert len(sent) == 1 and sent[0].key_ok, "the first continuation request reached the upstream"
    if fresh is not None:
        assert fresh in orjson.dumps(sent[0].body), "the model is sent the fresh observation"


def _as_run(name: str) -> tuple[str, int, tuple[str, ...]]:
    boundary, _, _, options = RUN[name]
    return name, boundary, options


MOCK_ENDS = {
    # agent: a field file of it, its boundary and options (RUN's: the version that recorded it, or one stated)
    "claude_code": _as_run("claude_code/erk-2.1.50.jsonl"),
    "codex": _as_run("codex/acidicsoil-0.58.0-rollout-2025-11-17.jsonl"),
    "gemini_cli": _as_run("gemini_cli/aim-benchmark-control-pro-run4.json"),
    "mini_swe_agent": _as_run("mini_swe_agent/deepseek-v2.2.7-sqlfluff-2419.traj.json"),
    # 1.17.18 stated: the same run is test_opencode_field's session recorded before its ids wrapped
    "opencode": (
        "opencode/sandcastle-run-format-json-stdout.jsonl",
        1,
        ("--task", "Summarize this repository.", "--agent-version", "1.17.18"),
    ),
    "openhands": _as_run("openhands/v1-sdk-gpt4omini-pwd"),
    # V0 lists name no model: one LiteLLM takes is given
    "openhands_v0": (
        "openhands/v0-replay-basic.json",
        1,
        ("--cwd", "/workspace", "--model", "openai/fake-model"),
    ),
    "pi": _as_run("pi/pi-mono-large-session.jsonl"),
}
A_FEW = 3
"""Main-thread requests a continuation the bare mock ends may take (its first answer ends it)."""


def check_the_bare_mock_ends_it(agent: str, tmp_path: Path) -> None:
    """For every agent, a real field file at the version that reruns it, continued against bare `mock`
    (whose first answer ends the session the agent's way): `completed` in a few requests, its session read
    back."""
    check_the_bare_mock_ended(continue_against_the_mock(*MOCK_ENDS[agent], tmp_path)["continuation"])


def check_the_bare_mock_ended(cont: dict) -> None:
    """What check_the_bare_mock_ends_it asserts of the continuation (for a module that shares its run)."""
    assert (cont["gate"], cont["agent_status"]) == ("accepted", "completed"), cont
    assert 1 <= cont["steps_used"] <= A_FEW and cont["mock"]
    assert not [f for f in cont["files"] if f.endswith("_error")], cont["files"]


def continue_against_the_mock(name: str, boundary: int, options: tuple[str, ...], tmp_path: Path) -> dict:
    out, empty = tmp_path / "out", tmp_path / "workspace"
    empty.mkdir()
    args = ("run", str(FIELD / name), "-n", str(boundary), "-w", str(empty), "-o", str(out), *options)
    proc = replayer(*args, "--continue", "--upstream", "mock", "--max-requests", "20")
    assert proc.returncode == 0, proc.stderr
    return orjson.loads((out / "result.json").read_bytes())


MOCK_RUNS = {
    # file: (boundary, options, the version that reruns it): continued against bare `mock` at its own version
    # Claude Code 2.1.177 (Bedrock ids): a task nag merged into a tool result under -p, a ToolSearch result of
    # tool_reference blocks, a split message whose results hang on sibling branches; its Skill calls kept
    "claude_code/bhavana-2.1.177-task-nag-tool-reference.jsonl": (6, ("--allow-degraded",), "2.1.177"),
    # Claude Code 2.1.126: @-mentioned files, hook contexts and a date change merged into step 2's result
    "claude_code/lokal-2.1.126-date-change-pat-redacted.jsonl": (3, ("--allow-degraded",), "2.1.126"),
    # a codex-tui rollout of 0.128.0
    "codex/soul-0.128.0-codex-tui-rollout.jsonl": (1, (), "0.128.0"),
}


def mock_run_test(agent: str) -> Callable[..., None]:
    """An agent's field module's test of its MOCK_RUNS files (assigned to that name in the module)."""

    @pytest.mark.agent
    @pytest.mark.docker
    @pytest.mark.parametrize("name", sorted(n for n in MOCK_RUNS if n.split("/")[0] == agent))
    def test_a_field_file_continues_against_the_mock_at_its_own_version(name: str, tmp_path: Path) -> None:
        boundary, options, version = MOCK_RUNS[name]
        result = continue_against_the_mock(name, boundary, options, tmp_path)
        assert result["version"]["reruns"] == f"{agent} {version}, its own code"
        cont = result["continuation"]
        assert (cont["gate"], cont["agent_status"]) == ("accepted", "completed"), cont
        assert [d["status"] for d in result["divergences"] if d["kind"] == "rerun"], "its calls were rerun"

    return test_a_field_file_continues_against_the_mock_at_its_own_version


AIM_034 = "gemini_cli/aim-0.34.0-session-2026-03-18T01-56-3afe7bdc.json"
LOCALPUSH = "codex/localpush-0.104.0-alpha.1-sanitized-rollout-2026-02-23.jsonl"
DEGRADED = {
    # file: (boundary, options, the calls kept historical, text of a kept observation)
    # tools of a Pi extension (brunch's graph tools), which no Pi release has
    "pi/brunch-extension-tools-propose-graph-commit.jsonl": (
        2,
        (),
        ["read_graph", "commit_graph"],
        b"The graph is empty (no nodes or edges).",
    ),
    # Gemini CLI's cli_help subagent between two rerun calls, driven at the version that recorded it
    AIM_034: (
        3,
        ("--agent-version", "0.34.0", "--cwd", "/home/kingb/aim"),
        ["cli_help"],
        b"Subagent 'cli_help' finished.",
    ),
    # MCP tools of a Codex Desktop session recorded under workspace-write and on-request, sanitized by its
    # publisher (every text and argument redacted): 0.104 resumes it with the permission notice, the
    # personality and AGENTS.md again, as it does on every resume
    LOCALPUSH: (
        5,
        ("--agent-version", "0.104.0"),
        ["mcp__cloud-associates__search_workflows", "[REDACTED_NAME len=43 sha=c186413b]"]
        + ["mcp__cloud-associates__execute_workflow"] * 3,
        b"[REDACTED_OUTPUT len=16329 sha=b2b9cdde]",
    ),
}


def degraded_files(agent: str) -> list[str]:
    return sorted(name for name in DEGRADED if name.split("/")[0] == agent)


def check_allow_degraded_keeps_the_historical_observation(name: str, tmp_path: Path) -> tuple[Path, dict]:
    """Refused without the flag before anything starts; with it, each such call keeps its historical
    observation (recorded with the reason), the other calls are rerun, and the agent continues. The result
    directory, and what the upstream received first."""
    boundary, options, kept, text = DEGRADED[name]
    agent = name.split("/")[0]
    args = ["run", str(FIELD / name), "-n", str(boundary), "-w", str(tmp_path), "-o", str(tmp_path / "r")]
    refused = replayer(*args, *options)
    assert refused.returncode == 4 and "--allow-degraded keeps its historical observation" in refused.stderr
    assert not (tmp_path / "r").exists()
    proc, out, sent = continue_field(name, boundary, agent, ("--allow-degraded", *options), tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    degraded = result["degradations"]
    assert [d["tool"] for d in degraded] == kept
    assert all(d["action"] == "historical_kept" and d["tool"] in d["reason"] for d in degraded)
    rebuilt = b"".join((out / f).read_bytes() for f in result["native_files"] if (out / f).is_file())
    assert text in rebuilt, "the historical observation is in the rebuilt session"
    reruns = [d["status"] for d in result["divergences"] if d["kind"] == "rerun"]
    assert len(reruns) == boundary - len(kept)
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1)
    assert len(sent) == 1 and text in orjson.dumps(sent[0].body)
    return out, sent[0].body


def own_version_tests(agent: str) -> tuple[Callable[..., None], Callable[..., None]]:
    """An agent's field module's two tests: its RUN files at their own version, its MOCK_ENDS file against
    bare `mock`. The module assigns them to those names (pytest collects them there)."""

    @pytest.mark.agent
    @pytest.mark.docker
    @pytest.mark.parametrize("name", run_files(agent))
    def test_a_field_trajectory_runs_at_its_own_version(name: str, tmp_path: Path) -> None:
        check_runs_at_its_own_version(name, tmp_path)

    @pytest.mark.agent
    @pytest.mark.docker
    def test_a_field_continuation_ends_when_the_bare_mock_ends_it(tmp_path: Path) -> None:
        check_the_bare_mock_ends_it(agent, tmp_path)

    test_a_field_trajectory_runs_at_its_own_version.__doc__ = check_runs_at_its_own_version.__doc__
    test_a_field_continuation_ends_when_the_bare_mock_ends_it.__doc__ = check_the_bare_mock_ends_it.__doc__
    return (
        test_a_field_trajectory_runs_at_its_own_version,
        test_a_field_continuation_ends_when_the_bare_mock_ends_it,
    )


def degraded_test(agent: str) -> Callable[..., None]:
    """An agent's field module's test of its DEGRADED files (assigned to that name in the module)."""

    @pytest.mark.agent
    @pytest.mark.docker
    @pytest.mark.parametrize("name", degraded_files(agent))
    def test_allow_degraded_keeps_the_historical_observation_of_a_tool_no_rerun_has(
        name: str, tmp_path: Path
    ) -> None:
        check_allow_degraded_keeps_the_historical_observation(name, tmp_path)

    test_allow_degraded_keeps_the_historical_observation_of_a_tool_no_rerun_has.__doc__ = (
        check_allow_degraded_keeps_the_historical_observation.__doc__
    )
    return test_allow_degraded_keeps_the_historical_observation_of_a_tool_no_rerun_has
