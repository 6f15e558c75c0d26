"""Run the real pinned Pi CLI in the sandbox against the scripted chat upstream (recorder and tests)."""

from __future__ import annotations

import shlex
import uuid
from pathlib import Path

from replayer.adapters.pi import bundle
from replayer.adapters.sandbox_paths import AGENT_HOME, BRIDGE_PORT
from replayer.bridges.scripted import Script, ScriptedUpstream
from replayer.floor.pins import load_pins
from replayer.sandboxes.docker import DockerSandbox, connect

CWD = "/testbed"
SOCK_DIR = "/run/replayer-sock"
PORT = BRIDGE_PORT
PROVIDER = "fake"
MODEL = "fake-model"
# RPC mode: one prompt command per prompt, each sent once the previous run ended; stdin closed at the end.
_RPC = (
    'out=/tmp/rpc.out; : > "$out"; n=0; '
    '{ for cmd in "$@"; do printf "%s\\n" "$cmd"; n=$((n+1)); '
    'until [ "$(grep -c "\\"type\\":\\"agent_end\\"" "$out")" -ge "$n" ]; do sleep 0.1; done; done; } '
    '| {pi} --mode rpc | tee "$out"'
)


def run_pi(
    *, prompts: list[str], workspace: Path, home: Path, sockets: Path, script: Script, rpc: bool = False
) -> tuple[list[bytes], list[dict]]:
    """json mode: the first prompt starts a session, each further one continues it (`--continue`);
    rpc mode: every prompt is a `prompt` command to one process. Returns each run's stdout and the upstream log."""
    bundle.write_config(home, PROVIDER, MODEL, f"http://127.0.0.1:{PORT}/v1")
    stdout: list[bytes] = []
    with ScriptedUpstream(script, unix_path=sockets / "upstream.sock") as upstream:
        binds = {CWD: (workspace, False), AGENT_HOME: (home, False), SOCK_DIR: (sockets, False)}
        binds.update(bundle.binds())
        run_id = f"pi-{uuid.uuid4().hex[:8]}"
        with DockerSandbox.start(
            connect(), load_pins().base_image.tag, binds=binds, workdir=CWD, run_id=run_id
        ) as box:
            box.forward_port(PORT, f"{SOCK_DIR}/upstream.sock")
            if rpc:
                commands = [
                    f'{{"id":"req-{n}","type":"prompt","message":{_json(p)}}}'
                    for n, p in enumerate(prompts, 1)
                ]
                shell = _RPC.replace("{pi}", shlex.join(bundle.cli_argv()))
                runs = [["bash", "-c", shell, "rpc", *commands]]
            else:
                runs = [
                    bundle.cli_argv("--mode", "json", *([] if i == 0 else ["--continue"]), prompt)
                    for i, prompt in enumerate(prompts)
                ]
            for argv in runs:
                res = box.exec(
                    ["bash", "-c", 'exec "$@" </dev/null', "pi", *argv] if not rpc else argv,
                    workdir=CWD,
                    env=bundle.base_env(),
                    timeout_s=180,
                )
                if res.exit_code != 0:
                    raise RuntimeError(
                        f"pi exited {res.exit_code}: {(res.stdout + res.stderr).decode()[-3000:]}"
                    )
                stdout.append(res.stdout)
        log = [r.model_dump() for r in upstream.log]
    return stdout, log


def _json(text: str) -> str:
    import orjson

    return orjson.dumps(text).decode()
