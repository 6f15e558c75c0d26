"""Fixture recorder for Pi: the real pinned package's CLI in the sandbox, scripted chat upstream (SSE).

`python -m tests.recorder_pi --all` re-records every scenario into tests/fixtures/pi/<scenario>/: the
initial workspace, the event lines of `--mode json` (`events.jsonl`, runs appended) or of `--mode rpc`
(`rpc.jsonl`), the session file Pi wrote (`session.jsonl`) and the upstream's log of every request.
`python -m tests.recorder_pi --version V` records the version scenario with Pi V (installed on demand)
into tests/fixtures/pi/versions/<V>/probe/.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from replayer import installer
from replayer.bridges.scripted import Script, TextBlock, ToolUseBlock
from replayer.floor.pins import running_version
from tests.support import recording
from tests.support.pi_cli import run_pi
from tests.support.recording import (
    call,
    first_request,
    record_selected,
    recorder_parser,
    seed,
    turn,
    write_fixture,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "pi"
CWD = "/testbed"
CALC = "def add(a, b):\n    return a - b\n"


def _tools_script(s: str) -> Script:
    return Script(
        model="fake-model",
        turns=[
            turn(
                TextBlock(text="Let me look at both at once."),
                call(s, 1, "read", path=f"{CWD}/calc.py"),
                call(s, 2, "bash", command="ls; echo err >&2; exit 3"),
            ),
            turn(call(s, 3, "edit", path=f"{CWD}/calc.py", edits=[{"oldText": "a - b", "newText": "a + b"}])),
            turn(
                call(s, 4, "read", path=f"{CWD}/missing.txt"),
                call(s, 5, "read", path=f"{CWD}/notes.txt", offset=2, limit=1),
            ),
            turn(
                call(s, 6, "write", path=f"{CWD}/new.txt", content="hello\n"),
                call(s, 7, "edit", path=f"{CWD}/notes.txt", edits=[{"oldText": "nope", "newText": "x"}]),
            ),
            turn(
                call(s, 8, "bash", command="python3 -c 'from calc import add; print(add(1, 2))'; cat new.txt")
            ),
            turn(TextBlock(text="Fixed: add() now adds.")),
        ],
    )


class Scenario(recording.Scenario):
    rpc: bool = False
    """Drive `--mode rpc` (one prompt command per prompt) instead of `--mode json` runs."""


def scenarios() -> list[Scenario]:
    files = {"calc.py": CALC, "notes.txt": "one\ntwo\nthree\n"}
    return [
        Scenario(name="tools", files=files, prompts=["Fix add() in calc.py."], script=_tools_script("tools")),
        Scenario(
            name="rpc", files=files, prompts=["Fix add() in calc.py."], script=_tools_script("rpc"), rpc=True
        ),
        Scenario(
            name=(s := "two_runs"),
            files={"calc.py": CALC},
            prompts=["Read calc.py.", "Now fix it."],
            script=Script(
                model="fake-model",
                turns=[
                    turn(call(s, 1, "read", path=f"{CWD}/calc.py")),
                    turn(TextBlock(text="It subtracts.")),
                    turn(
                        call(
                            s,
                            2,
                            "edit",
                            path=f"{CWD}/calc.py",
                            edits=[{"oldText": "a - b", "newText": "a + b"}],
                        )
                    ),
                    turn(call(s, 3, "bash", command="cat calc.py")),
                    turn(TextBlock(text="Fixed.")),
                ],
            ),
        ),
        Scenario(
            name=(s := "unknown_tool"),
            files={"calc.py": CALC},
            prompts=["Fix add() in calc.py."],
            script=Script(
                model="fake-model",
                turns=[
                    turn(call(s, 1, "read", path=f"{CWD}/calc.py"), call(s, 2, "no_such_tool", x=1)),
                    turn(TextBlock(text="Done.")),
                ],
            ),
        ),
    ]


def offered_tools() -> dict[str, dict[str, Any]]:
    """The tools the running Pi version offers the model (name -> JSON schema of its arguments)."""
    body = first_request(run_pi, Script(model="fake-model", turns=[turn(TextBlock(text="ok"))]))
    return {t["function"]["name"]: t["function"].get("parameters", {}) for t in body.get("tools", [])}


def version_scenario(offered: dict[str, dict[str, Any]]) -> Scenario:
    """One scenario per extra Pi version (`--version V`): a parallel read + failing bash batch, an edit in
    the form that version's edit tool takes (one oldText/newText, or `edits[]`), a failing edit, a write,
    a second prompt that continues the session."""
    s = "probe"
    assert {"read", "bash", "edit", "write"} <= set(offered), offered

    def edit(n: int, path: str, old: str, new: str) -> ToolUseBlock:
        if "edits" in offered["edit"].get("properties", {}):
            return call(s, n, "edit", path=path, edits=[{"oldText": old, "newText": new}])
        return call(s, n, "edit", path=path, oldText=old, newText=new)

    return Scenario(
        name=s,
        files={"calc.py": CALC, "notes.txt": "one\ntwo\nthree\n"},
        prompts=["Fix add() in calc.py.", "Now write a note."],
        script=Script(
            model="fake-model",
            turns=[
                turn(
                    TextBlock(text="Let me look."),
                    call(s, 1, "read", path=f"{CWD}/calc.py"),
                    call(s, 2, "bash", command="ls; echo err >&2; exit 3"),
                ),
                turn(edit(3, f"{CWD}/calc.py", "a - b", "a + b")),
                turn(edit(4, f"{CWD}/notes.txt", "nope", "x"), call(s, 5, "read", path=f"{CWD}/missing.txt")),
                turn(TextBlock(text="Fixed: add() now adds.")),
                turn(call(s, 6, "write", path=f"{CWD}/new.txt", content="hello\n")),
                turn(
                    call(
                        s,
                        7,
                        "bash",
                        command="python3 -c 'from calc import add; print(add(1, 2))'; cat new.txt",
                    )
                ),
                turn(TextBlock(text="Written.")),
            ],
        ),
    )


def record(scenario: Scenario, dest: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix=f"record-{scenario.name}-") as tmp:
        state = Path(tmp)
        paths = seed(state, scenario.files, "home", "sock")
        stdout, log = run_pi(
            prompts=scenario.prompts,
            workspace=paths["workspace"],
            home=paths["home"],
            sockets=paths["sock"],
            script=scenario.script,
            rpc=scenario.rpc,
        )
        sessions = sorted((paths["home"] / ".pi" / "agent" / "sessions").rglob("*.jsonl"))
        assert len(sessions) == 1, sessions
        files = {
            "rpc.jsonl" if scenario.rpc else "events.jsonl": b"".join(stdout),
            "session.jsonl": sessions[0].read_bytes(),
        }
        meta = {"task": scenario.prompts[0], "prompts": scenario.prompts, "session_file": sessions[0].name}
        return write_fixture(dest, scenario.name, "pi", state, files, log, **meta)


def main() -> None:
    parser = recorder_parser(__doc__, FIXTURES)
    parser.add_argument("--version", help="record the version scenario with this Pi into versions/<version>/")
    args = parser.parse_args()
    if args.version:
        installer.ensure("pi", args.version)
        with running_version("pi", args.version):
            print(
                "recorded", record(version_scenario(offered_tools()), args.dest / "versions" / args.version)
            )
        return
    record_selected(args, scenarios(), record)


if __name__ == "__main__":
    main()
