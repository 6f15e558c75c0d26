"""Fixture recorder: run the real pinned `claude` CLI in the sandbox against the scripted upstream.

`python -m tests.recorder_claude_code --all` (or `make record`) re-records every scenario into
tests/fixtures/claude_code/<scenario>/: the initial workspace, the native session JSONL the CLI
wrote, its stream-json stdout and the upstream's log of every request it received.
"""

from __future__ import annotations

import argparse
import tempfile
import uuid
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from replayer import installer
from replayer.bridges.scripted import Script, TextBlock, ToolUseBlock, Turn
from replayer.floor.pins import running_version
from tests.support.claude_cli import CWD, run_claude
from tests.support.recording import seed, write_fixture

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "claude_code"


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    files: dict[str, str]
    prompts: list[str]
    """The first is the task; each further one continues the session once with --resume."""
    script: Script
    model: str | None = None
    """The CLI's --model (its default when None)."""


def _tool(sid: str, n: int, name: str, **inp: object) -> ToolUseBlock:
    return ToolUseBlock(id=f"toolu_{sid}_{n:02d}", name=name, input=dict(inp))


def _turn(*blocks: TextBlock | ToolUseBlock) -> Turn:
    return Turn(blocks=list(blocks))


def scenarios() -> list[Scenario]:
    big = "".join(f"line {i}: {'x' * (i % 50)}\n" for i in range(1, 3001))
    s = "single"
    return [
        Scenario(
            name=s,
            files={"a.txt": "hi\n", "hello.py": "print('hello')\n"},
            prompts=["Show me a.txt and hello.py."],
            script=Script(
                message_id_prefix=f"msg_{s}",
                turns=[
                    _turn(_tool(s, 1, "Bash", command="cat a.txt", description="Show a.txt")),
                    _turn(TextBlock(text="Now hello.py."), _tool(s, 2, "Read", file_path=f"{CWD}/hello.py")),
                    _turn(_tool(s, 3, "Bash", command="true", description="Nothing")),
                ],
            ),
        ),
        Scenario(
            name=(s := "parallel"),
            files={"a.txt": "alpha\nbeta\n", "hello.py": "print('hello')\n"},
            prompts=["Look at both files at once."],
            script=Script(
                message_id_prefix=f"msg_{s}",
                turns=[
                    _turn(
                        TextBlock(text="Reading both."),
                        _tool(s, 1, "Read", file_path=f"{CWD}/hello.py"),
                        _tool(s, 2, "Bash", command="wc -l a.txt", description="Count lines"),
                        _tool(s, 3, "Bash", command="ls", description="List"),
                    ),
                    _turn(_tool(s, 4, "Bash", command="echo out; echo err >&2", description="Both streams")),
                ],
            ),
        ),
        Scenario(
            name=(s := "write_edit"),
            files={"hello.py": "def greet():\n    print('hello')\n\ngreet()\n"},
            prompts=["Create b.txt and change the greeting."],
            script=Script(
                message_id_prefix=f"msg_{s}",
                turns=[
                    _turn(_tool(s, 1, "Write", file_path=f"{CWD}/b.txt", content="new file\nsecond line\n")),
                    _turn(_tool(s, 2, "Read", file_path=f"{CWD}/hello.py")),
                    _turn(
                        _tool(
                            s,
                            3,
                            "Edit",
                            file_path=f"{CWD}/hello.py",
                            old_string="print('hello')",
                            new_string="print('goodbye')",
                        )
                    ),
                    _turn(_tool(s, 4, "Write", file_path=f"{CWD}/hello.py", content="print('rewritten')\n")),
                    _turn(_tool(s, 5, "Bash", command="cat hello.py b.txt", description="Show")),
                ],
            ),
        ),
        Scenario(
            name=(s := "failing"),
            files={"a.txt": "hi\n"},
            prompts=["Run the failing commands."],
            script=Script(
                message_id_prefix=f"msg_{s}",
                turns=[
                    _turn(
                        _tool(
                            s, 1, "Bash", command="echo to-out; echo to-err >&2; exit 3", description="Fail"
                        )
                    ),
                    _turn(_tool(s, 2, "Bash", command="ls /nonexistent", description="Missing dir")),
                    _turn(_tool(s, 3, "Bash", command="grep nomatch a.txt", description="No match")),
                    _turn(
                        _tool(s, 4, "Edit", file_path=f"{CWD}/a.txt", old_string="absent", new_string="x"),
                    ),
                ],
            ),
        ),
        Scenario(
            name=(s := "missing_file"),
            files={"a.txt": "hi\n"},
            prompts=["Read the missing file."],
            script=Script(
                message_id_prefix=f"msg_{s}",
                turns=[
                    _turn(_tool(s, 1, "Read", file_path=f"{CWD}/missing.txt")),
                    _turn(_tool(s, 2, "Read", file_path=f"{CWD}/a.txt", offset=5)),
                ],
            ),
        ),
        Scenario(
            name=(s := "large_file"),
            files={"big.txt": big, "empty.txt": ""},
            prompts=["Read the big file."],
            script=Script(
                message_id_prefix=f"msg_{s}",
                turns=[
                    _turn(_tool(s, 1, "Read", file_path=f"{CWD}/big.txt")),
                    _turn(_tool(s, 2, "Read", file_path=f"{CWD}/big.txt", offset=2990, limit=5)),
                    _turn(_tool(s, 3, "Read", file_path=f"{CWD}/empty.txt")),
                ],
            ),
        ),
        Scenario(
            name=(s := "mixed_tools"),
            files={"a.txt": "hi\n"},
            prompts=["Track the work and fetch the page."],
            script=Script(
                message_id_prefix=f"msg_{s}",
                turns=[
                    _turn(_tool(s, 1, "TaskCreate", subject="Look at a.txt", description="Check a.txt")),
                    _turn(_tool(s, 2, "WebFetch", url="http://127.0.0.1:9/", prompt="Summarize")),
                    _turn(_tool(s, 3, "Bash", command="cat a.txt", description="Show")),
                ],
            ),
        ),
        Scenario(
            name=(s := "shell_state"),
            files={"notes.txt": "alpha\nbeta\n", "src/main.py": "print('hello')\n"},
            prompts=["Exercise the shell."],
            script=Script(
                message_id_prefix=f"msg_{s}",
                turns=[
                    _turn(
                        _tool(s, 1, "Bash", command="mkdir -p build && cd build", description="Enter build")
                    ),
                    _turn(_tool(s, 2, "Bash", command="pwd", description="Where")),
                    _turn(_tool(s, 3, "Bash", command="cd / && ls -d /tmp", description="Leave")),
                    _turn(_tool(s, 4, "Bash", command="cat notes.txt", description="Show")),
                    _turn(
                        _tool(
                            s, 5, "Edit", file_path=f"{CWD}/notes.txt", old_string="beta", new_string="gamma"
                        )
                    ),
                    _turn(_tool(s, 6, "Bash", command="grep -rn hello .", description="Search")),
                    _turn(_tool(s, 7, "Bash", command="find . -name '*.py'", description="Find")),
                    _turn(_tool(s, 8, "Bash", command="sleep 5", description="Sleep", timeout=1000)),
                    _turn(_tool(s, 9, "Bash", command="seq 1 20000", description="Long")),
                    _turn(_tool(s, 10, "Read", file_path=f"{CWD}/src/main.py")),
                    _turn(_tool(s, 11, "Read", file_path=f"{CWD}/src/main.py")),
                    _turn(
                        _tool(
                            s, 12, "Bash", command="printf '\\n\\n  lead\\ntrail  \\n\\n'", description="Trim"
                        )
                    ),
                    _turn(
                        _tool(s, 13, "Bash", command="python3 -c 'import time; time.sleep(3)'", timeout=1000)
                    ),
                ],
            ),
        ),
        Scenario(
            name=(s := "continued"),
            files={"a.txt": "one\n"},
            prompts=["Show a.txt.", "Now append a line and show it again."],
            script=Script(
                message_id_prefix=f"msg_{s}",
                turns=[
                    _turn(_tool(s, 1, "Bash", command="cat a.txt", description="Show")),
                    _turn(TextBlock(text="It says one.")),
                    _turn(
                        _tool(s, 2, "Bash", command="echo two >> a.txt && cat a.txt", description="Append")
                    ),
                ],
            ),
        ),
    ]


