"""Fixture recorder for OpenCode: the real pinned `opencode` CLI in the sandbox, scripted chat upstream (SSE).

`python -m tests.recorder_opencode --all` re-records every scenario into tests/fixtures/opencode/<scenario>/:
the initial workspace, the runs' stdout event lines (`events.jsonl`, runs appended), the session as
`opencode export` prints it (`export.json`), the SQLite store (`opencode.db`, WAL folded in), and the
upstream's log of every request it received.

`python -m tests.recorder_opencode --server` records the `api` scenario through `opencode serve` and its
HTTP API into tests/fixtures/opencode/server/api/: the body of `GET /session/{id}/message`
(`messages.json`), the SSE streams `GET /event` (`event.sse`) and `GET /global/event` (`global-event.sse`)
as they arrived while the prompts ran, the same session's `opencode export` and the upstream's log; and
the `two` scenario into server/two/: two sessions one after the other on one server, the dumps holding
both, and each session's export (`export-1.json`, `export-2.json`).
"""

from __future__ import annotations

import contextlib
import sqlite3
import tempfile
from pathlib import Path

from replayer import installer
from replayer.adapters.opencode import OpenCodeAdapter, bundle, cli_box
from replayer.bridges.scripted import Script, TextBlock, ToolUseBlock, Turn
from replayer.floor.pins import running_version
from tests.support.opencode_cli import MODEL, run_opencode
from tests.support.opencode_server import STREAMS, run_opencode_server
from tests.support.recording import (
    Scenario,
    call,
    first_request,
    record_selected,
    recorder_parser,
    seed,
    turn,
    write_fixture,
)

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "opencode"
CWD = "/testbed"
CALC = "def add(a, b):\n    return a - b\n"


def checkpointed_db(home: Path, dest: Path) -> None:
    """A self-contained copy of the home's opencode.db (its WAL folded in), for a recorder's fixture (a home
    the recorder made; never a sandbox's, see `home.py`)."""
    source = home / bundle.DB
    with (
        contextlib.closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as src,
        contextlib.closing(sqlite3.connect(dest)) as out,
    ):
        src.backup(out)


def _export(home: Path, session: str) -> bytes:
    """`opencode export SESSION` of the recorded home, by the CLI in its own sandbox."""
    with cli_box.cli_home(seed=home) as cli:
        return cli.run("export", session)


def scenarios() -> list[Scenario]:
    s = "tools"
    return [
        Scenario(
            name=s,
            files={
                "calc.py": CALC,
                "notes.txt": "one\ntwo\nthree\n",
                "pkg/util.py": "def add_one(x):\n    return x + 1\n",
            },
            prompts=["Fix add() in calc.py."],
            script=Script(
                model="fake-model",
                turns=[
                    turn(
                        TextBlock(text="Let me look at both at once."),
                        call(s, 1, "read", filePath=f"{CWD}/calc.py"),
                        call(s, 2, "bash", command="ls; echo err >&2; exit 3", description="List files"),
                    ),
                    turn(call(s, 3, "edit", filePath=f"{CWD}/calc.py", oldString="a - b", newString="a + b")),
                    turn(
                        call(s, 4, "read", filePath=f"{CWD}/missing.txt"),
                        call(s, 5, "no_such_tool", x=1),
                    ),
                    turn(
                        TextBlock(text="Searching."),
                        call(s, 6, "glob", pattern="**/*.py"),
                        call(s, 7, "grep", pattern="def add"),
                        call(s, 8, "read", filePath=f"{CWD}/notes.txt", offset=2, limit=1),
                    ),
                    turn(
                        call(s, 9, "write", filePath=f"{CWD}/new.txt", content="hello\n"),
                        call(s, 10, "edit", filePath=f"{CWD}/notes.txt", oldString="nope", newString="x"),
                    ),
                    turn(
                        call(
                            s,
                            11,
                            "bash",
                            command="python3 -c 'from calc import add; print(add(1, 2))'; cat new.txt",
                            description="Check the fix",
                        )
                    ),
                    turn(TextBlock(text="Fixed: add() now adds.")),
                ],
            ),
        ),
        Scenario(
            name=(s := "two_runs"),
            files={"calc.py": CALC},
            prompts=["Read calc.py.", "Now fix it."],
            script=Script(
                model="fake-model",
                turns=[
                    turn(call(s, 1, "read", filePath=f"{CWD}/calc.py")),
                    turn(TextBlock(text="It subtracts.")),
                    turn(call(s, 2, "edit", filePath=f"{CWD}/calc.py", oldString="a - b", newString="a + b")),
                    turn(call(s, 3, "bash", command="cat calc.py", description="Show calc.py")),
                    turn(TextBlock(text="Fixed.")),
                ],
            ),
        ),
    ]


