"""Fixture recorder for mini-swe-agent: the real pinned `mini` CLI in the sandbox, scripted chat upstream.

`python -m tests.recorder_mini --all` re-records every scenario into
tests/fixtures/mini_swe_agent/<scenario>/: the initial workspace, the .traj.json the CLI wrote,
its stdout and the upstream's log of every request it received. `--version V` records the probe
scenario with mini-swe-agent V (its bundle, installed on demand) into
tests/fixtures/mini_swe_agent/versions/<V>/probe/.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from replayer import installer
from replayer.bridges.scripted import Script, TextBlock, ToolUseBlock, Turn
from replayer.floor.pins import running_version
from tests.support.mini_cli import run_mini
from tests.support.recording import record_selected, recorder_parser, seed, write_fixture

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "mini_swe_agent"
CALC = "def add(a, b):\n    return a - b\n"
SUBMIT = "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    files: dict[str, str]
    task: str
    config: list[str]
    script: Script
    mini_version: str | None = None
    """Record with this older mini-swe-agent (its own venv, made here) instead of the pinned one."""


def _bash(sid: str, n: int, command: str) -> ToolUseBlock:
    return ToolUseBlock(id=f"call_{sid}_{n:02d}", name="bash", input={"command": command})


def _turn(*blocks: TextBlock | ToolUseBlock) -> Turn:
    return Turn(blocks=list(blocks))


def _text_action(thought: str, command: str) -> Turn:
    return _turn(TextBlock(text=f"THOUGHT: {thought}\n\n```mswea_bash_command\n{command}\n```"))


def _v1_action(thought: str, command: str) -> Turn:
    return _turn(TextBlock(text=f"THOUGHT: {thought}\n\n```bash\n{command}\n```"))


def scenarios() -> list[Scenario]:
    s = "toolcall"
    return [
        Scenario(
            name=s,
            files={"calc.py": CALC, "README.md": "A calculator.\n"},
            task="Fix add() in calc.py.",
            config=["mini.yaml", "environment.timeout=2"],
            script=Script(
                model="fake-model",
                turns=[
                    _turn(TextBlock(text="Let me look around."), _bash(s, 1, "ls")),
                    _turn(
                        TextBlock(text="I will check both at the same time."),
                        _bash(s, 2, "python3 -c 'from calc import add; assert add(1, 2) == 3, add(1, 2)'"),
                        _bash(s, 3, "grep -n 'def add' -A1 calc.py"),
                    ),
                    _turn(
                        TextBlock(text="Fixing it."),
                        _bash(s, 4, "sed -i 's/a - b/a + b/' calc.py && cat calc.py"),
                    ),
                    _turn(TextBlock(text="I think it is fixed now.")),
                    _turn(
                        TextBlock(text="Long output and a slow command."),
                        _bash(s, 5, "seq 1 3000"),
                        _bash(s, 6, "sleep 5; echo late"),
                    ),
                    _turn(_bash(s, 7, "echo out; echo err >&2; printf 'a\\r\\nb\\rc'; exit 3")),
                    _turn(_bash(s, 8, "python3 -c 'from calc import add; print(add(1, 2))'")),
                    _turn(TextBlock(text="Done."), _bash(s, 9, SUBMIT)),
                ],
            ),
        ),
        Scenario(
            name=(s := "textbased"),
            files={"calc.py": CALC},
            task="Fix add() in calc.py.",
            config=["mini_textbased.yaml", "model.model_class=litellm_textbased"],
            script=Script(
                model="fake-model",
                turns=[
                    _text_action("Read the file.", "cat calc.py"),
                    _turn(
                        TextBlock(
                            text="Two actions:\n```mswea_bash_command\nls\n```\n```mswea_bash_command\npwd\n```"
                        )
                    ),
                    _text_action("Fix it.", "sed -i 's/a - b/a + b/' calc.py"),
                    _text_action(
                        "Check.", "python3 -c 'from calc import add; print(add(1, 2))'; ls /nonexistent"
                    ),
                    _text_action("Submit.", SUBMIT),
                ],
            ),
        ),
        Scenario(
            name=(s := "v1"),
            files={"calc.py": CALC},
            task="Fix add() in calc.py.",
            config=[],
            mini_version="1.17.5",
            script=Script(
                model="fake-model",
                turns=[
                    _v1_action("Read the file.", "cat calc.py"),
                    _turn(TextBlock(text="No action here.")),
                    _v1_action(
                        "Fix it.",
                        "sed -i 's/a - b/a + b/' calc.py && python3 -c 'from calc import add; print(add(1, 2))'",
                    ),
                    _v1_action("Missing.", "ls /nonexistent"),
                    _v1_action("Submit.", SUBMIT),
                ],
            ),
        ),
        Scenario(
            name=(s := "v1_15"),
            files={"calc.py": CALC},
            task="Fix add() in calc.py.",
            config=["environment.timeout=2"],
            mini_version="1.15.0",  # before 1.17.2: each message sent whole (timestamp, extra)
            script=Script(
                model="fake-model",
                turns=[
                    _v1_action("Read the file.", "cat calc.py"),
                    _turn(TextBlock(text="No action here.")),
                    _v1_action("Slow.", "sleep 5; echo late"),  # 1.x's own timeout_template
                    _v1_action(
                        "Fix it.",
                        "sed -i 's/a - b/a + b/' calc.py && python3 -c 'from calc import add; print(add(1, 2))'",
                    ),
                    _v1_action("Submit.", SUBMIT),
                ],
            ),
        ),
    ]


def version_scenario() -> Scenario:
    """One scenario per extra 2.x version (`--version V`): a parallel batch with a failing command, a
    FormatError turn, an edit, a check and a submission."""
    s = "probe"
    return Scenario(
        name=s,
        files={"calc.py": CALC, "notes.txt": "first\nsecond\n"},
        task="Fix add() in calc.py.",
        config=["mini.yaml"],
        script=Script(
            model="fake-model",
            turns=[
                _turn(
                    TextBlock(text="Looking around."),
                    _bash(s, 1, "ls && cat notes.txt"),
                    _bash(s, 2, "ls /nonexistent"),
                ),
                _turn(TextBlock(text="No tool call in this turn.")),
                _turn(
                    TextBlock(text="Fixing it."),
                    _bash(s, 3, "sed -i 's/a - b/a + b/' calc.py && cat calc.py"),
                ),
                _turn(_bash(s, 4, "python3 -c 'from calc import add; print(add(1, 2))'; exit 2")),
                _turn(TextBlock(text="Done."), _bash(s, 5, SUBMIT)),
            ],
        ),
    )


def record(scenario: Scenario, dest: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix=f"record-{scenario.name}-") as tmp:
        state = Path(tmp)
        paths = seed(state, scenario.files, "work", "sock")
        stdout, log = run_mini(
            task=scenario.task,
            config=scenario.config,
            workspace=paths["workspace"],
            work=paths["work"],
            sockets=paths["sock"],
            script=scenario.script,
            v1_venv=installer.ensure("mini_swe_agent", scenario.mini_version)
            if scenario.mini_version
            else None,
        )
        files = {"trajectory.traj.json": (paths["work"] / "out.traj.json").read_bytes(), "stdout.log": stdout}
        version = {"cli_version": scenario.mini_version} if scenario.mini_version else {}
        meta = {"task": scenario.task, "config": scenario.config, **version}
        return write_fixture(dest, scenario.name, "mini_swe_agent", state, files, log, **meta)


def main() -> None:
    parser = recorder_parser(__doc__, FIXTURES)
    parser.add_argument("--version", help="record the probe scenario with this 2.x into versions/<version>/")
    args: argparse.Namespace = parser.parse_args()
    if args.version:
        installer.ensure("mini_swe_agent", args.version)
        with running_version("mini_swe_agent", args.version):
            print("recorded", record(version_scenario(), args.dest / "versions" / args.version))
        return
    record_selected(args, scenarios(), record)


if __name__ == "__main__":
    main()