SUMMARY = (
    "<analysis>The user asked to look at a.txt; it was shown and read.</analysis>\n"
    "<summary>1. Primary Request: show a.txt (it says one). 2. Next: edit it when asked.</summary>"
)
"""What the scripted model answers the CLI's summary request with (a `/compact`)."""


def compacted_scenario(summary_on_main_thread: bool = True) -> Scenario:
    """A manual compaction (`/compact` as a prompt, as `-p` takes it) between two prompts: the steps after
    it read a file the steps before it read, and edit it (`--compacted VERSION`; kept apart from the
    scenarios, whose every boundary the prefix tests hold to the request after it: here the request after
    the last step before the compaction is the summary request). 1.0.x asks for the summary without tools, a
    side call the scripted model answers with its side text: no turn of the script is its."""
    s = "compacted"
    return Scenario(
        name=s,
        files={"a.txt": "one\n"},
        prompts=["Show a.txt.", "/compact", "Now change one to two in a.txt."],
        script=Script(
            message_id_prefix=f"msg_{s}",
            turns=[
                _turn(_tool(s, 1, "Bash", command="cat a.txt", description="Show")),
                _turn(_tool(s, 2, "Read", file_path=f"{CWD}/a.txt")),
                _turn(TextBlock(text="It says one.")),
                *([_turn(TextBlock(text=SUMMARY))] if summary_on_main_thread else []),
                _turn(_tool(s, 3, "Read", file_path=f"{CWD}/a.txt")),
                _turn(_tool(s, 4, "Edit", file_path=f"{CWD}/a.txt", old_string="one", new_string="two")),
                _turn(_tool(s, 5, "Bash", command="cat a.txt", description="Show")),
                _turn(TextBlock(text="It says two.")),
            ],
        ),
    )


