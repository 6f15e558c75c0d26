"""Run the real pinned `claude` CLI in the sandbox against the scripted upstream (recorder and tests)."""

from __future__ import annotations

import uuid
from pathlib import Path

from replayer.adapters.base import stdout_events
from replayer.adapters.claude_code import bundle
from replayer.adapters.claude_code.rerun import cli_env
from replayer.adapters.sandbox_paths import AGENT_HOME, BRIDGE_PORT
from replayer.bridges.scripted import Script
from replayer.floor import bundles
from replayer.floor.pins import load_pins
from replayer.sandboxes.docker import DockerSandbox, connect
from tests.support.continuing import scripted

CWD = "/testbed"
SOCK_DIR = "/run/replayer-sock"
PORT = BRIDGE_PORT


def claude_env() -> dict[str, str]:
    return cli_env(PORT, "sk-fake-recorder")


def reported_session(stdout: bytes) -> str | None:
    """The session id a run's stream-json reports (a version without --session-id chooses its own)."""
    for event in stdout_events(stdout):
        if isinstance(event.get("session_id"), str):
            return str(event["session_id"])
    return None


def run_claude(
    *,
    prompts: list[str],
    workspace: Path,
    home: Path,
    sockets: Path,
    script: Script,
    session_id: str,
    resume_first: bool,
    cwd: str = CWD,
    model: str | None = None,
) -> tuple[list[bytes], list[dict]]:
    """Each prompt is one `claude -p` run; the first starts `session_id` unless `resume_first` (a version
    without --session-id starts its own), each further one resumes the session the last run reported."""
    pins = load_pins()
    version = pins.agents["claude_code"].version  # the pinned one, or the one `running_version` set
    mount = bundle.agent_mount(version)
    cli = bundles.cli_path("claude_code", version)
    claude = f"{mount}/{cli.path}"
    stdout: list[bytes] = []
    with scripted("claude_code", script, unix_path=sockets / "upstream.sock") as upstream:
        binds = {cwd: (workspace, False), AGENT_HOME: (home, False), SOCK_DIR: (sockets, False)}
        binds[mount] = (pins.bundle_dir("claude_code"), True)
        if cli.needs_node:
            binds[bundles.NODE_MOUNT] = (bundles.host_node(), True)
        run_id = f"cli-{uuid.uuid4().hex[:8]}"
        with DockerSandbox.start(
            connect(), pins.base_image.tag, binds=binds, workdir=cwd, run_id=run_id
        ) as box:
            box.forward_port(PORT, f"{SOCK_DIR}/upstream.sock")
            current = session_id
            for i, prompt in enumerate(prompts):
                argv = [claude, "-p", prompt, "--output-format", "stream-json", "--verbose"]
                argv += ["--dangerously-skip-permissions"] + (["--model", model] if model else [])
                if i > 0 or resume_first:
                    argv += ["--resume", current]
                elif bundle.takes_session_id(version):
                    argv += ["--session-id", session_id]
                res = box.exec(argv, workdir=cwd, env=claude_env(), timeout_s=180)
                if res.exit_code != 0:
                    raise RuntimeError(f"claude exited {res.exit_code}: {res.stderr.decode()[-2000:]}")
                stdout.append(res.stdout)
                current = reported_session(res.stdout) or current
        log = [r.model_dump() for r in upstream.log]
    return stdout, log
