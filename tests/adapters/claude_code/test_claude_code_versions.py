"""Claude Code sessions recorded by other versions than the pin (1.0.51, 1.0.108, 2.0.64, 2.1.332; recorded by
tests/recorder_claude_code.py --version V): rerun by that version's own CLI, driven by the replay model, every
observation exact, and continued by that version through the gate. One scenario per version. 1.0.51 takes
no --session-id: it is driven by the sessions it reports, and sends its first tool turn twice. The `reminders`
scenario (--version V --reminders: 2.1.121, and the pin with claude-sonnet-4-5) runs long enough for the CLI's
nag to be merged into a tool result on the wire."""

from __future__ import annotations

from collections.abc import Callable
from itertools import takewhile
from pathlib import Path

import orjson
import pytest

from replayer.adapters.claude_code import continue_launch, envelope, session, wire
from replayer.bridges.scripted import LoggedRequest, Script, TextBlock, ToolUseBlock, Turn
from replayer.floor.pins import running_version
from replayer.pipeline.engine import load
from tests.conftest import ROOT, replayer
from tests.support.continuing import KEY, files_containing, scripted

VERSIONS = ROOT / "tests" / "fixtures" / "claude_code" / "versions"
pytestmark = pytest.mark.docker


def _probe(version: str) -> Path:
    return VERSIONS / version / "probe"


def _run(version: str, out: Path, after_step: int, *extra: str, env: dict[str, str] | None = None) -> dict:
    return _run_at(_probe(version), out, after_step, *extra, env=env)


def _run_at(probe: Path, out: Path, after_step: int, *extra: str, env: dict[str, str] | None = None) -> dict:
    args = ["run", str(probe / "session.jsonl"), "-n", str(after_step), "-w", str(probe / "workspace")]
    proc = replayer(*args, "-o", str(out), "--json", *extra, env=env)
    assert proc.returncode == 0, proc.stderr
    return orjson.loads((out / "result.json").read_bytes())


def _without_context(messages: list[dict]) -> list[dict]:
    """The request as the gate compares it: without the context reminders the CLI puts before prompts."""
    return [
        {**m, "content": [b for b in m["content"] if not envelope.is_system_reminder(b)]}
        if m["role"] == "user" and isinstance(m["content"], list) and not wire_results(m)
        else m
        for m in messages
    ]


def wire_results(message: dict) -> bool:
    return any(isinstance(b, dict) and b.get("type") == "tool_result" for b in message["content"])


@pytest.mark.agent
@pytest.mark.parametrize("version", ["1.0.51", "1.0.108", "2.0.64", "2.1.332"])
def test_a_session_of_another_version_reruns_with_its_own_cli_and_continues_with_it(
    version: str, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    script = Script(
        turns=[
            Turn(blocks=[ToolUseBlock(id="toolu_cont_1", name="Bash", input={"command": "cat notes.txt"})]),
            Turn(blocks=[TextBlock(text="All good.")]),
        ]
    )
    with scripted("claude_code", script, expected_key=KEY) as upstream:
        result = _run(
            version, out, 7, "--continue", "--upstream", upstream.url, env={"ANTHROPIC_API_KEY": KEY}
        )
        log = list(upstream.log)
    ran = result["version"]
    assert (ran["version"], ran["source"], ran["status"]) == (version, "recorded", "unverified")
    assert ran["reruns"] == f"claude_code {version}, its own code"
    assert [d["status"] for d in result["divergences"]] == ["exact"] * 7, result["divergences"]
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 2)
    assert any("resume envelope" in n for n in cont["gate_notes"]), cont["gate_notes"]
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    main = [r for r in log if r.main_thread]
    sent = _without_context(wire.normalize_request(main[0].body["messages"]))
    assert sent == expected, "the model saw exactly the rebuilt prefix, its envelope stripped"
    assert all(r.key_ok for r in log)
    continued = (out / "continued" / "session.jsonl").read_bytes()
    assert b"toolu_cont_1" in continued and b"fixed add" in continued
    assert files_containing(out, KEY.encode()) == []