FULL_CONTEXT = {"input_tokens": 195_000, "output_tokens": 100}
"""A usage near a 200k context window: a CLI that compacts on it does so before its next request."""


def auto_compacted_scenario(summary_on_main_thread: bool = True) -> Scenario:
    """An auto compaction mid-turn: the answer with step 2 reports a full context, so the CLI summarizes the
    history before its next request and goes on in the same run with steps 3-4 (`--compacted VERSION
    --auto`)."""
    s = "auto_compacted"
    return Scenario(
        name=s,
        files={"a.txt": "one\n"},
        prompts=["Change one to two in a.txt."],
        script=Script(
            message_id_prefix=f"msg_{s}",
            turns=[
                _turn(_tool(s, 1, "Bash", command="cat a.txt", description="Show")),
                Turn(blocks=[_tool(s, 2, "Read", file_path=f"{CWD}/a.txt")], usage=FULL_CONTEXT),
                *([_turn(TextBlock(text=SUMMARY))] if summary_on_main_thread else []),
                _turn(_tool(s, 3, "Edit", file_path=f"{CWD}/a.txt", old_string="one", new_string="two")),
                _turn(_tool(s, 4, "Bash", command="cat a.txt", description="Show")),
                _turn(TextBlock(text="It says two.")),
            ],
        ),
    )


