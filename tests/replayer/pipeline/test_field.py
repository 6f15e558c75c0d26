"""The field corpus (tests/fixtures/field/, sources in its SOURCES.md): real trajectories other people
published, written by other versions than the pins. Each is prepared at default settings at its last
complete boundary, or refused in one line for a reason listed here (the shapes issue 18 takes on); its
working directory is inferred, recorded, stated or refused. Each agent's own field module
(tests/adapters/<agent>/test_*_field.py, on tests/support/field.py) runs one file per agent at its own
version, with an empty workspace, and continues it through the gate against the scripted upstream and bare
`mock`."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replayer import adapters, api
from tests.conftest import importing, replayer
from tests.replayer.pipeline.test_field_windows import WINDOWS
from tests.support.field import DEGRADED, FIELD, MOCK_ENDS, V0_LIST

PREPARED = {
    "claude_code/erk-2.0.67-ci-pr-address.jsonl": ("claude_code", "2.0.67", "recorded"),
    "claude_code/erk-2.0.67-compacted.jsonl": ("claude_code", "2.0.67", "recorded"),
    "claude_code/erk-2.1.50.jsonl": ("claude_code", "2.1.50", "recorded"),
    "claude_code/bhavana-2.1.177-task-nag-tool-reference.jsonl": ("claude_code", "2.1.177", "recorded"),
    "claude_code/lokal-2.1.126-date-change-pat-redacted.jsonl": ("claude_code", "2.1.126", "recorded"),
    "claude_code/posthog-2.1.112-auto-compacted.jsonl": ("claude_code", "2.1.112", "recorded"),
    "codex/soul-0.128.0-codex-tui-rollout.jsonl": ("codex", "0.128.0", "recorded"),
    "claude_code/erk-2.1.63.jsonl": ("claude_code", "2.1.63", "recorded"),
    # Entire's checkpoint transcripts: one API message's calls split over records, and a slice of a session
    "claude_code/entire-2.1.12-split-calls.jsonl": ("claude_code", "2.1.12", "recorded"),
    "claude_code/entire-2.1.29-transcript-slice.jsonl": ("claude_code", "2.1.29", "recorded"),
    # derived: the first 41 lines of a slice whose root is the result of a call before it (SOURCES.md)
    "claude_code/entire-2.1.12-slice-lines-1-41.jsonl": ("claude_code", "2.1.12", "recorded"),
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
    # a subagent's own session: no step (tests/replayer/pipeline/test_subagent_files.py)
    "gemini_cli/aim-0.34.0-subagent-session-2026-03-18T01-57-3afe7bdc.json": (
        "gemini_cli",
        "0.34.0",
        "inferred",
    ),
    "gemini_cli/aim-benchmark-control-pro-run4.json": ("gemini_cli", "0.35.0", "inferred"),
    # its CLI's own update notice names the version that ran, 0.23.0 (not the 0.24.0 current on its day)
    "gemini_cli/entire-0.23.0-update-notice-2026-01-15.json": ("gemini_cli", "0.23.0", "inferred"),
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
    # an OpenHands evaluation output of three instances (tests/replayer/pipeline/test_multisession.py)
    "openhands/multi-swe-bench-example-output.jsonl",
    # a session and its subagent's file, where the CLI keeps them (tests/replayer/pipeline/test_subagent_files.py)
    "claude_code/spotter-2.1.39",
    # three `opencode run --format json` runs appended to one log (below)
    "opencode/repo-explainer-kubernetes-3-runs-format-json.jsonl",
}


def test_every_field_file_is_listed() -> None:
    found = {str(p.relative_to(FIELD)) for p in FIELD.glob("*/*")}
    assert found == set(PREPARED) | set(REFUSED) | MULTI | set(DEGRADED) | WINDOWS


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
    last = 0
    for step in api.inspect(path).steps:
        if not step.complete or step.final:
            break
        last = step.index
    return last


@pytest.mark.parametrize("name", [importing(n) for n in sorted(PREPARED)])
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


def test_every_agent_has_a_field_file_continued_against_the_mock() -> None:
    assert set(MOCK_ENDS) == set(adapters.REGISTRY)
