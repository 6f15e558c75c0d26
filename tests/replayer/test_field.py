"""The field corpus (tests/fixtures/field/, sources in its SOURCES.md): real trajectories other people
published, written by other versions than the pins. Each is prepared at default settings at its last
complete boundary, or refused in one line for a reason listed here (the shapes issue 18 takes on);
one file per agent runs at its own version, with an empty workspace, and continues through the gate
against the scripted upstream."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from replayer import adapters, api
from replayer.adapters import by_name
from replayer.bridges.gemini import ScriptedGemini
from replayer.bridges.scripted import LoggedRequest, Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn
from tests.conftest import ROOT, replayer
from tests.support.continuing import KEY

FIELD = ROOT / "tests" / "fixtures" / "field"
PREPARED = {
    "claude_code/erk-2.0.67-ci-pr-address.jsonl": ("claude_code", "2.0.67", "recorded"),
    "claude_code/erk-2.0.67-compacted.jsonl": ("claude_code", "2.0.67", "recorded"),
    "claude_code/erk-2.1.50.jsonl": ("claude_code", "2.1.50", "recorded"),
    "claude_code/erk-2.1.63.jsonl": ("claude_code", "2.1.63", "recorded"),
    "codex/acidicsoil-0.58.0-rollout-2025-11-17.jsonl": ("codex", "0.58.0", "recorded"),
    "codex/acidicsoil-0.63.0-session-meta-only.jsonl": ("codex", "0.63.0", "recorded"),
    # Codex Desktop rollouts of alpha builds (npm has no such release: `run` takes --agent-version, stated)
    "codex/caseware-0.117.0-alpha.12-rollout-2026-03-28.jsonl": ("codex", "0.117.0-alpha.12", "recorded"),
    "codex/caseware-0.118.0-alpha.2-rollout-2026-03-29-email-redacted.jsonl": (
        "codex",
        "0.118.0-alpha.2",
        "recorded",
    ),
    # compacted once, mid-turn, after step 84 (a remote compaction: its replacement ends in a `compaction` item)
    "codex/caseware-0.118.0-alpha.2-compacted-rollout-2026-03-28.jsonl": (
        "codex",
        "0.118.0-alpha.2",
        "recorded",
    ),
    # a bare rollout from before the envelope records no version, and its CLI cannot resume it: the oldest
    # verified release that can and offers its `shell` tool runs (version.note says why)
    "codex/acidicsoil-legacy-rollout-2025-09-10.jsonl": ("codex", "0.58.0", "inferred"),
    # Gemini CLI records no version in its sessions: the release current at `startTime` runs (npm's publish
    # times), no older than 0.34.0 (the pomodoro document's 0.8.2 is older) and no newer than the pin
    "gemini_cli/aim-0.34.0-session-2026-03-18T01-56-3afe7bdc.json": ("gemini_cli", "0.34.0", "inferred"),
    # a subagent's own session: no step (tests/replayer/test_subagent_files.py)
    "gemini_cli/aim-0.34.0-subagent-session-2026-03-18T01-57-3afe7bdc.json": (
        "gemini_cli",
        "0.34.0",
        "inferred",
    ),
    "gemini_cli/aim-benchmark-control-pro-run4.json": ("gemini_cli", "0.35.0", "inferred"),
    "gemini_cli/aim-session-2026-03-18T01-58-b26e4930.json": ("gemini_cli", "0.34.0", "inferred"),
    "gemini_cli/yoavf-pomodoro-2025-10-21.json": ("gemini_cli", "0.34.0", "inferred"),
    "mini_swe_agent/deepseek-v2.2.7-sqlfluff-2419.traj.json": ("mini_swe_agent", "2.2.7", "recorded"),
    # 1.x: run by the 1.x release that wrote it
    "mini_swe_agent/gemini3pro-v1.15-django-16255.traj.json": ("mini_swe_agent", "1.15.0", "recorded"),
    # V0 lists of January 2025 (openhands-ai 0.21 was current): the oldest release inferred, 0.35.0, runs
    "openhands/v0-replay-basic.json": ("openhands_v0", "0.35.0", "inferred"),
    "openhands/v0-replay-basic_gui_mode.json": ("openhands_v0", "0.35.0", "inferred"),
    "openhands/v0-replay-basic_interactions.json": ("openhands_v0", "0.35.0", "inferred"),
    # an earlier SDK's directory (13 base-state keys; 1.34.0 writes 20): not read from its features; by its
    # first event's time (SDK 1.11 was current), the oldest release inferred, 1.26.0, runs
    "openhands/v1-sdk-gpt4omini-pwd": ("openhands", "1.26.0", "inferred"),
    # `opencode run --format json` output: no prompt, which only a continuation needs (test_opencode_logs.py)
    "opencode/sandcastle-run-format-json-stdout.jsonl": ("opencode", "1.18.33", "default"),
    # Pi names no CLI version: the release current at the header's timestamp runs; the pi-mono sessions are
    # older than any release the registry lists, so the pin runs them (version.note says so)
    "pi/brunch-extension-tools-propose-graph-commit.jsonl": ("pi", "0.73.0", "inferred"),
    "pi/pi-mono-before-compaction.jsonl": ("pi", "0.73.1", "default"),
    "pi/pi-mono-large-session.jsonl": ("pi", "0.73.1", "default"),
    "pi/sandcastle-v3-resumed-0.73.1.jsonl": ("pi", "0.73.0", "inferred"),
    # derived (SOURCES.md): two records on one line, skipped as Pi skips them (a parse note says so)
    "pi/sandcastle-v3-resumed-0.73.1-lines-5-6-joined.jsonl": ("pi", "0.73.0", "inferred"),
}
REFUSED = {
    # V1 events saved as a plain list by a benchmark harness, not a conversation directory
    "openhands/v1-benchmarks-eventlist-backup-cron-job.json": (3, "unknown format"),
    # a newer SDK's event kind
    "openhands/v1-sdk-probeagent-mockllm": (3, "unknown event kind 'SystemPromptUpdateEvent'"),
}


MULTI = {
    # an OpenHands evaluation output of three instances (tests/replayer/test_multisession.py)
    "openhands/multi-swe-bench-example-output.jsonl",
    # a session and its subagent's file, where the CLI keeps them (tests/replayer/test_subagent_files.py)
    "claude_code/spotter-2.1.39",
    # three `opencode run --format json` runs appended to one log (below)
    "opencode/repo-explainer-kubernetes-3-runs-format-json.jsonl",
}


def test_every_field_file_is_listed() -> None:
    found = {str(p.relative_to(FIELD)) for p in FIELD.glob("*/*")}
    assert found == set(PREPARED) | set(REFUSED) | MULTI | set(DEGRADED)


@pytest.mark.parametrize("name", sorted(PREPARED))
def test_each_field_file_is_of_exactly_one_native_form_of_its_agent(name: str) -> None:
    """Every agent declares its native forms (adapters/forms.py); a real file of another person's is claimed
    by exactly one form of one agent: none would be 'unknown format', two would read it by chance of order."""
    head = adapters.read_head(FIELD / name)
    claims = [
        (agent, form.name)
        for agent in adapters.REGISTRY
        for form in adapters.adapter_class(agent).forms
        if form.detect(head)
    ]
    assert len(claims) == 1 and claims[0][0] == PREPARED[name][0], claims
    adapter, form = adapters.detect_form(FIELD / name)
    assert (adapter.name, form.name) == claims[0]
    assert api.inspect(FIELD / name).native_form == form.name  # inspect says which form it read


def _last_boundary(path: Path) -> int:
    steps = orjson.loads(replayer("inspect", str(path), "--json", check=True).stdout)["steps"]
    last = 0
    for step in steps:
        if not step["complete"] or step["final"]:
            break
        last = step["index"]
    return last


@pytest.mark.parametrize("name", sorted(PREPARED))
def test_a_field_trajectory_is_prepared_at_default_settings(name: str, tmp_path: Path) -> None:
    path, out = FIELD / name, tmp_path / "out"
    replayer("prepare", str(path), "-n", str(_last_boundary(path)), "-o", str(out), check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    ran = result["version"]
    assert (result["agent"], ran["version"], ran["source"]) == PREPARED[name]
    assert (out / "expected_prefix.json").is_file() and result["degradations"] == []


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_field_shape_not_read_yet_is_refused_in_one_line(name: str) -> None:
    code, message = REFUSED[name]
    proc = replayer("inspect", str(FIELD / name))
    assert proc.returncode == code and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


SANDCASTLE = "/home/mattpocock/repos/ai/sandcastle"  # where its reads went; the event log records no cwd
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


def _continue(
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


@pytest.mark.agent
@pytest.mark.docker
@pytest.mark.parametrize("name", sorted(RUN))
def test_a_field_trajectory_runs_at_its_own_version(name: str, tmp_path: Path) -> None:
    """Its workspace is not published, so the calls that read it differ; they are rerun all the same, by
    the agent of the version that recorded them, which then continues through the gate."""
    boundary, reruns, fresh, options = RUN[name]
    proc, out, sent = _continue(name, boundary, reruns.split()[0], options, tmp_path)
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


@pytest.mark.agent
@pytest.mark.docker
@pytest.mark.parametrize("name", sorted(DEGRADED))
def test_allow_degraded_keeps_the_historical_observation_of_a_tool_no_rerun_has(
    name: str, tmp_path: Path
) -> None:
    """Refused without the flag before anything starts; with it, each such call keeps its historical
    observation (recorded with the reason), the other calls are rerun, and the agent continues."""
    boundary, options, kept, text = DEGRADED[name]
    agent = name.split("/")[0]
    args = ["run", str(FIELD / name), "-n", str(boundary), "-w", str(tmp_path), "-o", str(tmp_path / "r")]
    refused = replayer(*args, *options)
    assert refused.returncode == 4 and "--allow-degraded keeps its historical observation" in refused.stderr
    assert not (tmp_path / "r").exists()
    proc, out, sent = _continue(name, boundary, agent, ("--allow-degraded", *options), tmp_path)
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
    if agent == "pi":
        _pi_reads_back_what_it_sent(out, sent[0].body["messages"])


def _pi_reads_back_what_it_sent(out: Path, received: list[dict[str, Any]]) -> None:
    """A Pi result read back (continued_prefix, export, the report) is item for item what the upstream
    received (after Pi's system message: the prefix), then the agent's answer."""
    from replayer.pipeline import timeline
    from replayer.verbs import export, view

    adapter = by_name("pi")
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert received[0]["role"] == "system" and received[1:] == expected
    continued = adapter.continued_prefix(out)
    assert continued is not None and continued[: len(received) - 1] == received[1:]
    dialect = adapter.dialect()
    answer = {"role": "assistant", "content": "Finished."}
    assert export.chat_record(out)["messages"] == [*dialect.to_chat(received[1:]), answer]
    assert view.load(out).continuation == timeline.entries([answer], view.TEXT_CHARS)


@pytest.mark.agent
@pytest.mark.docker
def test_the_pinned_gemini_cli_continues_a_published_session_of_an_older_version(tmp_path: Path) -> None:
    """The pin (0.61, stated: 0.35.0 is inferred) resumes the 0.34-era document rebuilt as its log: in the folder its registry names
    (`django-control-pro`), not deleted by its cleanup for being months old, and without the recorded
    thoughts, which it does not send for a Gemini 3 model."""
    name = "gemini_cli/aim-benchmark-control-pro-run4.json"
    proc, out, sent = _continue(name, 1, "gemini_cli", ("--agent-version", "0.61.0"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["version"]["version"] == "0.61.0" and result["continuation"]["gate"] == "accepted"
    assert result["native_files"][0].startswith("native/home/.gemini/tmp/django-control-pro/chats/")
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    recorded = orjson.loads((FIELD / name).read_bytes())["messages"]
    assert recorded[1]["thoughts"] and not any(p.get("thought") for c in expected for p in c["parts"])
    assert len(sent) == 1 and not any(p.get("thought") for c in sent[0].body["contents"] for p in c["parts"])


V0_LIST = FIELD / "openhands" / "v0-replay-basic.json"  # records no working directory


def _cwd(name: str, *options: str) -> tuple[str | None, str | None]:
    report = orjson.loads(replayer("inspect", str(FIELD / name), "--json", *options, check=True).stdout)
    return report["cwd"], report["cwd_source"]


def test_the_working_directory_is_inferred_where_the_file_reveals_it(tmp_path: Path) -> None:
    """A V0 list without a command observation works in V0's fixed /workspace, where its editor's paths
    are; an `opencode run --format json` log in the folder its reads name; --cwd overrides either."""
    assert _cwd("openhands/v0-replay-basic.json") == ("/workspace", "inferred")
    assert _cwd("openhands/v0-replay-basic_gui_mode.json") == ("/workspace", "recorded")
    sandcastle = "opencode/sandcastle-run-format-json-stdout.jsonl"
    assert _cwd(sandcastle, "--task", "Summarize this repository.") == (SANDCASTLE, "inferred")
    assert _cwd(sandcastle, "--task", "t", "--cwd", "/srv/sandcastle") == ("/srv/sandcastle", "stated")
    assert _cwd("claude_code/erk-2.1.50.jsonl")[1] == "recorded"
    out = tmp_path / "out"
    replayer("prepare", str(V0_LIST), "-n", "1", "-o", str(out), check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    assert (result["cwd"], result["cwd_source"]) == ("/workspace", "inferred")
    text = replayer("inspect", str(V0_LIST), check=True).stdout
    assert "cwd /workspace (inferred)" in text


def test_a_recorded_cwd_that_is_not_absolute_is_refused_before_anything_starts(tmp_path: Path) -> None:
    """A publisher's anonymised cwd (here made so from a real session) never reaches Docker: run refuses
    it in one line naming --cwd, which replaces it."""
    recorded = (FIELD / "claude_code" / "erk-2.1.50.jsonl").read_bytes()
    anonymised = tmp_path / "26efdcc5-de34-4028-a984-9a094a9fa95b.jsonl"
    anonymised.write_bytes(
        recorded.replace(b'"cwd":"/Users/schrockn/.erk/repos/erk/worktrees/erk-slot-36"', b'"cwd":"erk"')
    )
    empty, out = tmp_path / "workspace", tmp_path / "out"
    empty.mkdir()
    proc = replayer("run", str(anonymised), "-n", "1", "-w", str(empty), "-o", str(out))
    assert proc.returncode == 4 and "not an absolute path" in proc.stderr and "--cwd" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()
    report = orjson.loads(
        replayer("inspect", str(anonymised), "--cwd", "/work/erk", "--json", check=True).stdout
    )
    assert (report["cwd"], report["cwd_source"]) == ("/work/erk", "stated")


@pytest.mark.agent
@pytest.mark.docker
def test_a_v0_list_without_a_system_event_continues_through_the_gate(tmp_path: Path) -> None:
    """The file records no system message; the agent sends its own first, which the gate takes as the
    agent's and reports, holding the rest of the request to the rebuilt prefix exactly. The pin runs it (the
    inferred 0.35.0 sends fake-model its text form, which the prefix compared here is not)."""
    from replayer.bridges.scripted import Script, ScriptedUpstream, ToolUseBlock, Turn
    from tests.support.continuing import KEY

    out, empty = tmp_path / "out", tmp_path / "workspace"
    empty.mkdir()
    finish = Turn(blocks=[ToolUseBlock(id="call_field_1", name="finish", input={"message": "done"})])
    with ScriptedUpstream(Script(turns=[finish], model="fake-model"), expected_key=KEY) as upstream:
        args = ["run", str(V0_LIST), "-n", "1", "--cwd", "/workspace", "-w", str(empty), "-o", str(out)]
        args += [
            "--continue",
            "--upstream",
            upstream.url,
            "--model",
            "openai/fake-model",
            "--agent-version",
            "1.6.0",
        ]
        proc = replayer(*args, env={"OPENAI_API_KEY": KEY})
        log = list(upstream.log)
    assert proc.returncode == 0, proc.stderr
    cont = orjson.loads((out / "result.json").read_bytes())["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1)
    assert len(cont["gate_notes"]) == 1 and cont["gate_notes"][0].startswith("messages[0]: the file records")
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert expected[0]["role"] == "user" and log[0].body["messages"][0]["role"] == "system"
    assert log[0].body["messages"][1:] == expected


@pytest.mark.parametrize(
    ("name", "cwd", "message"),
    [
        ("claude_code/erk-2.1.50.jsonl", "/elsewhere", "--cwd is for files that record none"),
        ("openhands/v0-replay-basic.json", "workspace", "absolute, normalized"),
        ("openhands/v0-replay-basic.json", "/work/../etc", "absolute, normalized"),
    ],
)
def test_cwd_is_refused_where_it_would_contradict_the_file_or_is_no_plain_path(
    name: str, cwd: str, message: str
) -> None:
    proc = replayer("inspect", str(FIELD / name), "--cwd", cwd)
    assert proc.returncode == 3 and message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_inspect_says_why_a_call_is_unknown(tmp_path: Path) -> None:
    legacy = FIELD / "codex" / "acidicsoil-legacy-rollout-2025-09-10.jsonl"
    report = orjson.loads(replayer("inspect", str(legacy), "--json", check=True).stdout)
    calls = [c for s in report["steps"] for c in s["calls"]]
    unknown = [c for c in calls if c["kind"] == "unknown"]
    assert unknown and all(c["reason"] and c["tool"] in c["reason"] for c in unknown)
    assert {c["tool"] for c in unknown} >= {"task-master-ai__next_task", "memory__create_entities"}  # MCP
    assert all(c["reason"] is None for c in calls if c["kind"] != "unknown")
    assert {c["kind"] for c in calls if c["tool"] == "shell"} == {"rerun"}, "0.58.0's own tool"
    # the same file at the pin (its version removed from a real 0.58.0 rollout): `shell` is not the pin's
    recorded = (FIELD / "codex" / "acidicsoil-0.58.0-rollout-2025-11-17.jsonl").read_bytes()
    unversioned = tmp_path / "rollout-2025-11-17T21-34-41-019a93b4-2c1b-7f42-a5d1-b3a0a1b5f2a0.jsonl"
    unversioned.write_bytes(recorded.replace(b'"cli_version":"0.58.0"', b'"cli_version":""', 1))
    text = replayer("inspect", str(unversioned), check=True).stdout
    assert "unknown: unknown tool 'shell'" in text and "--agent-version V" in text


def test_inspect_shows_the_starting_state_the_file_records() -> None:
    def start(name: str) -> dict | None:
        return orjson.loads(replayer("inspect", str(FIELD / name), "--json", check=True).stdout)["start"]

    assert start("codex/acidicsoil-0.58.0-rollout-2025-11-17.jsonl") == {
        "repository_url": "git@github.com:AcidicSoil/chatbot-ui.git",
        "commit": "0f022a043b3f8ca67224e1c56d5b85e28a81b910",
        "branch": "main",
    }
    assert start("claude_code/erk-2.1.50.jsonl") == {
        "repository_url": None,
        "commit": None,
        "branch": "plnd/add-print-python-02-23-1109",
    }
    assert start("pi/pi-mono-large-session.jsonl") is None
    text = replayer(
        "inspect", str(FIELD / "codex" / "acidicsoil-0.58.0-rollout-2025-11-17.jsonl"), check=True
    )
    assert "started from git@github.com:AcidicSoil/chatbot-ui.git at 0f022a0" in text.stdout


@pytest.mark.agent
@pytest.mark.docker
def test_a_mini_swe_agent_1x_run_reruns_and_continues_by_its_own_release(tmp_path: Path) -> None:
    """The real SWE-bench run of 1.15.0 (OpenRouterModel, DockerEnvironment, the batch runner's agent) reruns
    by 1.15.0's own DefaultAgent and DockerEnvironment; its continuation queries through 1.15.0's LitellmModel,
    which sends the messages whole as 1.15.0 did (`extra` included), and passes the gate. Run by 2.x (stated),
    it cannot continue, which is refused in one line before anything starts."""
    gemini = FIELD / "mini_swe_agent" / "gemini3pro-v1.15-django-16255.traj.json"
    empty = tmp_path / "workspace"
    empty.mkdir()
    script = tmp_path / "mock.json"  # a model litellm prices: the run recorded `cost_tracking: default`
    script.write_text('{"turns": [], "model": "gpt-4o"}')
    args = ["run", str(gemini), "-n", "3", "-w", str(empty)]
    cont = ["--continue", "--upstream", f"mock:{script}", "--model", "openai/gpt-4o"]
    refused = replayer(*args, "-o", str(tmp_path / "2x"), *cont, "--agent-version", "2.4.6")
    assert refused.returncode == 4 and "2.4.6 sends a different wire form" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "2x").exists()
    out = tmp_path / "out"
    replayer(*args, "-o", str(out), *cont, check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    version = result["version"]
    assert (version["version"], version["source"], version["reruns"]) == (
        "1.15.0",
        "recorded",
        "mini_swe_agent 1.15.0, its own code",
    )
    assert "OpenRouterModel" in version["note"] and "ProgressTrackingAgent" in version["note"]
    assert [d["kind"] for d in result["divergences"]] == ["rerun"] * 3 and result["degradations"] == []
    assert (result["continuation"]["gate"], result["continuation"]["agent_status"]) == (
        "accepted",
        "completed",
    )
    prefix = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert "response" in prefix[2]["extra"], "1.15.0 sent each message whole"
    continued = orjson.loads((out / "continued" / "trajectory.traj.json").read_bytes())
    assert (continued["info"]["mini_version"], continued["info"]["exit_status"]) == ("1.15.0", "Submitted")
    assert continued["instance_id"] == "django__django-16255"


@pytest.mark.agent
@pytest.mark.docker
def test_a_v0_evaluation_output_of_0_35_0_reruns_and_continues_by_that_versions_code(tmp_path: Path) -> None:
    """openhands-ai 0.35.0 runs in the sandbox (its own config loader, the kernel gateway its runtime starts,
    no browser); the ponyc repository is not published with the output, so both reruns differ. With the
    recorded model and `native_tool_calling: null`, 0.35.0 calls functions in its text form: the companion
    renders the first request with 0.35.0's converter. The evaluation ran a development commit reporting
    0.35.0 whose system prompt is not the release's: the gate holds the recorded one and refuses the
    release's, in one line at that text."""
    name = "openhands/multi-swe-bench-example-output.jsonl"
    options = ("--session", "ponylang__ponyc-4595")
    proc, out, sent = _continue(name, 2, "openhands", options, tmp_path)
    said = [line for line in proc.stderr.strip().splitlines() if not line.startswith("installed ")]
    assert proc.returncode == 8 and len(said) == 1, proc.stderr  # (the first run installs 0.35.0: said so)
    result = orjson.loads((out / "result.json").read_bytes())
    assert (result["version"]["version"], result["version"]["reruns"]) == (
        "0.35.0",
        "openhands_v0 0.35.0, its own code",
    )
    assert [(d["kind"], d["status"]) for d in result["divergences"]] == [("rerun", "different")] * 2
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"]) == ("refused", "bridge_refused") and sent == []
    assert (cont["model"], cont["metadata"]["function_calling"]) == (
        "openai/openrouter-llama-4-maverick",
        "text (fn_call_converter)",
    )
    # the text form (string contents): only the system prompt's text differs
    assert cont["mismatch"]["path"] == "messages[0].content"
    stderr = (out / "agent" / "stderr.log").read_text()
    assert "[agent] enable_mcp, enable_plan_mode: not in this version, left out" in stderr


@pytest.mark.agent
@pytest.mark.docker
def test_agent_env_reaches_the_reruns(tmp_path: Path) -> None:
    """The recording's environment (--agent-env) applies to the reruns, not only the continuation: the
    django run's `python3 reproduce_issue.py` (step 4) imports the workspace's `django` package, whose
    bytecode cache Python writes unless the run was recorded with PYTHONDONTWRITEBYTECODE=1."""
    django = FIELD / "mini_swe_agent" / "gemini3pro-v1.15-django-16255.traj.json"
    for options, cached in (((), True), (("--agent-env", "PYTHONDONTWRITEBYTECODE=1"), False)):
        workspace, out = tmp_path / f"workspace-{cached}", tmp_path / f"out-{cached}"
        (workspace / "django").mkdir(parents=True)
        (workspace / "django" / "__init__.py").write_text("")
        replayer("run", str(django), "-n", "4", "-w", str(workspace), "-o", str(out), *options, check=True)
        assert (out / "state" / "workspace" / "django" / "__pycache__").is_dir() == cached
        result = orjson.loads((out / "result.json").read_bytes())
        assert result["request"]["agent_env"] == dict([o.split("=") for o in options[1:]])


COMPACTED = "claude_code/erk-2.0.67-compacted.jsonl"  # 73 steps, a compaction, 1 step
SUMMARY = b"This session is being continued from a previous conversation"


def test_a_boundary_before_the_last_compaction_cuts_the_history_there(tmp_path: Path) -> None:
    """Claude Code: the cut drops the compaction and everything after it; the prefix is the history the
    compaction summarized, up to the cut (Codex: tests/adapters/codex/test_codex_refusals.py)."""
    report = orjson.loads(replayer("inspect", str(FIELD / COMPACTED), "--json", check=True).stdout)
    assert [s["before_compaction"] for s in report["steps"]] == [True] * 73 + [False]
    for boundary, summarized in ((5, False), (73, True)):
        out = tmp_path / str(boundary)
        replayer("prepare", str(FIELD / COMPACTED), "-n", str(boundary), "-o", str(out), check=True)
        expected = (out / "expected_prefix.json").read_bytes()
        assert (SUMMARY in expected) == summarized
    steps = orjson.loads((tmp_path / "5" / "result.json").read_bytes())["boundary_call_ids"]
    assert steps == [c["id"] for c in report["steps"][4]["calls"]]
    assert orjson.loads((tmp_path / "5" / "expected_prefix.json").read_bytes())[-1]["role"] == "user"


@pytest.mark.agent
@pytest.mark.docker
def test_the_cli_resumes_the_whole_history_up_to_a_cut_before_the_compaction(tmp_path: Path) -> None:
    """The pinned CLI resumes the rebuilt session cut at step 1 of a compacted one: its first continuation
    request carries that history whole (the gate holds it to the prefix), not the summary. The file's own
    2.0.67 sends its stored tool_use blocks without `caller` (not modelled yet), so the pin runs it."""
    pin = by_name("claude_code").version()
    proc, out, sent = _continue(COMPACTED, 1, "claude_code", ("--agent-version", pin), tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1)
    assert len(sent) == 1, "the gate held the first request to the prefix cut at step 1"
    body = orjson.dumps(sent[0].body)
    assert result["boundary_call_ids"][0].encode() in body and b"<command-args>8511</command-args>" in body
    assert SUMMARY not in body
    inspect = orjson.loads(replayer("inspect", str(FIELD / COMPACTED), "--json", check=True).stdout)
    assert not any(c["id"].encode() in body for s in inspect["steps"][1:] for c in s["calls"])


@pytest.mark.agent
@pytest.mark.docker
def test_the_cli_reruns_an_auto_compaction_and_resumes_the_session_compacted(tmp_path: Path) -> None:
    """The session compacted itself mid-turn after step 73: the CLI reruns steps 1-74 in one run, fed through
    the compaction (tests/adapters/claude_code/test_compaction.py: the manual one), and the continuation from
    74 resumes the rebuilt session compacted: its first request carries the recorded summary and step 74,
    none of the calls it summarized."""
    pin = by_name("claude_code").version()
    options = ("--agent-version", pin, "--allow-degraded")
    proc, out, sent = _continue(COMPACTED, 74, "claude_code", options, tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1)
    steps = orjson.loads(replayer("inspect", str(FIELD / COMPACTED), "--json", check=True).stdout)["steps"]
    rerun = {d["call_id"] for d in result["divergences"] if d["kind"] == "rerun"}
    assert {c["id"] for c in steps[73]["calls"]} <= rerun, (
        "the step after the compaction was rerun by the CLI"
    )
    body = orjson.dumps(sent[0].body)
    assert SUMMARY in body and steps[73]["calls"][0]["id"].encode() in body
    assert not any(c["id"].encode() in body for s in steps[:73] for c in s["calls"])


CASEWARE_117 = FIELD / "codex" / "caseware-0.117.0-alpha.12-rollout-2026-03-28.jsonl"
CASEWARE_118 = FIELD / "codex" / "caseware-0.118.0-alpha.2-rollout-2026-03-29-email-redacted.jsonl"


def _rebuilt_codex(
    path: Path, boundary: int, dest: Path, fresh: dict[str, Any] | None = None
) -> tuple[Any, list[dict], str]:
    from replayer.adapters.codex import session as rollout

    rebuild = by_name("codex").rebuild(rollout.parse(path), boundary, fresh or {}, dest)
    records = [orjson.loads(line) for line in rebuild.native_files[0].read_bytes().splitlines()]
    return rebuild, records, (dest / "home" / ".codex" / "config.toml").read_text()


def test_a_codex_rollback_drops_its_turns_from_the_prefix_as_the_cli_does(tmp_path: Path) -> None:
    """The 0.117 Desktop rollout's first turn (steps 1-6) was interrupted and rolled back: the model's next
    request no longer held it (its recorded input tokens fall). A cut after it keeps the rollback event in
    the rebuilt rollout, whose resume drops the turn (codex-rs `drop_last_n_user_turns`), and the prefix
    leaves it out; a cut inside it keeps it. The recorded personality is the continuation's."""
    from replayer.adapters.codex import resume

    steps = orjson.loads(replayer("inspect", str(CASEWARE_117), "--json", check=True).stdout)["steps"]
    first_turn = [c["id"] for s in steps[:6] for c in s["calls"]]
    rebuild, records, config = _rebuilt_codex(CASEWARE_117, 10, tmp_path / "10")
    prefix = orjson.dumps(rebuild.expected_prefix)
    assert not any(c.encode() in prefix for c in first_turn)
    assert [s["calls"][0]["id"].encode() in prefix for s in steps[6:10]] == [True] * 4
    assert [r["payload"]["type"] for r in records if r["type"] == "event_msg"] == ["thread_rolled_back"]
    kinds = [i.get("type") for i in rebuild.expected_prefix]
    assert "web_search_call" in kinds and "reasoning" in kinds
    assert 'personality = "friendly"' in config and rebuild.continuation.turn.rolled_back
    whys = [i.mark for i in resume.insertions("0.117.0", rebuild.continuation.turn)]
    assert resume.PERMISSIONS in whys and resume.PERSONALITY in whys, "inserted again after the rollback"
    inside, records, _ = _rebuilt_codex(CASEWARE_117, 6, tmp_path / "6")
    assert all(c.encode() in orjson.dumps(inside.expected_prefix) for c in first_turn)
    assert not inside.continuation.turn.rolled_back
    assert resume.PERSONALITY not in [i.mark for i in resume.insertions("0.117.0", inside.continuation.turn)]


def test_a_codex_session_that_switched_models_continues_with_the_boundarys(tmp_path: Path) -> None:
    """The 0.118 rollout switched between gpt-5.4-mini and gpt-5.4 by turn: the continuation runs the model
    of the turn the cut falls in (another makes the CLI insert a <model_switch> message); its
    request_user_input calls keep the user's recorded answers."""
    cut_mini, _, config = _rebuilt_codex(CASEWARE_118, 12, tmp_path / "12")
    assert cut_mini.model == "gpt-5.4-mini" and 'model = "gpt-5.4-mini"' in config
    cut_full, _, config = _rebuilt_codex(CASEWARE_118, 42, tmp_path / "42")
    assert cut_full.model == "gpt-5.4" and 'model = "gpt-5.4"' in config
    report = orjson.loads(replayer("inspect", str(CASEWARE_118), "--json", check=True).stdout)
    asked = {c["kind"] for s in report["steps"] for c in s["calls"] if c["tool"] == "request_user_input"}
    assert asked == {"pure"}


def test_the_codex_gate_reads_a_context_message_of_several_parts() -> None:
    """After a rollback 0.117 sends its permission notice, personality and skills in one developer message
    of three parts (seen on the wire): each part must be a known insertion; one unknown part refuses."""
    from replayer.adapters.codex import resume
    from replayer.adapters.codex.gate import CodexGate

    def message(role: str, *texts: str) -> dict:
        return {
            "type": "message",
            "role": role,
            "content": [{"type": "input_text", "text": t} for t in texts],
        }

    notice = (
        "<permissions instructions>\n`sandbox_mode` is `danger-full-access`\nApproval policy is currently "
        "never.\n</permissions instructions>"
    )
    turn = resume.TurnSettings(sandbox="danger-full-access", approval="never", rolled_back=True)

    def route(inserted: dict, settings: resume.TurnSettings = turn) -> str:
        prefix = [message("user", "task")]
        gate = CodexGate(
            prefix,
            "nonce",
            keep_prompt=False,
            instructions_form=True,
            instructions="base",
            insertions=resume.insertions("0.117.0", settings),
        )
        body = {"instructions": "base", "input": [*prefix, inserted, message("user", "nonce")]}
        return gate.route("POST", "/v1/responses", body).kind

    bundle = (notice, "<personality_spec> friendly", "<skills_instructions>\n## Skills")
    assert route(message("developer", *bundle)) == "main"
    assert route(message("developer", *bundle, "<collaboration_mode>plan")) == "refuse"
    unchanged = turn.model_copy(update={"rolled_back": False})
    assert route(message("developer", *bundle), unchanged) == "refuse", "no rollback: nothing to reinsert"


def test_the_note_asking_for_the_cwd_goes_once_it_is_given(tmp_path: Path) -> None:
    """The 0.34.0 session's folder hashes to none of its paths: the note asks for --cwd until it is given."""
    path = str(FIELD / AIM_034)
    asked = orjson.loads(replayer("inspect", path, "--json", check=True).stdout)
    assert any(n.endswith("give --cwd") for n in asked["parse_notes"]) and asked["cwd"] is None
    given = orjson.loads(replayer("inspect", path, "--json", "--cwd", "/home/kingb/aim", check=True).stdout)
    assert given["cwd_source"] == "stated" and not any("--cwd" in n for n in given["parse_notes"])
    out = tmp_path / "out"
    replayer("prepare", path, "-n", "1", "--cwd", "/home/kingb/aim", "-o", str(out), check=True)
    assert not any("--cwd" in n for n in orjson.loads((out / "result.json").read_bytes())["parse_notes"])


APPENDED = FIELD / "opencode" / "repo-explainer-kubernetes-3-runs-format-json.jsonl"
KUBERNETES = "/Users/saadkhalid/Projects/repo-explainer/tmp/kubernetes/kubernetes"


def test_appended_opencode_runs_are_listed_and_each_prepares(tmp_path: Path) -> None:
    """Three `opencode run --format json` runs one after another in one file: listed as sessions; each one
    chosen reads alone, in the folder its write resolved its relative path in (`metadata.filepath`); the
    delegating run's `task` calls are named as sub-agent sessions."""
    listing = orjson.loads(replayer("inspect", str(APPENDED), "--json", check=True).stdout)
    sessions = [s["id"] for s in listing["sessions"]]
    assert len(sessions) == 3 and listing["steps"] == []
    first, delegating, last = sessions
    report = orjson.loads(replayer("inspect", str(APPENDED), "--session", first, "--json", check=True).stdout)
    assert (report["cwd"], report["cwd_source"]) == (KUBERNETES, "inferred")
    assert [c["tool"] for s in report["steps"] for c in s["calls"]] == ["bash", "write"]
    tasks = orjson.loads(
        replayer("inspect", str(APPENDED), "--session", delegating, "--json", check=True).stdout
    )
    assert {c["kind"] for s in tasks["steps"] for c in s["calls"]} == {"unknown"}
    for session in (first, last):
        out = tmp_path / session
        replayer("prepare", str(APPENDED), "--session", session, "-n", "2", "-o", str(out), check=True)
        result = orjson.loads((out / "result.json").read_bytes())
        assert (result["cwd"], result["session_id"]) == (KUBERNETES, session)


CASEWARE_COMPACTED = FIELD / "codex" / "caseware-0.118.0-alpha.2-compacted-rollout-2026-03-28.jsonl"
"""126 steps; a remote compaction mid-turn after step 84, in the turn that goes on to step 118."""


@pytest.mark.agent
@pytest.mark.docker
def test_a_compacted_codex_rollout_is_rerun_by_its_own_cli_and_resumed_compacted(tmp_path: Path) -> None:
    """0.118's own CLI reruns the 85 steps up to a cut just after the compaction, fed through it in one run
    (its exec sessions live on, as in the recording); the continuation resumes the rebuilt rollout, whose
    first request carries the replacement history, then the step after it, and none of the calls it
    replaced."""
    name = str(CASEWARE_COMPACTED.relative_to(FIELD))
    options = ("--agent-version", "0.118.0", "--allow-degraded")
    proc, out, sent = _continue(name, 85, "codex", options, tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["version"]["reruns"] == "codex 0.118.0, its own code"
    rerun = {d["call_id"] for d in result["divergences"] if d["kind"] == "rerun"}
    steps = orjson.loads(replayer("inspect", str(CASEWARE_COMPACTED), "--json", check=True).stdout)["steps"]
    after = [c["id"] for c in steps[84]["calls"]]
    assert set(after) <= rerun, "the step after the compaction was rerun by the CLI"
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1)
    assert len(sent) == 1
    body = sent[0].body
    kinds = [i.get("type") for i in body["input"]]
    assert "compaction" in kinds, "the replacement history's compaction item"
    sent_calls = [i["call_id"] for i in body["input"] if i.get("type") == "function_call"]
    assert sent_calls == after, "only the step after the compaction: the replaced calls are gone"


OLDER_FORM_RESUMED = (
    ROOT / "tests" / "fixtures" / "codex" / "older_form_resumed" / "0.171.0-caseware-0.118-boundary-3.json"
)
"""The first request the pinned 0.171.0 sent when it continued the 0.118 rollout above cut at step 3 (`run
--agent-version 0.171.0 --continue`, nonce removed by the gate; its model, input and tools kept)."""


def test_the_pin_continues_an_older_form_rollout_in_its_own_form(tmp_path: Path) -> None:
    """0.171 resumes a 0.118 rollout in its own form: the base instructions as input[0], not `instructions`,
    the recorded messages with `unknown` content kinds; with no baseline for the older form, it sends its
    context again: the recorded plan collaboration mode and the permission notice, the recorded AGENTS.md
    and plugins revoked (the container has neither). The gate accepts exactly that, and the recorded
    version's own form still holds for the recorded version."""
    from replayer.adapters.codex import resume
    from replayer.floor.pins import running_version
    from replayer.floor.trajectory import Observation

    body = orjson.loads(OLDER_FORM_RESUMED.read_bytes())
    nonce = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "nonce"}]}
    body["input"].append(nonce)
    assert "instructions" not in body and body["input"][0]["role"] == "developer"
    adapter = by_name("codex")
    # the outputs that run's reruns gave (the workspace was empty): the prefix holds them
    fresh = {
        i["call_id"]: Observation(i["output"])
        for i in body["input"]
        if i.get("type") == "function_call_output"
    }

    def route(sent: dict, version: str) -> Any:
        with running_version("codex", version):
            rebuild, _, _ = _rebuilt_codex(CASEWARE_118, 3, tmp_path / version, fresh)
            gate = adapter.gate(rebuild, "nonce", keep_prompt=False)
            return gate.route("POST", "/v1/responses", sent), gate.notes

    decision, notes = route(body, "0.171.0")
    assert decision.kind == "main", decision.mismatch
    assert any("AGENTS.md revoked" in n for n in notes) and any("collaboration mode" in n for n in notes)
    recorded, _ = route(body, "0.118.0")
    assert recorded.kind == "refuse" and recorded.mismatch.path == "instructions", "0.118's own form"
    other_mode = orjson.loads(orjson.dumps(body))
    for part in other_mode["input"][-4]["content"]:
        if part["text"].startswith("<collaboration_mode>"):
            part["text"] = "<collaboration_mode># Collaboration Mode: Default\n</collaboration_mode>"
    assert route(other_mode, "0.171.0")[0].kind == "refuse", "only the recorded collaboration mode"
    turn = resume.TurnSettings(paginated=True, agents_md=True, plugins=True, collaboration="# Plan Mode")
    marks = [i.mark for i in resume.insertions("0.171.0", turn)]
    assert resume.REVOKED_AGENTS_MD not in marks, "a rollout of its own form keeps its baseline"


