"""Fixture recorder for Codex: the real pinned `codex` CLI in the sandbox, scripted Responses upstream.

`python -m tests.recorder_codex --all` re-records every scenario into tests/fixtures/codex/<scenario>/:
the initial workspace, the rollout the CLI wrote, its --json stdout and the upstream's log.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from replayer import installer
from replayer.bridges.scripted import CustomToolBlock, ItemBlock, Script, TextBlock, ToolUseBlock, Turn
from replayer.floor.pins import load_pins, running_version
from tests.support.codex_cli import BYPASS, MODEL, run_codex
from tests.support.recording import first_request, seed, write_fixture

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "codex"


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    files: dict[str, str]
    prompts: list[str]
    script: Script
    options: tuple[str, ...] = BYPASS
    """The CLI's sandbox and approval options."""
    interrupt: int | None = None
    """The prompt whose run the user interrupts (Ctrl-C) while a call runs."""


def _exec(sid: str, n: int, cmd: str, **extra: object) -> ToolUseBlock:
    return ToolUseBlock(id=f"call_{sid}_{n:02d}", name="exec_command", input={"cmd": cmd, **extra})


def _patch(sid: str, n: int, body: str) -> CustomToolBlock:
    return CustomToolBlock(
        id=f"call_{sid}_{n:02d}", name="apply_patch", input=f"*** Begin Patch\n{body}*** End Patch\n"
    )


def _turn(*blocks: TextBlock | ToolUseBlock | CustomToolBlock | ItemBlock) -> Turn:
    return Turn(blocks=list(blocks))