def offered_tools() -> set[str]:
    """The tools the running CLI version offers the model (one run answered with text)."""
    body = first_request(run_opencode, Script(model=MODEL, turns=[turn(TextBlock(text="ok"))]))
    return {t["function"]["name"] for t in body.get("tools", [])}


def version_scenario(offered: set[str]) -> Scenario:
    """One scenario per extra CLI version (`--version V`): a parallel read + failing bash, an edit, a
    write, a glob when the version has it, then a second prompt in the same session."""
    s = "probe"
    assert {"read", "bash", "edit", "write"} <= offered, offered
    search: list[ToolUseBlock] = [call(s, 5, "glob", pattern="**/*.txt")] if "glob" in offered else []
    turns = [
        turn(
            TextBlock(text="Looking first."),
            call(s, 1, "read", filePath=f"{CWD}/calc.py"),
            call(s, 2, "bash", command="ls; echo err >&2; exit 3", description="List files"),
        ),
        turn(call(s, 3, "edit", filePath=f"{CWD}/calc.py", oldString="a - b", newString="a + b")),
        turn(call(s, 4, "write", filePath=f"{CWD}/new.txt", content="hello\n"), *search),
        turn(TextBlock(text="Fixed.")),
        turn(call(s, 6, "bash", command="cat calc.py new.txt", description="Show the files")),
        turn(TextBlock(text="Shown.")),
    ]
    for each in turns:  # 1.14-1.15 print a run's events only if it outlasts their event subscription
        each.stall_s = OpenCodeAdapter.answer_pause_s
    return Scenario(
        name=s,
        files={"calc.py": CALC, "notes.txt": "one\ntwo\n", "sub/more.txt": "more\n"},
        prompts=["Fix add() in calc.py.", "Show the result."],
        script=Script(model=MODEL, turns=turns),
    )


def _look_first(s: str) -> Turn:
    """The server scenarios' first turn: a parallel read and a failing bash."""
    return turn(
        TextBlock(text="Looking first."),
        call(s, 1, "read", filePath=f"{CWD}/calc.py"),
        call(s, 2, "bash", command="ls; echo err >&2; exit 3", description="List files"),
    )


def server_scenario() -> Scenario:
    """Two prompts through the server's API: a parallel read + failing bash, an edit; then a bash."""
    s = "api"
    return Scenario(
        name=s,
        files={"calc.py": CALC, "notes.txt": "one\ntwo\n"},
        prompts=["Fix add() in calc.py.", "Show the result."],
        script=Script(
            model=MODEL,
            turns=[
                _look_first(s),
                turn(call(s, 3, "edit", filePath=f"{CWD}/calc.py", oldString="a - b", newString="a + b")),
                turn(TextBlock(text="Fixed.")),
                turn(call(s, 4, "bash", command="cat calc.py", description="Show calc.py")),
                turn(TextBlock(text="Shown.")),
            ],
        ),
    )


def two_sessions_scenario() -> Scenario:
    """Two sessions one after the other on one server, in one pair of event dumps: the `api` scenario's
    first prompt, then another session with a bash call of its own."""
    s = "two"
    return Scenario(
        name=s,
        files={"calc.py": CALC, "notes.txt": "one\ntwo\n"},
        prompts=["Fix add() in calc.py.", "Show notes.txt."],
        script=Script(
            model=MODEL,
            turns=[
                _look_first(s),
                turn(TextBlock(text="Seen.")),
                turn(call(s, 3, "bash", command="cat notes.txt", description="Show notes.txt")),
                turn(TextBlock(text="Shown.")),
            ],
        ),
    )