def test_a_continued_rollout_reads_back_in_the_form_of_the_version_that_continued_it(tmp_path: Path) -> None:
    """The form is the continuing version's (resume.sends_instructions_form): a 0.118 rollout read back by
    export and the report after 0.171 continued it is in 0.171's form, after 0.118 did in 0.118's; a rollout
    of the paginated form stays in it. Here the continued rollout holds the prefix alone."""
    import shutil

    from replayer.adapters.codex import resume
    from replayer.adapters.codex import session as rollout
    from replayer.floor.pins import running_version

    older = rollout.parse(CASEWARE_118).native_as(rollout.Native)
    paginated = FIELD.parent / "codex" / "turn_context" / "0.171.0" / "turn_context" / "rollout.jsonl"
    assert [resume.sends_instructions_form(older, v) for v in ("0.118.0", "0.142.0", "0.171.0")] == [
        True,
        True,
        False,
    ]
    assert not resume.sends_instructions_form(rollout.parse(paginated).native_as(rollout.Native), "0.171.0")
    for version in ("0.118.0", "0.171.0"):
        with running_version("codex", version):
            rebuild, _, _ = _rebuilt_codex(CASEWARE_118, 3, tmp_path / version)
            result_dir = tmp_path / version / "result"
            (result_dir / "continued").mkdir(parents=True)
            shutil.copyfile(rebuild.native_files[0], result_dir / "continued" / "rollout.jsonl")
            assert by_name("codex").continued_prefix(result_dir) == rebuild.expected_prefix, version
        assert rebuild.continuation.instructions_form == (version == "0.118.0")


