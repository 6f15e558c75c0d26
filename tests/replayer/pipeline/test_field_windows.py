"""Sessions recorded on Windows (issue 45 item 1), from the field corpus (tests/fixtures/field/SOURCES.md):
a Claude Code session from VS Code (its Bash tool in Git Bash, its file tools naming `c:/Users/...`) and a
Codex rollout whose calls ran PowerShell. Their paths are mapped to the Git Bash form under / in the cwd,
the calls, the observations and the rebuilt session; what runs on Linux reruns, PowerShell is kept as
recorded only with --allow-degraded, and each continues through the gate against the built-in mock."""

from __future__ import annotations

import json
import re
from pathlib import Path

import orjson
import pytest

from replayer import api
from replayer.floor.winpaths import posix_of, to_posix
from tests.conftest import ROOT, replayer

FIELD = ROOT / "tests" / "fixtures" / "field"
CLAUDE = "claude_code/solsmile-2.1.79-windows-vscode.jsonl"
CODEX = "codex/solsmile-0.142.5-windows-rollout.jsonl"
WINDOWS = {CLAUDE, CODEX}
"""The field files recorded on Windows (tests/replayer/pipeline/test_field.py lists them with the others)."""
CLAUDE_CWD = "/c/Users/yyash/Coding/polydot"
CODEX_CWD = "/c/Users/yyash/Coding/Solsmile"
DRIVE_PATH = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z]:[\\/]")
POWERSHELL_CALLS = 7
"""The Codex rollout's calls before its last (incomplete) step: every one a PowerShell `shell_command`."""


def test_windows_paths_read_in_their_git_bash_form() -> None:
    """Every form a Windows session names a path in (JSON-encoded once, or twice inside a tool's
    arguments string) becomes `/<drive>/...`; URLs, `a:b` and POSIX paths stay as they are."""
    record = {
        "cwd": "C:\\Users\\x\\proj",
        "file_path": "c:/Users/x/proj/a.sol",
        "arguments": json.dumps({"command": "Get-Content -Raw C:\\Users\\x\\SKILL.md", "workdir": "D:\\w"}),
        "output": "Output:\nC:\\Users\\x\\proj\n<cwd>C:\\Users\\x\\proj</cwd>",
        "kept": ["https://x.y/z", "a:b", "ls -la /c/Users/x/proj/"],
    }
    mapped = orjson.loads(to_posix(json.dumps(record).encode()))
    assert mapped["cwd"] == "/c/Users/x/proj" and mapped["file_path"] == "/c/Users/x/proj/a.sol"
    assert json.loads(mapped["arguments"]) == {
        "command": "Get-Content -Raw /c/Users/x/SKILL.md",
        "workdir": "/d/w",
    }
    assert mapped["output"] == "Output:\n/c/Users/x/proj\n<cwd>/c/Users/x/proj</cwd>"
    assert mapped["kept"] == record["kept"]
    assert posix_of("c:\\Users\\yyash\\Coding\\polydot") == CLAUDE_CWD


@pytest.mark.parametrize(("name", "cwd"), [(CLAUDE, CLAUDE_CWD), (CODEX, CODEX_CWD)])
def test_inspect_says_where_a_session_was_recorded_and_reads_its_paths_mapped(name: str, cwd: str) -> None:
    report = api.inspect(FIELD / name)
    assert (report.cwd, report.cwd_source, report.recorded_on) == (cwd, "recorded", "windows")
    assert (
        report.recorded_cwd is not None
        and report.recorded_cwd.lower() == "c:" + cwd[2:].replace("/", "\\").lower()
    )
    assert any("recorded on Windows" in note for note in report.parse_notes)
    inputs = json.dumps([c.input for s in report.steps for c in s.calls])
    assert not DRIVE_PATH.search(inputs), "no call names a Windows path"
    assert cwd in inputs
    assert (FIELD / name).read_bytes().count(b"Users\\\\yyash") > 0, "the user's file is not changed"


def test_cwd_is_refused_for_a_session_recorded_on_windows() -> None:
    """Its Windows directory is a recorded one (read as /c/...): --cwd would contradict it, as for any file
    that records its directory, instead of leaving its calls' paths in the Windows form."""
    proc = replayer("inspect", str(FIELD / CLAUDE), "--cwd", "/work/polydot")
    assert proc.returncode == 3 and len(proc.stderr.strip().splitlines()) == 1
    assert (
        "c:\\Users\\yyash\\Coding\\polydot" in proc.stderr
        and "--cwd is for files that record none" in proc.stderr
    )


