"""Run the real pinned `codex` CLI in the sandbox against the scripted Responses upstream (recorder and tests)."""

from __future__ import annotations

import signal
import time
import uuid
from pathlib import Path

import orjson

from replayer.adapters import sandbox_paths
from replayer.adapters.codex import bundle
from replayer.adapters.sandbox_paths import AGENT_HOME, BRIDGE_PORT
from replayer.bridges.scripted import Script, ScriptedUpstream
from replayer.floor.pins import load_pins
from replayer.sandboxes.docker import DockerSandbox, connect

CWD = "/testbed"
HOME = AGENT_HOME
CODEX_HOME = f"{HOME}/.codex"
SOCK_DIR = "/run/replayer-sock"
PORT = BRIDGE_PORT
MODEL = "gpt-5.5"
KEY_ENV = "REPLAYER_CODEX_KEY"


def agent_mount() -> str:
    return sandbox_paths.agent_mount("codex", load_pins().agents["codex"].version)


def config_toml(port: int = PORT) -> str:
    return f"""model = "{MODEL}"
model_provider = "replayer"
check_for_update_on_startup = false

[model_providers.replayer]
name = "sandbox-replayer bridge"
base_url = "http://127.0.0.1:{port}/v1"
wire_api = "responses"
env_key = "{KEY_ENV}"
request_max_retries = 0
stream_max_retries = 0
"""


def codex_env(key: str) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": HOME, "CODEX_HOME": CODEX_HOME, KEY_ENV: key}


BYPASS = ("--dangerously-bypass-approvals-and-sandbox",)
"""The recorder's default: the container is the sandbox."""


def codex_argv(*args: str, options: tuple[str, ...] = BYPASS) -> list[str]:
    cli = bundle.cli(load_pins().agents["codex"].version)
    return [f"{agent_mount()}/{cli.path}", "exec", "--json", "--skip-git-repo-check", *options, *args]


def _thread_id(home: Path) -> str:
    """The thread the first prompt started (`resume --last PROMPT` reads PROMPT as a session id in 0.58)."""
    (path,) = (home / ".codex" / "sessions").rglob("rollout-*.jsonl")
    return str(orjson.loads(path.read_bytes().splitlines()[0])["payload"]["id"])


INTERRUPT_AFTER_S = 4.0
"""How long after its answer a call runs before the user interrupts it (the call must outlast it)."""


def _interrupted(box: DockerSandbox, command: list[str], upstream: ScriptedUpstream) -> bytes:
    asked = len(upstream.log)
    running = box.start_exec(command, workdir=CWD, env=codex_env("sk-fake-recorder"))
    deadline = time.monotonic() + 120
    while len(upstream.log) == asked and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(INTERRUPT_AFTER_S)
    running.signal(signal.SIGINT)
    if not running.wait(60):
        raise RuntimeError("codex did not end its run when interrupted")
    return running.result(False).stdout


def run_codex(
    *,
    prompts: list[str],
    workspace: Path,
    home: Path,
    sockets: Path,
    script: Script,
    options: tuple[str, ...] = BYPASS,
    interrupt: int | None = None,
) -> tuple[list[bytes], list[dict]]:
    """The first prompt starts a session (`codex exec`), each further one resumes it (`exec resume --last`);
    `options` go before the prompt or `resume` (the sandbox and approval settings). The run of prompt
    `interrupt` is interrupted as a user would (SIGINT, as Ctrl-C) once its first answer is a few seconds
    old: a call still running then is aborted."""
    pins = load_pins()
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(config_toml())
    stdout: list[bytes] = []
    with ScriptedUpstream(script, unix_path=sockets / "upstream.sock") as upstream:
        binds = {CWD: (workspace, False), HOME: (home, False), SOCK_DIR: (sockets, False)}
        binds[agent_mount()] = (pins.bundle_dir("codex"), True)
        run_id = f"codex-{uuid.uuid4().hex[:8]}"
        with DockerSandbox.start(
            connect(), pins.base_image.tag, binds=binds, workdir=CWD, run_id=run_id
        ) as box:
            box.forward_port(PORT, f"{SOCK_DIR}/upstream.sock")
            for i, prompt in enumerate(prompts):
                args = (prompt,) if i == 0 else ("resume", _thread_id(home), prompt)
                argv = codex_argv(*args, options=options)
                command = ["bash", "-c", 'exec "$@" </dev/null', "codex", *argv]
                if i == interrupt:
                    stdout.append(_interrupted(box, command, upstream))
                    continue
                res = box.exec(command, workdir=CWD, env=codex_env("sk-fake-recorder"), timeout_s=180)
                if res.exit_code != 0:
                    raise RuntimeError(
                        f"codex exited {res.exit_code}: {(res.stdout + res.stderr).decode()[-3000:]}"
                    )
                stdout.append(res.stdout)
        log = [r.model_dump() for r in upstream.log]
    return stdout, log