def record_server(scenario: Scenario, dest: Path, one_session_each: bool = False) -> Path:
    """The scenario's prompts in one session (the `api` files: its message list, dumps and export), or
    with `one_session_each`, each prompt in a session of its own (the dumps, and each session's export)."""
    with tempfile.TemporaryDirectory(prefix=f"record-{scenario.name}-") as tmp:
        state = Path(tmp)
        paths = seed(state, scenario.files, "home", "sock")
        prompts = [[p] for p in scenario.prompts] if one_session_each else [scenario.prompts]
        recorded, dumps, log = run_opencode_server(
            sessions=prompts,
            workspace=paths["workspace"],
            home=paths["home"],
            sockets=paths["sock"],
            script=scenario.script,
        )
        files = dict(dumps)
        for n, (session, messages) in enumerate(recorded, 1):
            suffix = f"-{n}" if one_session_each else ""
            if not one_session_each:
                files["messages.json"] = messages
            files[f"export{suffix}.json"] = _export(paths["home"], session)
        ids = [session for session, _ in recorded]
        meta: dict = {"task": scenario.prompts[0], "prompts": scenario.prompts}
        meta |= {"session_ids": ids} if one_session_each else {"session_id": ids[0]}
        routes = {k: f"GET {v}" for k, v in STREAMS.items()}
        routes |= {} if one_session_each else {"messages.json": "GET /session/{id}/message"}
        return write_fixture(dest, scenario.name, bundle.NAME, state, files, log, **meta, routes=routes)


def record(scenario: Scenario, dest: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix=f"record-{scenario.name}-") as tmp:
        state = Path(tmp)
        paths = seed(state, scenario.files, "home", "sock")
        stdout, log, session = run_opencode(
            prompts=scenario.prompts,
            workspace=paths["workspace"],
            home=paths["home"],
            sockets=paths["sock"],
            script=scenario.script,
        )
        files = {
            "events.jsonl": b"".join(stdout),
            "export.json": _export(paths["home"], session),
        }
        if (paths["home"] / bundle.DB).is_file():  # versions before the SQLite store keep JSON files
            checkpointed_db(paths["home"], state / "opencode.db")
            files["opencode.db"] = (state / "opencode.db").read_bytes()
        meta = {"task": scenario.prompts[0], "prompts": scenario.prompts, "session_id": session}
        meta["cli_version"] = bundle.version()
        return write_fixture(dest, scenario.name, bundle.NAME, state, files, log, **meta)


def main() -> None:
    parser = recorder_parser(__doc__, FIXTURES)
    parser.add_argument(
        "--version", help="record the version scenario with this CLI into versions/<version>/"
    )
    parser.add_argument(
        "--unanswered",
        help="record with this CLI a prompt it sends no model (1.0.x before 1.0.152) into unanswered/<version>/",
    )
    parser.add_argument("--server", action="store_true", help="record the server API scenario into server/")
    args = parser.parse_args()
    if args.server:
        print("recorded", record_server(server_scenario(), args.dest / "server"))
        print("recorded", record_server(two_sessions_scenario(), args.dest / "server", one_session_each=True))
        return
    if args.unanswered:
        installer.ensure(bundle.NAME, args.unanswered)
        with running_version(bundle.NAME, args.unanswered):
            scenario = Scenario(
                name="probe",
                files={"a.txt": "alpha\n"},
                prompts=["Show a.txt."],
                script=Script(model=MODEL, turns=[turn(TextBlock(text="Done."))]),
            )
            print("recorded", record(scenario, args.dest / "unanswered" / args.unanswered))
        return
    if args.version:
        installer.ensure(bundle.NAME, args.version)
        with running_version(bundle.NAME, args.version):
            scenario = version_scenario(offered_tools())
            print("recorded", record(scenario, args.dest / "versions" / args.version))
        return
    record_selected(args, scenarios(), record)


if __name__ == "__main__":
    main()