def test_a_windows_powershell_call_is_unknown_and_the_git_bash_and_file_calls_rerun() -> None:
    codex = api.inspect(FIELD / CODEX)
    kinds = {c.kind for s in codex.steps for c in s.calls}
    whys = {c.reason for s in codex.steps for c in s.calls}
    assert kinds == {"unknown"} and len(whys) == 1 and "PowerShell" in str(whys.pop())
    claude = api.inspect(FIELD / CLAUDE)
    first = claude.steps[0].calls
    assert [(c.tool, c.kind) for c in first] == [("Bash", "rerun"), ("Glob", "rerun")]
    assert first[0].input["command"] == f"ls -la {CLAUDE_CWD}/" and first[1].input["path"] == CLAUDE_CWD


def test_a_windows_powershell_call_is_refused_in_one_line_naming_allow_degraded(tmp_path: Path) -> None:
    empty, out = tmp_path / "workspace", tmp_path / "out"
    empty.mkdir()
    proc = replayer("run", str(FIELD / CODEX), "-n", "1", "-w", str(empty), "-o", str(out))
    assert proc.returncode == 4, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()
    assert "PowerShell command recorded on Windows" in proc.stderr and "--allow-degraded" in proc.stderr


def test_the_expected_prefix_is_what_a_2_1_79_resume_loads(tmp_path: Path) -> None:
    """Step 1's two calls are split over two lines whose results hang on sibling branches; 2.1.79's resume
    walks the leaf's parents only (no recovery of such calls before 2.1.80), so the Glob call and its
    result are not in what it sends; and it joins the slash command's consecutive user texts with a
    newline (as 2.1.196 does; 2.1.50 does not)."""
    out = tmp_path / "out"
    replayer("prepare", str(FIELD / CLAUDE), "-n", "1", "-o", str(out), check=True)
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    tools = [b["name"] for m in expected for b in m["content"] if b.get("type") == "tool_use"]
    assert tools == ["Bash"]
    first = [b["text"] for b in expected[0]["content"]]
    assert first[0].endswith("</local-command-caveat>\n") and first[1].endswith("</command-args>\n")
    result = orjson.loads((out / "result.json").read_bytes())
    assert (result["recorded_on"], result["cwd"]) == ("windows", CLAUDE_CWD)


def test_a_0_142_5_reasoning_item_goes_out_with_a_null_content(tmp_path: Path) -> None:
    """The 0.142.5 rollout writes its reasoning items without `content`; the CLI sends them with null."""
    out = tmp_path / "out"
    replayer("prepare", str(FIELD / CODEX), "-n", "5", "-o", str(out), check=True)
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    reasoning = [item for item in expected if item.get("type") == "reasoning"]
    assert reasoning and all("content" in item and item["content"] is None for item in reasoning)


def _continue(name: str, boundary: int, options: tuple[str, ...], tmp_path: Path) -> tuple[dict, Path]:
    out, empty = tmp_path / "out", tmp_path / "workspace"
    empty.mkdir()
    args = ("run", str(FIELD / name), "-n", str(boundary), "-w", str(empty), "-o", str(out), *options)
    proc = replayer(*args, "--continue", "--upstream", "mock", "--max-requests", "20")
    assert proc.returncode == 0, proc.stderr
    return orjson.loads((out / "result.json").read_bytes()), out


@pytest.mark.agent
@pytest.mark.docker
def test_a_windows_claude_code_session_reruns_in_its_mapped_directory_and_continues(tmp_path: Path) -> None:
    """At default settings, at its own version: the Git Bash `ls -la /c/Users/...` and the Glob rerun in
    the workspace mounted at the mapped directory, the rebuilt session names only it, and the CLI continues
    through the gate (its own environment block names the container's platform and that directory)."""
    result, out = _continue(CLAUDE, 1, (), tmp_path)
    assert (result["recorded_on"], result["cwd"], result["version"]["version"]) == (
        "windows",
        CLAUDE_CWD,
        "2.1.79",
    )
    assert result["degradations"] == []
    ls = next(d for d in result["divergences"] if d["tool"] == "Bash")
    assert ls["kind"] == "rerun" and ls["fresh_excerpt"].startswith("total "), ls  # the directory exists
    native = b"".join((out / f).read_bytes() for f in result["native_files"])
    assert b"-c-Users-yyash-Coding-polydot" in "".join(result["native_files"]).encode()
    assert set(re.findall(rb'"cwd":"([^"]*)"', native)) == {CLAUDE_CWD.encode()}
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"]) == ("accepted", "completed"), cont


@pytest.mark.agent
@pytest.mark.docker
def test_a_windows_codex_rollout_keeps_its_powershell_calls_with_allow_degraded_and_continues(
    tmp_path: Path,
) -> None:
    result, _ = _continue(CODEX, 5, ("--allow-degraded",), tmp_path)
    assert (result["recorded_on"], result["cwd"]) == ("windows", CODEX_CWD)
    kept = [d for d in result["degradations"] if d["action"] == "historical_kept"]
    assert len(kept) == POWERSHELL_CALLS and all("PowerShell" in d["reason"] for d in kept)
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"]) == ("accepted", "completed"), cont