def scenarios() -> list[Scenario]:
    s = "exec"
    return [
        Scenario(
            name=s,
            files={"a.txt": "alpha\nbeta\n", "sub/b.txt": "in sub\n"},
            prompts=["Look at the files."],
            script=Script(
                model=MODEL,
                turns=[
                    _turn(TextBlock(text="Reading a.txt."), _exec(s, 1, "cat a.txt")),
                    _turn(_exec(s, 2, "wc -l a.txt"), _exec(s, 3, "ls")),
                    _turn(_exec(s, 4, "echo out; sleep 0.2; echo err >&2; exit 3")),
                    _turn(_exec(s, 5, "ls /nonexistent")),
                    _turn(_exec(s, 6, "pwd && cat b.txt", workdir="sub")),
                    _turn(_exec(s, 7, "seq 1 30000")),
                    _turn(_exec(s, 8, "pwd", workdir="missing")),
                    _turn(_exec(s, 9, "echo one; sleep 5", yield_time_ms=500)),
                    _turn(_exec(s, 10, "printf 'no newline'", login=False, max_output_tokens=2)),
                    _turn(TextBlock(text="Done.")),
                ],
            ),
        ),
        Scenario(
            name=(s := "patch"),
            files={
                "hello.py": "def greet():\n    print('hello')\n\n\ngreet()\n",
                "old.txt": "old\n",
                "mv.txt": "move me\n",
            },
            prompts=["Edit the files."],
            script=Script(
                model=MODEL,
                turns=[
                    _turn(_patch(s, 1, "*** Add File: new.txt\n+first\n+second\n")),
                    _turn(
                        _patch(
                            s,
                            2,
                            "*** Update File: hello.py\n@@ def greet():\n-    print('hello')\n+    print('goodbye')\n",
                        )
                    ),
                    _turn(_patch(s, 3, "*** Delete File: old.txt\n")),
                    _turn(
                        _patch(
                            s, 4, "*** Update File: mv.txt\n*** Move to: moved/mv.txt\n@@\n-move me\n+moved\n"
                        )
                    ),
                    _turn(_patch(s, 5, "*** Update File: hello.py\n@@\n-this line is not there\n+x\n")),
                    _turn(_patch(s, 6, "*** Delete File: absent.txt\n")),
                    _turn(_exec(s, 7, "cat hello.py new.txt moved/mv.txt; ls")),
                    _turn(TextBlock(text="Edited.")),
                ],
            ),
        ),
        Scenario(
            name=(s := "patch_errors"),
            files={
                "a.py": "def f():\n    return “quoted” – dash\n",
                "b.txt": "x  \ny\n",
                "crlf.txt": "one\r\ntwo\r\n",
                "tail.txt": "a\nb\nc\nb\n",
                "nonl.txt": "last",
                "exists.txt": "old\n",
            },
            prompts=["Try the hard patches."],
            script=Script(
                model=MODEL,
                turns=[
                    _turn(CustomToolBlock(id=f"call_{s}_01", name="apply_patch", input="not a patch\n")),
                    _turn(_patch(s, 2, "*** Frobnicate File: x\n")),
                    _turn(_patch(s, 3, "*** Update File: missing.txt\n@@\n-a\n+b\n")),
                    _turn(_patch(s, 4, "*** Update File: a.py\n@@ def nothere():\n-x\n+y\n")),
                    _turn(_patch(s, 5, "*** Update File: b.txt\n")),
                    _turn(
                        _patch(
                            s,
                            6,
                            '*** Update File: a.py\n@@ def f():\n-    return "quoted" - dash\n+    return 1\n',
                        )
                    ),
                    _turn(_patch(s, 7, "*** Update File: b.txt\n@@\n-x\n+X\n")),
                    _turn(_patch(s, 8, "*** Update File: crlf.txt\n@@\n-two\n+TWO\n+three\n")),
                    _turn(_patch(s, 9, "*** Update File: tail.txt\n@@\n-b\n+B\n*** End of File\n")),
                    _turn(_patch(s, 10, "*** Update File: nonl.txt\n@@\n-last\n+last line\n")),
                    _turn(_patch(s, 11, "*** Add File: exists.txt\n+new\n")),
                    _turn(_patch(s, 12, "*** Add File: dup.txt\n+1\n*** Delete File: dup.txt\n")),
                    _turn(
                        CustomToolBlock(
                            id=f"call_{s}_13",
                            name="apply_patch",
                            input="<<'EOF'\n*** Begin Patch\n*** Add File: here.txt\n+doc\n*** End Patch\nEOF\n",
                        )
                    ),
                    _turn(_patch(s, 14, "*** Update File: b.txt\n@@\n bad context\n-y\n+Y\n")),
                    _turn(_patch(s, 15, "*** Update File: b.txt\n@@\n-y\nno prefix\n")),
                    _turn(
                        _patch(
                            s,
                            16,
                            "*** Add File: deep/er/new.txt\n+deep\n*** Update File: b.txt\n@@\n-y\n+why\n*** Delete File: exists.txt\n",
                        )
                    ),
                    _turn(
                        _exec(
                            s,
                            17,
                            'for f in a.py b.txt crlf.txt tail.txt nonl.txt exists.txt here.txt deep/er/new.txt; do echo "== $f"; od -c "$f" | head -5; done',
                        )
                    ),
                    _turn(TextBlock(text="Done.")),
                ],
            ),
        ),
        Scenario(
            name=(s := "continued"),
            files={"a.txt": "one\n"},
            prompts=["Show a.txt.", "Append a line and show it."],
            script=Script(
                model=MODEL,
                turns=[
                    _turn(_exec(s, 1, "cat a.txt")),
                    _turn(TextBlock(text="It says one.")),
                    _turn(_exec(s, 2, "echo two >> a.txt && cat a.txt")),
                    _turn(TextBlock(text="Appended.")),
                ],
            ),
        ),
    ]


def offered_tools() -> dict[str, str]:
    """The tools the running CLI version offers the model (name -> `function` or `custom`)."""
    body = first_request(run_codex, Script(model=MODEL, turns=[_turn(TextBlock(text="ok"))]))
    return {t["name"]: t["type"] for t in body.get("tools", []) if "name" in t}