@pytest.fixture(scope="module")
def pin_continued_at_3(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path, list[LoggedRequest]]:
    """`run --agent-version 0.171.0 --continue` of the 0.118 rollout cut at step 3 (a gpt-5.4-mini turn)."""
    name = str(CASEWARE_118.relative_to(FIELD))
    return _continue(name, 3, "codex", ("--agent-version", "0.171.0"), tmp_path_factory.mktemp("pin-at-3"))


@pytest.mark.agent
@pytest.mark.docker
def test_the_pins_continuation_of_an_older_form_rollout_is_exported_in_the_form_it_sent(
    pin_continued_at_3: tuple[subprocess.CompletedProcess[str], Path, list[LoggedRequest]],
) -> None:
    """`run --agent-version 0.171.0 --continue` of the 0.118 rollout cut at step 3: the pin sends it in its
    own form, and export and the report read the continued rollout back in that form, item for item what
    the upstream received (the CLI's insertions included), then the agent's answer."""
    from replayer.floor.pins import running_version
    from replayer.pipeline import timeline
    from replayer.verbs import export, view

    proc, out, sent = pin_continued_at_3
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    assert (result["version"]["version"], result["version"]["in_file"]) == ("0.171.0", "0.118.0-alpha.2")
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 1)
    assert len(sent) == 1 and "instructions" not in sent[0].body, "the pin's own form"
    received = sent[0].body["input"]
    received[0] = {
        **received[0],
        "id": None,
    }  # the CLI derives it from the thread (base_instructions_message)
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert len(received) > len(expected), "the CLI's insertions after the prefix"
    adapter = by_name("codex")
    with running_version("codex", "0.171.0"):
        continued = adapter.continued_prefix(out)
    assert continued is not None and continued[: len(received)] == received
    dialect = adapter.dialect()
    answer = {"role": "assistant", "content": "Finished."}
    assert export.chat_record(out)["messages"] == [*dialect.to_chat(received), answer]
    shown = view.load(out).continuation
    assert shown == timeline.entries([*dialect.to_chat(received[len(expected) :]), answer], view.TEXT_CHARS)


