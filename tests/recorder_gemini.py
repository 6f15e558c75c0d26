"""Fixture recorder for Gemini CLI: the real pinned CLI in the sandbox, the scripted Gemini API (SSE).

`python -m tests.recorder_gemini --all` re-records every scenario into tests/fixtures/gemini_cli/<scenario>/:
the initial workspace, each run's JSON output (`output.jsonl`, one line a run), the session file the CLI
wrote (`session.jsonl` for 0.61, `session.json` for the one-document versions) and the upstream's log of
every request. `--version V` records the `tools` scenario with Gemini CLI V (installed on demand) into
tests/fixtures/gemini_cli/versions/<V>/tools/.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import orjson

from replayer import installer
from replayer.bridges.scripted import Script, TextBlock
from replayer.floor.pins import running_version
from tests.support import recording
from tests.support.gemini_cli import MODEL, run_gemini
from tests.support.recording import call, record_selected, recorder_parser, seed, turn, write_fixture

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gemini_cli"
CALC = "def add(a, b):\n    return a - b\n"


def scenarios() -> list[recording.Scenario]:
    files = {"calc.py": CALC, "notes.txt": "one\ntwo\nthree\n"}
    s = "tools"
    tools = recording.Scenario(
        name=s,
        files=files,
        prompts=["Fix add() in calc.py.", "Now write a note."],
        script=Script(
            model=MODEL,
            turns=[
                turn(
                    TextBlock(text="Let me look at both at once."),
                    call(s, 1, "read_file", file_path="calc.py"),
                    call(s, 2, "run_shell_command", command="ls; echo err >&2; exit 3", description="List."),
                ),
                turn(
                    call(
                        s,
                        3,
                        "replace",
                        file_path="calc.py",
                        instruction="Make add() add.",
                        old_string="a - b",
                        new_string="a + b",
                    )
                ),
                turn(
                    call(s, 4, "read_file", file_path="missing.txt"),
                    call(s, 5, "read_file", file_path="notes.txt", start_line=2, end_line=2),
                ),
                turn(TextBlock(text="Fixed: add() now adds.")),
                turn(call(s, 6, "write_file", file_path="new.txt", content="hello\n")),
                turn(
                    call(
                        s,
                        7,
                        "run_shell_command",
                        command="python3 -c 'from calc import add; print(add(1, 2))'; cat new.txt",
                        description="Check.",
                    )
                ),
                turn(TextBlock(text="Written.")),
            ],
        ),
    )
    s = "shell"
    shell = recording.Scenario(
        name=s,
        files={"calc.py": CALC},
        prompts=["Run the tests."],
        script=Script(
            model=MODEL,
            turns=[
                turn(call(s, 1, "run_shell_command", command="python3 -m pytest -q", description="Tests.")),
                turn(call(s, 2, "grep_search", pattern="def add")),
                turn(TextBlock(text="There are no tests.")),
            ],
        ),
    )
    s = "grep_fallback"
    fallback = recording.Scenario(
        name=s,
        files={"calc.py": CALC, "notes.txt": "one\ntwo\nthree\n"},
        prompts=["Where is add()?"],
        script=Script(
            model=MODEL,
            turns=[
                turn(call(s, 1, "grep_search", pattern="def add")),
                turn(call(s, 2, "grep_search", pattern="two", dir_path="notes.txt")),
                turn(call(s, 3, "grep_search", pattern="no such text")),
                turn(TextBlock(text="In calc.py.")),
            ],
        ),
    )
    return [tools, shell, fallback]


SETTINGS = {"grep_fallback": {"tools": {"useRipgrep": False}}}
"""A scenario's own settings: grep_fallback is recorded by the CLI's grep fallback (no ripgrep)."""


def record(scenario: recording.Scenario, dest: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix=f"record-{scenario.name}-") as tmp:
        state = Path(tmp)
        paths = seed(state, scenario.files, "home", "sock")
        stdout, log = run_gemini(
            prompts=scenario.prompts,
            workspace=paths["workspace"],
            home=paths["home"],
            sockets=paths["sock"],
            script=scenario.script,
            settings=SETTINGS.get(scenario.name),
        )
        chats = paths["home"] / ".gemini" / "tmp"
        sessions = sorted(p for p in chats.rglob("chats/session-*") if p.suffix in (".json", ".jsonl"))
        assert len(sessions) == 1, sessions
        outputs = [orjson.loads(out[out.index(b"{") :]) for out in stdout]
        files = {
            f"session{sessions[0].suffix}": sessions[0].read_bytes(),
            "output.jsonl": b"".join(orjson.dumps(o) + b"\n" for o in outputs),
        }
        meta = {"task": scenario.prompts[0], "prompts": scenario.prompts, "session_file": sessions[0].name}
        return write_fixture(dest, scenario.name, "gemini_cli", state, files, log, **meta)


def main() -> None:
    parser = recorder_parser(__doc__, FIXTURES)
    parser.add_argument(
        "--version", help="record the tools scenario with this version into versions/<version>/"
    )
    args = parser.parse_args()
    if args.version:
        installer.ensure("gemini_cli", args.version)
        with running_version("gemini_cli", args.version):
            tools = scenarios()[0]
            print("recorded", record(tools, args.dest / "versions" / args.version))
        return
    record_selected(args, scenarios(), record)


if __name__ == "__main__":
    main()