@pytest.mark.agent
def test_the_pinned_cli_does_not_render_an_older_version(tmp_path: Path) -> None:
    """Why the recorded version's own CLI reruns: 2.1.197's Read is not 2.0.64's."""
    result = _run("2.0.64", tmp_path / "out", 3, "--agent-version", "2.1.197")
    assert result["version"]["reruns"] == "claude_code 2.1.197, its own code"
    statuses = {d["tool"]: d["status"] for d in result["divergences"]}
    assert statuses["Bash"] == "exact" and statuses["Read"] == "different"


@pytest.mark.parametrize(
    "version, scenario", sorted((p.parent.name, p.name) for p in VERSIONS.glob("*/*") if p.is_dir())
)
def test_the_expected_prefix_is_what_that_version_sent_at_every_boundary(
    version: str, scenario: str, tmp_path: Path
) -> None:
    """No Docker: the rebuilt prefix at each boundary against the requests that version's CLI sent, as the
    gate compares them (without the context reminders the CLI puts before prompts). The run's next request
    also carries the attachments recorded right after the cut, which a prefix cut there does not hold: they
    are compared with it. 2.1.121's `reminders` scenario: the TodoWrite nag its attachment record puts into
    step 10's tool result, sent from the 11th request on."""
    probe = VERSIONS / version / scenario
    lines = (probe / "upstream.jsonl").read_bytes().splitlines()
    sent = [
        _without_context(wire.normalize_request(r["body"]["messages"]))
        for r in map(orjson.loads, lines)
        if r["main_thread"]
    ]
    adapter, traj = load(probe / "session.jsonl")
    items = traj.native_as(session.Native).items
    with running_version("claude_code", version):
        for boundary in range(len(traj.steps) + 1):
            expected = adapter.rebuild(traj, boundary, {}, tmp_path / str(boundary)).expected_prefix
            prefix = session.prefix_items(traj, boundary)
            after = takewhile(lambda r: r.get("type") == "attachment", items[len(prefix) :])
            next_request = wire.to_messages([*prefix, *after], version, continue_launch.recorded_model(traj))
            compared = _without_context(next_request)
            assert any(s[: len(compared)] == compared for s in sent), f"boundary {boundary}"
            assert len(next_request) == len(expected) and next_request[:-1] == expected[:-1]


NAGGED = [("2.1.121", 10), ("2.1.121", 12), ("2.1.197", 12), ("2.1.332", 12)]