def _model_switches(body: dict) -> list[int]:
    """Where the request carries a `<model_switch>` developer message."""
    return [
        i
        for i, item in enumerate(body["input"])
        if item.get("role") == "developer"
        and any(str(p.get("text", "")).startswith("<model_switch>") for p in item.get("content", []))
    ]


@pytest.mark.agent
@pytest.mark.docker
def test_a_compare_fork_continues_with_the_model_of_the_boundary_turn_or_the_variants(
    pin_continued_at_3: tuple[subprocess.CompletedProcess[str], Path, list[LoggedRequest]], tmp_path: Path
) -> None:
    """The 0.118 rollout's last turn ran gpt-5.4 (the default model), the turn of step 3 gpt-5.4-mini: a
    compare fork at 3 continues with gpt-5.4-mini, as `run -n 3 --continue` does: the model it records and
    sends, read from the replay directory it forks from (result.json's boundary_model). A variant naming
    gpt-5.4 (the file's last model) runs gpt-5.4: the CLI, launched with it, tells the model of the switch
    in a <model_switch> message right after the prefix, which the gate accepts for that run only."""
    alone_proc, alone, alone_sent = pin_continued_at_3
    assert alone_proc.returncode == 0, alone_proc.stderr
    name = str(CASEWARE_118.relative_to(FIELD))
    options = ("--agent-version", "0.171.0")
    variants = ("one=", "full=model=gpt-5.4")
    proc, out, sent = _continue(name, 3, "codex", options, tmp_path, fork=True, variants=variants)
    assert proc.returncode == 0, proc.stderr
    runs = {r["variant"]: r for r in orjson.loads((out / "compare.json").read_bytes())["runs"]}
    assert all(r["status"] == "ok" and r["continuation"]["gate"] == "accepted" for r in runs.values()), runs
    replay = orjson.loads((out / "replay" / "result.json").read_bytes())
    standalone = orjson.loads((alone / "result.json").read_bytes())
    assert by_name("codex").default_model(by_name("codex").parse(CASEWARE_118)) == "gpt-5.4"
    assert replay["boundary_model"] == standalone["boundary_model"] == "gpt-5.4-mini"
    assert runs["one"]["continuation"]["model"] == standalone["continuation"]["model"] == "gpt-5.4-mini"
    assert runs["full"]["continuation"]["model"] == "gpt-5.4"
    bodies = {r.body["model"]: r.body for r in sent}
    assert sorted(bodies) == ["gpt-5.4", "gpt-5.4-mini"] and len(sent) == 2
    assert [r.body["model"] for r in alone_sent] == ["gpt-5.4-mini"]
    assert _model_switches(bodies["gpt-5.4-mini"]) == _model_switches(alone_sent[0].body) == []
    prefix = len(orjson.loads((out / "replay" / "expected_prefix.json").read_bytes()))
    assert _model_switches(bodies["gpt-5.4"]) == [prefix]
    full = runs["full"]["continuation"]
    assert any(
        "<model_switch>" in n and "gpt-5.4-mini ran the boundary turn" in n for n in full["gate_notes"]
    )
    assert full["metadata"]["codex_model"] == {"launched": "gpt-5.4", "boundary_turn": "gpt-5.4-mini"}


