"""What a new user meets first, without Docker (issue 36): inspect says what the file does not record,
boundaries before a compaction are refused alike, errors name what the verb takes, one exit code for an
unknown agent, help that says what a default means."""

from __future__ import annotations

from pathlib import Path

import orjson

from replayer.floor.pins import load_pins
from tests.conftest import CLAUDE, CODEX, ROOT, replayer
from tests.support.chromium import render

FIELD = Path(__file__).resolve().parents[2] / "fixtures" / "field"


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# inspect -----------------------------------------------------------------------------------------
def test_inspect_says_what_the_file_does_not_record() -> None:
    pi = replayer("inspect", str(Path(__file__).resolve().parents[2] / "fixtures/pi/rpc/session.jsonl"))
    header = pi.stdout.splitlines()[0]
    assert "None" not in header
    assert header.startswith("agent pi (version not recorded: pi ") and "would run)" in header
    no_cwd = FIELD / "gemini_cli" / "aim-0.34.0-session-2026-03-18T01-56-3afe7bdc.json"
    header = replayer("inspect", str(no_cwd)).stdout.splitlines()[0]
    assert "None" not in header and "cwd (not recorded: run needs --cwd)" in header


# a boundary before the last compaction -------------------------------------------------------------
def _compacted_claude_session(dest: Path) -> Path:
    """The `single` recording, then a compaction and one more step (as Claude Code writes them)."""
    records = [
        orjson.loads(line) for line in (CLAUDE.fixture("single") / "session.jsonl").read_bytes().splitlines()
    ]
    records = [r for r in records if r.get("type") != "last-prompt"]  # it names the old leaf
    chain = [r for r in records if "uuid" in r]
    common = {k: chain[0][k] for k in ("sessionId", "version", "cwd", "userType", "isSidechain")}
    last = chain[-1]["uuid"]
    added = [
        {
            "type": "system",
            "subtype": "compact_boundary",
            "uuid": "c0",
            "parentUuid": None,
            "logicalParentUuid": last,
            "content": "Conversation compacted",
            "timestamp": "2026-12-02T11:11:00.000Z",
        },
        {
            "type": "user",
            "uuid": "c1",
            "parentUuid": "c0",
            "isCompactSummary": True,
            "message": {"role": "user", "content": "Summary of the conversation."},
            "timestamp": "2026-12-02T11:11:01.000Z",
        },
        {
            "type": "assistant",
            "uuid": "c2",
            "parentUuid": "c1",
            "timestamp": "2026-12-02T11:11:02.000Z",
            "message": {
                "id": "msg_c2",
                "role": "assistant",
                "model": "m",
                "type": "message",
                "content": [
                    {"type": "tool_use", "id": "toolu_after", "name": "Bash", "input": {"command": "ls"}}
                ],
            },
        },
        {
            "type": "user",
            "uuid": "c3",
            "parentUuid": "c2",
            "timestamp": "2026-12-02T11:11:03.000Z",
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_after",
                        "content": "a.txt",
                        "is_error": False,
                    }
                ],
            },
        },
    ]
    path = dest / "session.jsonl"
    lines = [orjson.dumps(r) for r in records] + [orjson.dumps({**common, **r}) for r in added]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_claude_code_takes_a_boundary_before_the_compaction_as_pi_does(tmp_path: Path) -> None:
    """The cut drops the compaction: the CLI resumes the history up to the cut whole (issue 35 proves it
    with the CLI at the gate, tests/adapters/claude_code/test_claude_code_field.py); no agent refuses such a boundary any more."""
    session = _compacted_claude_session(tmp_path)
    replayer("prepare", str(session), "-n", "1", "-o", str(tmp_path / "p"), check=True)
    prefix = (tmp_path / "p" / "expected_prefix.json").read_text()
    assert "toolu_after" not in prefix and "Summary of the conversation." not in prefix
    replayer("prepare", str(session), "-n", "3", "-o", str(tmp_path / "q"), check=True)


# the report shows observations as text -------------------------------------------------------------
def test_the_codex_report_shows_shell_outputs_as_text(tmp_path: Path) -> None:
    rollout = CODEX.fixture("versions") / "0.58.0" / "probe" / "rollout.jsonl"
    out = tmp_path / "p"
    replayer("prepare", str(rollout), "-n", "2", "-o", str(out), check=True)
    replayer("view", str(out), check=True)
    page = (out / "report.html").read_text()
    assert "Exit code: 0\\nWall time: 0 seconds\\nOutput:\\nalpha\\nbeta\\n" in page
    assert '{\\"output\\":' not in page, "an observation is shown as escaped JSON"
    # the header says which version ran: the recorded one, not the pinned one beside it
    dom, log = render(out / "report.html", tmp_path)
    assert "Uncaught" not in log
    versions = dom.find("p", class_="versions")[0][2]
    pinned = load_pins().agents["codex"].version
    assert "agent codex (@openai/codex) ran 0.58.0 (recorded, " in versions
    assert f"; pinned {pinned}, not run" in versions


# one exit code for an unknown agent ----------------------------------------------------------------
def test_an_unknown_agent_is_the_same_usage_error_in_every_verb() -> None:
    lines = set()
    for args in (
        ("setup", "--agents", "nosuch", "--no-image"),
        ("bundles", "add", "nosuch@1.0"),
        ("bundles", "rm", "nosuch@1.0"),
        ("verify", "nosuch@1.0"),
    ):
        proc = replayer(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        lines.add(_one_line(proc.stderr))
    assert len(lines) == 1 and lines.pop().startswith(
        "replayer: usage: no agent 'nosuch' (known: claude_code, "
    )


# an empty file, help defaults --------------------------------------------------------------------
def test_an_empty_file_is_said_to_be_empty(tmp_path: Path) -> None:
    for name, content in (("empty.jsonl", b""), ("blank.json", b"\n  \n")):
        path = tmp_path / name
        path.write_bytes(content)
        proc = replayer("inspect", str(path))
        assert proc.returncode == 3
        assert _one_line(proc.stderr) == f"replayer: bad_input: {path} is empty: not a trajectory"


def test_help_shows_no_placeholder_default() -> None:
    for verb in ("batch", "compare", "run"):
        text = replayer(verb, "--help", env={"COLUMNS": "200"}).stdout
        assert "[default: 0]" not in text and "[default: None]" not in text, verb
    assert "the core count" in replayer("batch", "--help", env={"COLUMNS": "200"}).stdout


# the docs ----------------------------------------------------------------------------------------
def test_the_version_example_in_the_docs_is_what_a_run_records() -> None:
    text = (ROOT / "docs" / "compatibility.md").read_text()
    block = text.split('```json\n"version": ', 1)[1].split("\n```", 1)[0]
    shown = orjson.loads(block)
    session = CLAUDE.fixture("versions") / shown["version"] / "probe" / "session.jsonl"
    recorded = orjson.loads(replayer("inspect", str(session), "--json", check=True).stdout)["version"]
    assert {k: recorded[k] for k in ("version", "source", "in_file", "reruns", "note")} == {
        k: shown[k] for k in ("version", "source", "in_file", "reruns", "note")
    }


def test_the_help_says_where_the_docs_are() -> None:
    for verb in ((), ("compare",), ("run",)):
        shown = replayer(*verb, "--help", env={"COLUMNS": "1000"}).stdout
        assert f"Docs (docs/NAME.md in this help): {ROOT / 'docs'}/NAME.md." in shown, verb