def version_scenario() -> Scenario:
    """One scenario per extra CLI version (`--version V`): what differs between releases in one session,
    two prompts long (a driven rerun resumes the CLI for the second)."""
    s = "probe"
    return Scenario(
        name=s,
        files={"a.txt": "one\ntwo\n", "calc.py": "def add(a, b):\n    return a - b\n"},
        prompts=["Look around and fix calc.py.", "Now check the fix."],
        script=Script(
            message_id_prefix=f"msg_{s}",
            turns=[
                _turn(TextBlock(text="Looking."), _tool(s, 1, "Bash", command="ls", description="List")),
                _turn(_tool(s, 2, "Read", file_path=f"{CWD}/calc.py")),
                _turn(_tool(s, 3, "Read", file_path=f"{CWD}/missing.txt")),
                _turn(_tool(s, 4, "Bash", command="echo out; echo err >&2; exit 3", description="Fail")),
                _turn(
                    _tool(s, 5, "Edit", file_path=f"{CWD}/calc.py", old_string="a - b", new_string="a + b")
                ),
                _turn(_tool(s, 6, "Write", file_path=f"{CWD}/notes.txt", content="fixed add\n")),
                _turn(TextBlock(text="Fixed.")),
                _turn(_tool(s, 7, "Bash", command="python3 -c 'import calc; print(calc.add(2, 3))'")),
            ],
        ),
    )


def reminder_scenario(model: str | None) -> Scenario:
    """Long enough without TodoWrite (or the task tools) that the CLI puts its nag after a tool result
    (`--version V --reminders [--model M]`): ten assistant turns since the last use (or since the start) and
    since the last nag. The nag is an attachment record of the session, merged into that tool result on the
    wire (or sent as a system message of its own: 2.1.196 on, with a model that takes them)."""
    s = "reminders"
    turns = [
        _turn(_tool(s, n, "Bash", command=f"echo {n} >> log.txt", description="Log")) for n in range(1, 14)
    ]
    return Scenario(
        name=s,
        files={"log.txt": "start\n"},
        prompts=["Log thirteen lines."],
        script=Script(
            message_id_prefix=f"msg_{s}",
            turns=[*turns, _turn(TextBlock(text="Logged."))],
            **({"model": model} if model else {}),
        ),
        model=model,
    )


def memory_scenario(model: str | None) -> Scenario:
    """A file read below a folder with its own CLAUDE.md (`--version V --memory [--model M]`): before its next
    request the CLI records a `nested_memory` attachment with that CLAUDE.md, merged on the wire into the Read's
    tool result (as the nag is: `reminder_scenario`)."""
    s = "memory"
    return Scenario(
        name=s,
        files={"notes.txt": "one\n", "sub/CLAUDE.md": "Keep sub/ tidy.\n", "sub/x.txt": "x\n"},
        prompts=["Look at sub/x.txt."],
        script=Script(
            message_id_prefix=f"msg_{s}",
            turns=[
                _turn(_tool(s, 1, "Bash", command="cat notes.txt", description="Show")),
                _turn(_tool(s, 2, "Read", file_path=f"{CWD}/sub/x.txt")),
                _turn(_tool(s, 3, "Bash", command="true", description="Nothing")),
                _turn(TextBlock(text="Done.")),
            ],
            **({"model": model} if model else {}),
        ),
        model=model,
    )


def notify_scenario(model: str | None) -> Scenario:
    """A background command that ends while the agent works (`--version V --notify [--model M]`): the CLI queues
    its task notification and records it as a `queued_command` attachment after the next tool result, merged on
    the wire into that result (as the nag is: `reminder_scenario`)."""
    s = "notify"
    return Scenario(
        name=s,
        files={"log.txt": "start\n"},
        prompts=["Log in the background, then in front."],
        script=Script(
            message_id_prefix=f"msg_{s}",
            turns=[
                _turn(
                    _tool(
                        s, 1, "Bash", command="echo bg >> log.txt", description="Log", run_in_background=True
                    )
                ),
                _turn(_tool(s, 2, "Bash", command="sleep 3", description="Wait")),
                _turn(_tool(s, 3, "Bash", command="echo 3 >> log.txt", description="Log")),
                _turn(_tool(s, 4, "Bash", command="cat log.txt", description="Show")),
                _turn(TextBlock(text="Logged.")),
            ],
            **({"model": model} if model else {}),
        ),
        model=model,
    )