@pytest.fixture(scope="module")
def nagged(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[[str], tuple[Path, dict, list[LoggedRequest]]]:
    """A version's `reminders` scenario continued at its NAGGED boundaries by one `run -n 10,12 --continue`
    (one replay, a continuation forked at each), made once for the module: (OUT, the --json output, the
    upstream log of every continuation)."""
    made: dict[str, tuple[Path, dict, list[LoggedRequest]]] = {}

    def of(version: str) -> tuple[Path, dict, list[LoggedRequest]]:
        if version not in made:
            out = tmp_path_factory.mktemp(f"nagged-{version}") / "out"
            boundaries = ",".join(str(n) for v, n in NAGGED if v == version)
            script = Script(turns=[Turn(blocks=[TextBlock(text="Done.")])], by_history=True)
            with scripted("claude_code", script, expected_key=KEY) as upstream:
                probe = VERSIONS / version / "reminders"
                args = ["run", str(probe / "session.jsonl"), "-n", boundaries, "-w", str(probe / "workspace")]
                args += ["-o", str(out), "--json", "--continue", "--upstream", upstream.url]
                proc = replayer(*args, env={"ANTHROPIC_API_KEY": KEY})
                log = list(upstream.log)
            assert proc.returncode == 0, proc.stderr
            made[version] = (out, orjson.loads(proc.stdout), log)
        return made[version]

    return of


@pytest.mark.agent
@pytest.mark.parametrize(("version", "after_step"), NAGGED)
def test_a_boundary_after_the_cli_nag_continues_through_the_gate(
    version: str, after_step: int, nagged: Callable[[str], tuple[Path, dict, list[LoggedRequest]]]
) -> None:
    """2.1.121 writes its TodoWrite nag (2.1.197: the task tools' nag) as an attachment record after step 10's
    results and merges it into that tool result on every later request, a resumed one too: the gate expects it
    there (boundary 12; 2.1.197 and 2.1.332 do so for the recorded claude-sonnet-4-5, not for their newer default
    models; 2.1.332 with its token budget after every result).
    A prefix cut at 10 ends before the record: resuming it, the CLI nags anew, before the prompt."""
    run, printed, log = nagged(version)
    several = "boundaries" in printed
    out = run / f"after-{after_step}" if several else run
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["continuation"]["gate"] == "accepted", result["continuation"]
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    nagged_results = [b for m in expected for b in m["content"] if "used recently" in str(b.get("content"))]
    assert [b["tool_use_id"] for b in nagged_results] == (["toolu_reminders_10"] if after_step > 10 else [])
    before_prompt = "1 context reminder(s) the CLI put before the prompt"
    assert (before_prompt in result["continuation"]["gate_notes"]) == (after_step == 10)
    # each continuation sends one request (its answer ends it): the one of this boundary is the rebuilt prefix
    main = [r for r in log if r.main_thread]
    assert len(main) == (len(printed["boundaries"]) if several else 1)
    sent = [_without_context(wire.normalize_request(r.body["messages"])) for r in main]
    assert _without_context(expected) in sent, (
        "the model saw exactly the rebuilt prefix, its envelope stripped"
    )


@pytest.mark.agent
@pytest.mark.parametrize("version", ["2.1.121", "2.1.197", "2.1.332"])
def test_a_boundary_after_a_nested_claude_md_continues_through_the_gate(version: str, tmp_path: Path) -> None:
    """Reading sub/x.txt loads sub/CLAUDE.md: the CLI records a `nested_memory` attachment after step 2's
    results and merges its text into that Read's tool result on every later request, a resumed one too (2.1.197
    and 2.1.332 for the recorded claude-sonnet-4-5; 2.1.332 with the token budget left after every result): the
    gate expects it there from boundary 3."""
    out = tmp_path / "out"
    script = Script(turns=[Turn(blocks=[TextBlock(text="Done.")])])
    with scripted("claude_code", script, expected_key=KEY) as upstream:
        extra = ("--continue", "--upstream", upstream.url)
        result = _run_at(VERSIONS / version / "memory", out, 3, *extra, env={"ANTHROPIC_API_KEY": KEY})
        log = list(upstream.log)
    assert result["continuation"]["gate"] == "accepted", result["continuation"]
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    loaded = [b for m in expected for b in m["content"] if "Contents of /testbed/sub/CLAUDE.md" in str(b)]
    assert [b.get("tool_use_id") for b in loaded] == ["toolu_memory_02"]
    sent = _without_context(wire.normalize_request([r for r in log if r.main_thread][0].body["messages"]))
    assert sent == _without_context(expected), (
        "the model saw exactly the rebuilt prefix, its envelope stripped"
    )


FIELD_2_0_67 = ROOT / "tests" / "fixtures" / "field" / "claude_code" / "erk-2.0.67-compacted.jsonl"


@pytest.mark.agent
def test_a_field_session_of_2_0_67_continues_at_its_own_version_through_the_gate(tmp_path: Path) -> None:
    """A real 2.0.67 session stores the API's `caller` on its tool_use blocks, and its CLI sends them rebuilt
    without it (`wire.DROPS_CALLER`): cut at step 1, rerun and continued by 2.0.67 itself against the mock."""
    out, empty = tmp_path / "out", tmp_path / "workspace"
    empty.mkdir()
    args = ["run", str(FIELD_2_0_67), "-n", "1", "-w", str(empty), "-o", str(out), "--continue"]
    proc = replayer(*args, "--upstream", "mock", "--max-requests", "20")
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    assert (result["version"]["version"], result["version"]["source"]) == ("2.0.67", "recorded")
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"]) == ("accepted", "completed"), cont
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    calls = [b for m in expected for b in m["content"] if b.get("type") == "tool_use"]
    assert calls and all(set(b) == {"type", "id", "name", "input"} for b in calls)
    assert b'"caller"' in FIELD_2_0_67.read_bytes()


NOTIFIED, NOTIFIED_IN = 3, "toolu_notify_02"
"""The boundary after the notification, and the tool result it is merged into."""


@pytest.mark.agent
def test_a_boundary_after_a_queued_notification_continues_through_the_gate(tmp_path: Path) -> None:
    """2.1.332 (claude-sonnet-4-5) records the notification of a command it ran in the background, which ended while
    it worked, as a `queued_command` attachment after the next tool result (`versions/2.1.332/notify`) and merges
    it into that result on every later request, a resumed one too: its recorded rendering, the notification behind
    2.1.332's header (refused at that result before)."""
    out = tmp_path / "out"
    script = Script(turns=[Turn(blocks=[TextBlock(text="Done.")])])
    with scripted("claude_code", script, expected_key=KEY) as upstream:
        extra = ("--continue", "--upstream", upstream.url)
        result = _run_at(
            VERSIONS / "2.1.332" / "notify", out, NOTIFIED, *extra, env={"ANTHROPIC_API_KEY": KEY}
        )
        log = list(upstream.log)
    assert result["continuation"]["gate"] == "accepted", result["continuation"]
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    header = "[SYSTEM NOTIFICATION - NOT USER INPUT]"
    notified = [b for m in expected for b in m["content"] if header in str(b.get("content"))]
    assert [b["tool_use_id"] for b in notified] == [NOTIFIED_IN]
    sent = _without_context(wire.normalize_request([r for r in log if r.main_thread][0].body["messages"]))
    assert sent == _without_context(expected), (
        "the model saw exactly the rebuilt prefix, its envelope stripped"
    )


def _derived_reminders(tmp: Path) -> Path:
    """The 2.1.332 reminders recording with its nag after step 10 naming the `claude` status keeper, its rendering
    dropped (an older record's shape: rendered anew), and the token budget after step 5 replaced by a notice on a
    file that may be a download with its own rendering (what 2.1.332 writes: sent as recorded)."""
    lines, after_5, replaced = [], False, False
    for line in (VERSIONS / "2.1.332" / "reminders" / "session.jsonl").read_bytes().splitlines():
        record = orjson.loads(line)
        kind = record.get("attachment", {}).get("type")
        after_5 = after_5 or "toolu_reminders_05" in str(record.get("message", {}).get("content"))
        if kind == "task_reminder":
            record = {k: v for k, v in record.items() if k != "rendered"}
            record["attachment"] = {**record["attachment"], "statusKeeper": "claude"}
        elif kind == "total_tokens_reminder" and after_5 and not replaced:
            record["attachment"] = {"type": "edited_text_file", "filename": DOWNLOAD, "snippet": "1\tx"}
            record["attachment"]["mayHoldDownload"] = True
            record["rendered"] = [{"content": DOWNLOAD_NOTICE}]
            replaced = True
        lines.append(orjson.dumps(record))
    path = tmp / "session.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


DOWNLOAD = "/testbed/Downloads/report.txt"
DOWNLOAD_NOTICE = (
    f"<system-reminder>\nNote: {DOWNLOAD} changed on disk (its recorded rendering).\n</system-reminder>"
)


@pytest.mark.agent
def test_2_1_332_sends_a_recorded_rendering_and_words_a_status_keeper_through_the_gate(
    tmp_path: Path,
) -> None:
    """The real 2.1.332 CLI resuming a derived session: it sends the download notice's recorded rendering in step
    5's tool result (not the notice it would render anew) and the nag naming the `claude` keeper, which has none,
    rendered anew in its wording in step 10's; the gate accepts boundary 12 (refused before at step 5's result)."""
    out = tmp_path / "out"
    script = Script(turns=[Turn(blocks=[TextBlock(text="Done.")])])
    session = _derived_reminders(tmp_path)
    with scripted("claude_code", script, expected_key=KEY) as upstream:
        args = ["run", str(session), "-n", "12", "-w", str(VERSIONS / "2.1.332" / "reminders" / "workspace")]
        args += ["-o", str(out), "--json", "--continue", "--upstream", upstream.url]
        proc = replayer(*args, env={"ANTHROPIC_API_KEY": KEY})
        log = list(upstream.log)
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["continuation"]["gate"] == "accepted", result["continuation"]
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    results = {
        b["tool_use_id"]: b["content"]
        for m in expected
        for b in m["content"]
        if b.get("type") == "tool_result"
    }
    assert DOWNLOAD_NOTICE in results["toolu_reminders_05"]
    assert "The app can't update the task list right now" in results["toolu_reminders_10"]
    sent = _without_context(wire.normalize_request([r for r in log if r.main_thread][0].body["messages"]))
    assert sent == _without_context(expected), (
        "the model saw exactly the rebuilt prefix, its envelope stripped"
    )
