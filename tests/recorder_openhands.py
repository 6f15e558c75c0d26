"""Fixture recorder for OpenHands: the pinned SDK (V1) in the sandbox, scripted chat upstream.

`python -m tests.recorder_openhands --all` re-records every scenario into
tests/fixtures/openhands/<scenario>/: the initial workspace, the conversation directory the SDK
persisted (conversation/base_state.json + conversation/events/), its stdout and the upstream's log
of every request it received. `--version V` records the probe scenario with SDK V (its bundle,
installed on demand) into tests/fixtures/openhands/versions/<V>/probe/.
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from replayer import installer
from replayer.adapters.openhands.bundle import NAME, NAME_V0, version
from replayer.bridges.scripted import Script, TextBlock
from replayer.floor.pins import running_version
from tests.support.openhands_cli import run_sdk, run_v0
from tests.support.recording import call, record_selected, recorder_parser, seed, turn, write_fixture

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "openhands"
CALC = "def add(a, b):\n    return a - b\n"
CHECK = "python3 -c 'from calc import add; assert add(1, 2) == 3, add(1, 2)'"


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    files: dict[str, str]
    task: str
    conversation_id: str
    script: Script
    format: str = "v1"
    """v1: the SDK's conversation directory; v0: openhands-ai 1.6.0's saved trajectory."""


def scenarios() -> list[Scenario]:
    s = "v1"
    return [
        Scenario(
            name=s,
            files={"calc.py": CALC, "README.md": "A calculator.\n"},
            task="Fix add() in calc.py.",
            conversation_id="6f0c2a4e-1b7d-4c3e-9a55-0d1e2f3a4b5c",
            script=Script(
                model="fake-model",
                turns=[
                    turn(
                        TextBlock(text="Let me look at the files first."),
                        call(s, 1, "terminal", command="ls"),
                        call(s, 2, "file_editor", command="view", path="/testbed/calc.py"),
                    ),
                    turn(call(s, 3, "terminal", command=CHECK)),
                    turn(
                        TextBlock(text="The sign is wrong."),
                        call(
                            s,
                            4,
                            "file_editor",
                            command="str_replace",
                            path="/testbed/calc.py",
                            old_str="return a - b",
                            new_str="return a + b",
                        ),
                    ),
                    turn(call(s, 5, "terminal", command=CHECK + " && echo OK")),
                    turn(call(s, 6, "finish", message="Fixed add() in calc.py.")),
                ],
            ),
        ),
        Scenario(
            name=(s := "v0"),
            format="v0",
            files={"calc.py": CALC, "README.md": "A calculator.\n"},
            task="Fix add() in calc.py.",
            conversation_id="",
            script=Script(
                model="fake-model",
                turns=[
                    turn(
                        TextBlock(text="Let me look at the files first."),
                        call(s, 1, "execute_bash", command="ls", security_risk="LOW"),
                        call(
                            s,
                            2,
                            "str_replace_editor",
                            command="view",
                            path="/testbed/calc.py",
                            security_risk="LOW",
                        ),
                    ),
                    turn(call(s, 3, "execute_bash", command=CHECK, security_risk="LOW")),
                    turn(
                        TextBlock(text="The sign is wrong."),
                        call(
                            s,
                            4,
                            "str_replace_editor",
                            command="str_replace",
                            path="/testbed/calc.py",
                            old_str="return a - b",
                            new_str="return a + b",
                            security_risk="LOW",
                        ),
                    ),
                    turn(call(s, 5, "execute_bash", command=CHECK + " && echo OK", security_risk="LOW")),
                    turn(call(s, 6, "finish", message="Fixed add() in calc.py.")),
                ],
            ),
        ),
    ]


def version_scenario() -> Scenario:
    """One scenario per extra SDK version (`--version V`): commands in one batch, a failing one, a file
    edit and a view of the edited file; it ends without `finish`, so every step is a boundary."""
    s = "probe"
    return Scenario(
        name=s,
        files={"calc.py": CALC, "notes.txt": "first\nsecond\n"},
        task="Fix add() in calc.py.",
        conversation_id="3a1f5c7e-2b4d-4e6f-8a9b-0c1d2e3f4a5b",
        script=Script(
            model="fake-model",
            turns=[
                turn(
                    TextBlock(text="Looking around."),
                    call(s, 1, "terminal", command="ls && cat notes.txt"),
                    call(s, 2, "terminal", command="ls /nonexistent"),
                ),
                turn(call(s, 3, "terminal", command=CHECK)),
                turn(
                    TextBlock(text="The sign is wrong."),
                    call(
                        s,
                        4,
                        "file_editor",
                        command="str_replace",
                        path="/testbed/calc.py",
                        old_str="return a - b",
                        new_str="return a + b",
                    ),
                ),
                turn(
                    call(s, 5, "file_editor", command="view", path="/testbed/calc.py"),
                    call(s, 6, "terminal", command=CHECK + " && echo OK"),
                ),
                turn(TextBlock(text="Fixed add() in calc.py.")),
            ],
        ),
    )


def record(scenario: Scenario, dest: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix=f"record-{scenario.name}-") as tmp:
        state = Path(tmp)
        paths = seed(state, scenario.files, "work", "sock")
        if scenario.format == "v0":
            stdout, log = run_v0(
                task=scenario.task,
                workspace=paths["workspace"],
                work=paths["work"],
                sockets=paths["sock"],
                script=scenario.script,
            )
            files = {
                "trajectory.json": (paths["work"] / "trajectory.json").read_bytes(),
                "stdout.log": stdout,
            }
            meta = {"task": scenario.task, "format": "v0", "cli_version": version(NAME_V0)}
            return write_fixture(dest, scenario.name, NAME_V0, state, files, log, **meta)
        stdout, log = run_sdk(
            task=scenario.task,
            workspace=paths["workspace"],
            work=paths["work"],
            sockets=paths["sock"],
            script=scenario.script,
            conversation_id=scenario.conversation_id,
        )
        meta = {"task": scenario.task, "format": "v1"}
        out = write_fixture(dest, scenario.name, "openhands", state, {"stdout.log": stdout}, log, **meta)
        conv = paths["work"] / "conversations" / scenario.conversation_id.replace("-", "")
        shutil.copytree(conv, out / "conversation")
        return out


def main() -> None:
    parser = recorder_parser(__doc__, FIXTURES)
    parser.add_argument("--version", help="record the probe scenario with this SDK into versions/<version>/")
    args: argparse.Namespace = parser.parse_args()
    if args.version:
        installer.ensure(NAME, args.version)
        with running_version(NAME, args.version):
            print("recorded", record(version_scenario(), args.dest / "versions" / args.version))
        return
    record_selected(args, scenarios(), record)


if __name__ == "__main__":
    main()
