"""Fixture recorder for Pi session files the pinned scenarios do not produce: the older session formats
(v1 before Pi 0.31.0, v2 from 0.31.0 to 0.34.x; CHANGELOG "Session Tree" and "Session Migration") and a
compaction, each by a real Pi CLI in the sandbox against the scripted chat upstream.

`python -m tests.recorder_pi_sessions --all` records into tests/fixtures/pi/sessions/<scenario>/ the
initial workspace, Pi's stdout (`rpc.jsonl`), the session file it wrote (`session.jsonl`) and the
upstream's log. A scenario's Pi version is the bundle a run would install. Every scenario drives
`pi --mode rpc`: a prompt, an rpc `compact` (its summary request takes the next scripted turn; a tiny
`compaction.keepRecentTokens` makes Pi keep only the last turn), and a second prompt.
"""

from __future__ import annotations

import argparse
import shlex
import tempfile
import uuid
from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict

from replayer import installer
from replayer.adapters.pi import bundle
from replayer.adapters.sandbox_paths import AGENT_HOME, BRIDGE_PORT
from replayer.bridges.scripted import Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn
from replayer.floor.pins import load_pins
from replayer.sandboxes.docker import DockerSandbox, connect
from tests.support.recording import seed, write_fixture

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "pi" / "sessions"
CWD = "/testbed"
SOCK_DIR = "/run/replayer-sock"
PORT = BRIDGE_PORT
CALC = "def add(a, b):\n    return a - b\n"
# One command a line; after each, wait for its response and for the agent_end of every prompt so far.
_RPC = (
    'out=/tmp/rpc.out; : > "$out"; n=0; p=0; '
    '{ for cmd in "$@"; do n=$((n+1)); printf "%s\\n" "$cmd"; '
    'case "$cmd" in *\'"type":"prompt"\'*) p=$((p+1));; esac; '
    'until grep -q "\\"id\\":\\"req-$n\\"" "$out" '
    '&& [ "$(grep -c "\\"type\\":\\"agent_end\\"" "$out")" -ge "$p" ]; do sleep 0.1; done; done; } '
    '| {pi} --mode rpc | tee "$out"'
)


class Scenario(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    version: str
    """The Pi version that writes the file."""
    commands: list[dict]
    script: Script


def _call(sid: str, n: int, tool: str, **args: object) -> ToolUseBlock:
    return ToolUseBlock(id=f"call_{sid}_{n:02d}", name=tool, input=dict(args))


def _turn(*blocks: TextBlock | ToolUseBlock) -> Turn:
    return Turn(blocks=list(blocks))


def _edit(sid: str, n: int, version: str) -> ToolUseBlock:
    """The edit tool took one oldText/newText pair before it took `edits`."""
    change = {"oldText": "a - b", "newText": "a + b"}
    if version.startswith("0.3"):
        return _call(sid, n, "edit", path=f"{CWD}/calc.py", **change)
    return _call(sid, n, "edit", path=f"{CWD}/calc.py", edits=[change])


def _compacting(name: str, version: str) -> Scenario:
    s = name
    return Scenario(
        name=name,
        version=version,
        commands=[
            {"id": "req-1", "type": "prompt", "message": "Read calc.py."},
            {"id": "req-2", "type": "compact"},
            {"id": "req-3", "type": "prompt", "message": "Now fix it."},
        ],
        script=Script(
            model="fake-model",
            turns=[
                _turn(
                    TextBlock(text="Looking."),
                    _call(s, 1, "read", path=f"{CWD}/calc.py"),
                    _call(s, 2, "bash", command="ls"),
                ),
                _turn(TextBlock(text="It subtracts.")),
                _turn(
                    TextBlock(
                        text="## Goal\nFix add() in calc.py.\n\n## Progress\nRead calc.py: it subtracts."
                    )
                ),
                _turn(_edit(s, 3, version)),
                _turn(_call(s, 4, "bash", command="cat calc.py")),
                _turn(TextBlock(text="Fixed.")),
            ],
        ),
    )


def scenarios() -> list[Scenario]:
    return [
        _compacting("v1", "0.30.2"),
        _compacting("v2", "0.32.3"),
        _compacting("compaction", bundle.version()),
    ]


def package_root(version: str) -> Path:
    """node_modules holding @mariozechner/pi-coding-agent `version`: its bundle, installed as a run would."""
    return installer.ensure(bundle.NAME, version) / "node_modules"


def _config(home: Path) -> None:
    bundle.write_config(home, "fake", "fake-model", f"http://127.0.0.1:{PORT}/v1")
    agent = home / ".pi" / "agent"
    models = orjson.loads((agent / "models.json").read_bytes())
    # Pi before 0.4x requires `input` and `cost` in a model definition
    models["providers"]["fake"]["models"][0].update(
        input=["text"], cost={"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0}
    )
    settings = orjson.loads((agent / "settings.json").read_bytes())
    settings["compaction"] = {"keepRecentTokens": 1}
    (agent / "models.json").write_bytes(orjson.dumps(models, option=orjson.OPT_INDENT_2))
    (agent / "settings.json").write_bytes(orjson.dumps(settings, option=orjson.OPT_INDENT_2))


def record(scenario: Scenario, dest: Path) -> Path:
    modules = package_root(scenario.version)
    with tempfile.TemporaryDirectory(prefix=f"record-pi-{scenario.name}-") as tmp:
        state = Path(tmp)
        paths = seed(state, {"calc.py": CALC}, "home", "sock")
        _config(paths["home"])
        with ScriptedUpstream(scenario.script, unix_path=paths["sock"] / "upstream.sock") as upstream:
            binds = {
                CWD: (paths["workspace"], False),
                AGENT_HOME: (paths["home"], False),
                SOCK_DIR: (paths["sock"], False),
                bundle.GLOBAL_MODULES: (modules, True),
                bundle.NODE: (Path(str(load_pins().agents[bundle.NAME].node)), True),
            }
            with DockerSandbox.start(
                connect(),
                load_pins().base_image.tag,
                binds=binds,
                workdir=CWD,
                run_id=f"pi-{uuid.uuid4().hex[:8]}",
            ) as box:
                box.forward_port(PORT, f"{SOCK_DIR}/upstream.sock")
                commands = [orjson.dumps(c).decode() for c in scenario.commands]
                shell = _RPC.replace("{pi}", shlex.join(bundle.cli_argv()))
                res = box.exec(
                    ["bash", "-c", shell, "rpc", *commands], workdir=CWD, env=bundle.base_env(), timeout_s=180
                )
                if res.exit_code != 0:
                    raise RuntimeError(
                        f"pi exited {res.exit_code}: {(res.stdout + res.stderr).decode()[-3000:]}"
                    )
            log = [r.model_dump() for r in upstream.log]
        sessions = sorted((paths["home"] / ".pi" / "agent" / "sessions").rglob("*.jsonl"))
        assert len(sessions) == 1, sessions
        files = {"rpc.jsonl": res.stdout, "session.jsonl": sessions[0].read_bytes()}
        meta = {
            "cli_version": scenario.version,
            "task": scenario.commands[0]["message"],
            "prompts": [c["message"] for c in scenario.commands if c["type"] == "prompt"],
            "commands": scenario.commands,
            "session_file": sessions[0].name,
        }
        return write_fixture(dest, scenario.name, bundle.NAME, state, files, log, **meta)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--dest", type=Path, default=FIXTURES)
    args = parser.parse_args()
    for scenario in scenarios():
        if args.all or scenario.name in args.names:
            print("recorded", record(scenario, args.dest))


if __name__ == "__main__":
    main()