def _run_scenario(scenario: Scenario, state: Path) -> tuple[Path, list[bytes], list[dict]]:
    """Run the scenario's prompts with the real CLI; returns (home, stdout per prompt, upstream log)."""
    session_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"sandbox-replayer/{scenario.name}"))
    paths = seed(state, scenario.files, "home", "sock")
    home = paths["home"]
    stdout, log = run_claude(
        prompts=scenario.prompts,
        workspace=paths["workspace"],
        home=home,
        sockets=paths["sock"],
        script=scenario.script,
        session_id=session_id,
        resume_first=False,
        model=scenario.model,
    )
    return home, stdout, log


def record(scenario: Scenario, dest: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix=f"record-{scenario.name}-") as tmp:
        state = Path(tmp)
        home, stdout, log = _run_scenario(scenario, state)
        # 2.0.x also writes warm-up side chains (agent-*.jsonl) and an empty file for a resumed run;
        # 1.0.x resumes into a new session file holding a copy of the history: the longest one is whole
        found = (home / ".claude" / "projects").rglob("*.jsonl")
        sessions = [p for p in found if not p.name.startswith("agent-") and p.stat().st_size]
        if len(sessions) > 1 and len(scenario.prompts) > 1:
            sessions = [max(sessions, key=lambda p: len(p.read_bytes().splitlines()))]
        if len(sessions) != 1:
            raise RuntimeError(f"expected one session file, found {sessions}")
        files = {"session.jsonl": sessions[0].read_bytes(), "stdout.jsonl": b"".join(stdout)}
        return write_fixture(
            dest,
            scenario.name,
            "claude_code",
            state,
            files,
            log,
            session_id=sessions[0].stem,
            project_dir=str(sessions[0].parent.relative_to(home)),
            prompts=scenario.prompts,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--dest", type=Path, default=FIXTURES)
    parser.add_argument(
        "--version", help="record the version scenario with this CLI into versions/<version>/"
    )
    parser.add_argument(
        "--reminders", action="store_true", help="with --version: record the reminder scenario instead"
    )
    parser.add_argument(
        "--memory", action="store_true", help="with --version: record the nested-memory scenario instead"
    )
    parser.add_argument(
        "--notify",
        action="store_true",
        help="with --version: record the background-notification scenario instead",
    )
    parser.add_argument("--model", help="with --reminders, --memory or --notify: the CLI's --model")
    parser.add_argument(
        "--compacted", help="record the compacted scenario with this CLI into compaction/<version>/"
    )
    parser.add_argument("--auto", action="store_true", help="with --compacted: the auto compaction")
    args = parser.parse_args()
    if args.compacted:
        installer.ensure("claude_code", args.compacted)
        with running_version("claude_code", args.compacted):
            main_thread = not args.compacted.startswith("1.")
            make = auto_compacted_scenario if args.auto else compacted_scenario
            scenario = make(summary_on_main_thread=main_thread)
            print("recorded", record(scenario, args.dest / "compaction" / args.compacted))
        return
    if args.version:
        installer.ensure("claude_code", args.version)
        scenario = (
            reminder_scenario(args.model)
            if args.reminders
            else memory_scenario(args.model)
            if args.memory
            else notify_scenario(args.model)
            if args.notify
            else version_scenario()
        )
        with running_version("claude_code", args.version):
            print("recorded", record(scenario, args.dest / "versions" / args.version))
        return
    for scenario in scenarios():
        if args.all or scenario.name in args.names:
            print("recorded", record(scenario, args.dest))


if __name__ == "__main__":
    main()