@pytest.mark.agent
@pytest.mark.docker
def test_the_files_own_version_continues_with_a_model_the_file_never_ran(tmp_path: Path) -> None:
    """`run -n 3 --continue --model gpt-5.5` of the 0.118 rollout at 0.118: the CLI sends gpt-5.5 and its
    <model_switch> message (developer, one part, the new model's instructions) before the prompt."""
    name = str(CASEWARE_118.relative_to(FIELD))
    options = ("--agent-version", "0.118.0", "--model", "gpt-5.5")
    proc, out, sent = _continue(name, 3, "codex", options, tmp_path)
    assert proc.returncode == 0, proc.stderr
    cont = orjson.loads((out / "result.json").read_bytes())["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["model"]) == ("accepted", "completed", "gpt-5.5")
    assert [r.body["model"] for r in sent] == ["gpt-5.5"]
    prefix = len(orjson.loads((out / "expected_prefix.json").read_bytes()))
    assert _model_switches(sent[0].body) == [prefix]
    [part] = sent[0].body["input"][prefix]["content"]
    assert part["text"].endswith("\n</model_switch>") and part["type"] == "input_text"
    assert any("gpt-5.4-mini ran the boundary turn, gpt-5.5 runs" in n for n in cont["gate_notes"])


BRUNCH = "pi/brunch-extension-tools-propose-graph-commit.jsonl"


@pytest.mark.parametrize(("name", "boundary"), [(BRUNCH, 1), ("pi/pi-mono-before-compaction.jsonl", 217)])
def test_a_continued_pi_session_reads_back_as_sent_to_the_continuations_model(
    name: str, boundary: int, tmp_path: Path
) -> None:
    """Both record another api's thinking (anthropic-messages, signed), which Pi sends to the bridge's
    openai-completions model as text: read back (export, the report), the continued session is in that
    form too, not with each thinking under its signature. Here the continued session holds the prefix
    alone, in a directory without result.json (a compare's run directory: its own model decides)."""
    import shutil

    adapter = by_name("pi")
    rebuild = adapter.rebuild(adapter.parse(FIELD / name), boundary, {}, tmp_path / "rebuilt")
    wire_keys = {"role", "content", "tool_calls", "tool_call_id"}
    assert all(m.keys() <= wire_keys for m in rebuild.expected_prefix), "no thinking under its signature"
    (tmp_path / "result" / "continued").mkdir(parents=True)
    shutil.copyfile(rebuild.native_files[0], tmp_path / "result" / "continued" / "session.jsonl")
    assert adapter.continued_prefix(tmp_path / "result") == rebuild.expected_prefix


def _as_run(name: str) -> tuple[str, int, tuple[str, ...]]:
    boundary, _, _, options = RUN[name]
    return name, boundary, options


MOCK_ENDS = {
    # agent: a field file of it, its boundary and options (RUN's: the version that recorded it, or one stated)
    "claude_code": _as_run("claude_code/erk-2.1.50.jsonl"),
    "codex": _as_run("codex/acidicsoil-0.58.0-rollout-2025-11-17.jsonl"),
    "gemini_cli": _as_run("gemini_cli/aim-benchmark-control-pro-run4.json"),
    "mini_swe_agent": _as_run("mini_swe_agent/deepseek-v2.2.7-sqlfluff-2419.traj.json"),
    "opencode": _as_run("opencode/sandcastle-run-format-json-stdout.jsonl"),
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


def _continue_against_the_mock(name: str, boundary: int, options: tuple[str, ...], tmp_path: Path) -> dict:
    out, empty = tmp_path / "out", tmp_path / "workspace"
    empty.mkdir()
    args = ("run", str(FIELD / name), "-n", str(boundary), "-w", str(empty), "-o", str(out), *options)
    proc = replayer(*args, "--continue", "--upstream", "mock", "--max-requests", "20")
    assert proc.returncode == 0, proc.stderr
    return orjson.loads((out / "result.json").read_bytes())


def test_every_agent_has_a_field_file_continued_against_the_mock() -> None:
    from replayer.adapters import REGISTRY

    assert set(MOCK_ENDS) == set(REGISTRY)


@pytest.mark.agent
@pytest.mark.docker
@pytest.mark.parametrize("agent", sorted(MOCK_ENDS))
def test_a_field_continuation_ends_when_the_bare_mock_ends_it(agent: str, tmp_path: Path) -> None:
    """For every agent, a real field file at the version that reruns it, continued against bare `mock`
    (whose first answer ends the session the agent's way): `completed` in a few requests, its session read
    back."""
    cont = _continue_against_the_mock(*MOCK_ENDS[agent], tmp_path)["continuation"]
    assert (cont["gate"], cont["agent_status"]) == ("accepted", "completed"), cont
    assert 1 <= cont["steps_used"] <= A_FEW and cont["mock"]
    assert not [f for f in cont["files"] if f.endswith("_error")], cont["files"]


@pytest.mark.agent
@pytest.mark.docker
def test_an_opencode_session_recorded_before_its_ids_wrapped_continues_to_its_end(tmp_path: Path) -> None:
    """The sandcastle log's ids were made in May 2026, before OpenCode's 48-bit time ids wrapped (2026-08-14):
    those 1.17.18 (the version of issue 43's export) makes now sort before them, and it asked the model
    again after every final answer. The rebuild moves the prefix's ids before now: the mock's first answer
    ends it, and what the continuation made sorts after everything recorded."""
    name = "opencode/sandcastle-run-format-json-stdout.jsonl"
    options = ("--task", "Summarize this repository.", "--agent-version", "1.17.18")
    result = _continue_against_the_mock(name, 1, options, tmp_path)
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"]) == ("accepted", "completed"), cont
    assert cont["steps_used"] <= 5 and cont["metadata"]["opencode_ids_moved"]["count"] > 0
    rebuilt = orjson.loads((tmp_path / "out" / "native" / "export.json").read_bytes())["messages"]
    continued = orjson.loads((tmp_path / "out" / cont["files"]["continued_session"]).read_bytes())["messages"]
    recorded = {m["info"]["id"] for m in rebuilt}
    made = [m["info"]["id"] for m in continued if m["info"]["id"] not in recorded]
    assert made and min(made) > max(recorded), "the continuation's messages sort after the prefix's"