def version_scenario(offered: dict[str, str]) -> Scenario:
    """One scenario per extra CLI version (`--version V`): its own shell tool and apply_patch, a failing
    command, a long output, a second prompt."""
    s = "probe"

    def shell(n: int, cmd: str) -> ToolUseBlock:
        if "exec_command" in offered:
            return _exec(s, n, cmd)
        if "shell_command" in offered:
            return ToolUseBlock(id=f"call_{s}_{n:02d}", name="shell_command", input={"command": cmd})
        assert "shell" in offered, offered
        return ToolUseBlock(id=f"call_{s}_{n:02d}", name="shell", input={"command": ["bash", "-lc", cmd]})

    def patch(n: int, body: str) -> ToolUseBlock | CustomToolBlock:
        if offered.get("apply_patch") == "custom":
            return _patch(s, n, body)
        text = f"*** Begin Patch\n{body}*** End Patch\n"
        return ToolUseBlock(id=f"call_{s}_{n:02d}", name="apply_patch", input={"input": text})

    turns = [_turn(TextBlock(text="Reading a.txt."), shell(1, "cat a.txt"))]
    turns.append(_turn(shell(2, "echo out; sleep 0.2; echo err >&2; exit 3"), shell(3, "ls missing")))
    turns.append(_turn(shell(4, "seq 1 30000")))
    if "apply_patch" in offered:
        turns.append(_turn(patch(5, "*** Update File: a.txt\n@@\n-alpha\n+ALPHA\n")))
        turns.append(_turn(patch(6, "*** Update File: missing.txt\n@@\n-a\n+b\n")))
    turns += [
        _turn(TextBlock(text="Looked.")),
        _turn(shell(7, "cat a.txt; pwd")),
        _turn(TextBlock(text="Done.")),
    ]
    return Scenario(
        name=s,
        files={"a.txt": "alpha\nbeta\n"},
        prompts=["Look at the files.", "Once more."],
        script=Script(model=MODEL, turns=turns),
    )


WORKSPACE_WRITE = ("--sandbox", "workspace-write")
"""A turn context other than the container's: what a TUI session or `exec --full-auto` records."""


def _reasoning(n: int) -> ItemBlock:
    summary = [{"type": "summary_text", "text": f"Thinking {n}."}]
    item = {"type": "reasoning", "id": f"rs_tc_{n:02d}", "summary": summary, "content": None}
    return ItemBlock(item={**item, "encrypted_content": f"gAAAAB-tc-{n:02d}"})


def turn_context_scenario(offered: dict[str, str]) -> Scenario:
    """A session under workspace-write whose responses hold reasoning items (with the server's ids) and a
    web search call (`--turn-context V`): what resuming such a session inserts and rewrites."""
    s = "turn_context"
    shell = "exec_command" if "exec_command" in offered else "shell_command"
    key = "cmd" if shell == "exec_command" else "command"

    def call(n: int, cmd: str) -> ToolUseBlock:
        return ToolUseBlock(id=f"call_{s}_{n:02d}", name=shell, input={key: cmd})

    search = {"type": "web_search_call", "id": "ws_tc_01", "status": "completed"}
    search["action"] = {"type": "search", "query": "python pathlib read_text"}
    turns = [
        _turn(_reasoning(1), TextBlock(text="Reading a.txt."), call(1, "cat a.txt")),
        _turn(ItemBlock(item=search), _reasoning(2), call(2, "wc -c a.txt"), call(3, "ls")),
        _turn(_reasoning(3), TextBlock(text="Looked.")),
        _turn(_reasoning(4), call(4, "pwd")),
        _turn(TextBlock(text="Done.")),
    ]
    return Scenario(
        name=s,
        files={"a.txt": "alpha\nbeta\n"},
        prompts=["Look at the files.", "Once more."],
        script=Script(model=MODEL, turns=turns),
        options=WORKSPACE_WRITE,
    )


def aborted_scenario() -> Scenario:
    """The user interrupts (Ctrl-C) a batch whose command outlasts the interrupt, with an apply_patch
    waiting behind it; a second prompt resumes the thread (`aborted`)."""
    s = "aborted"
    slow = _exec(s, 1, "echo started; sleep 30; echo finished > late.txt", yield_time_ms=30000)
    turns = [
        _turn(TextBlock(text="Starting."), _exec(s, 0, "cat a.txt")),
        _turn(slow, _patch(s, 2, "*** Add File: b.txt\n+b\n")),
        _turn(_exec(s, 3, "ls")),
        _turn(TextBlock(text="Done.")),
    ]
    return Scenario(
        name=s,
        files={"a.txt": "alpha\n"},
        prompts=["Run the slow job.", "Never mind, list the files."],
        script=Script(model=MODEL, turns=turns),
        interrupt=0,
    )


def record(scenario: Scenario, dest: Path) -> Path:
    with tempfile.TemporaryDirectory(prefix=f"record-{scenario.name}-") as tmp:
        state = Path(tmp)
        paths = seed(state, scenario.files, "home", "sock")
        stdout, log = run_codex(
            prompts=scenario.prompts,
            workspace=paths["workspace"],
            home=paths["home"],
            sockets=paths["sock"],
            script=scenario.script,
            options=scenario.options,
            interrupt=scenario.interrupt,
        )
        rollouts = list((paths["home"] / ".codex" / "sessions").rglob("rollout-*.jsonl"))
        if len(rollouts) != 1:
            raise RuntimeError(f"expected one rollout, found {rollouts}")
        files = {"rollout.jsonl": rollouts[0].read_bytes(), "stdout.jsonl": b"".join(stdout)}
        return write_fixture(
            dest,
            scenario.name,
            "codex",
            state,
            files,
            log,
            rollout_name=rollouts[0].name,
            prompts=scenario.prompts,
        )


ENV_CAPTURE = "env | sort > /home/replay/captured-env.txt"
SHELL_SET = ("PWD=", "OLDPWD=", "SHLVL=", "_=")
"""Set by bash itself in every command, not by the CLI."""


def capture_env() -> Path:
    """Record the environment the pinned CLI gives exec_command commands, as data for the reruns."""
    from replayer.adapters.codex.bundle import env_path

    script = Script(model=MODEL, turns=[_turn(_exec("env", 1, ENV_CAPTURE)), _turn(TextBlock(text="ok"))])
    with tempfile.TemporaryDirectory(prefix="record-env-") as tmp:
        paths = seed(Path(tmp), {}, "home", "sock")
        run_codex(
            prompts=["env"],
            workspace=paths["workspace"],
            home=paths["home"],
            sockets=paths["sock"],
            script=script,
        )
        lines = (paths["home"] / "captured-env.txt").read_text().splitlines()
    dest = env_path(load_pins().agents["codex"].version)
    dest.parent.mkdir(parents=True, exist_ok=True)
    kept = [line for line in lines if not line.startswith(SHELL_SET) and "KEY" not in line.split("=", 1)[0]]
    dest.write_text("\n".join(kept) + "\n")
    return dest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--dest", type=Path, default=FIXTURES)
    parser.add_argument(
        "--env", action="store_true", help="capture the pinned CLI's exec_command environment"
    )
    parser.add_argument(
        "--version", help="record the version scenario with this CLI into versions/<version>/"
    )
    parser.add_argument(
        "--turn-context", help="record the turn-context scenario with this CLI into turn_context/<version>/"
    )
    args = parser.parse_args()
    if args.turn_context:
        installer.ensure("codex", args.turn_context)
        with running_version("codex", args.turn_context):
            scenario = turn_context_scenario(offered_tools())
            print("recorded", record(scenario, args.dest / "turn_context" / args.turn_context))
        return
    if args.version:
        installer.ensure("codex", args.version)
        with running_version("codex", args.version):
            print(
                "recorded", record(version_scenario(offered_tools()), args.dest / "versions" / args.version)
            )
        return
    if args.env or args.all:
        print("captured", capture_env())
    for scenario in scenarios():
        if args.all or scenario.name in args.names:
            print("recorded", record(scenario, args.dest))
    if args.all or "aborted" in args.names:  # not a scenario of every boundary: its own folder
        print("recorded", record(aborted_scenario(), args.dest / "interrupted"))


if __name__ == "__main__":
    main()
