"""Run the real pinned `mini` CLI (LocalEnvironment) in the sandbox against the scripted chat upstream."""

from __future__ import annotations

import uuid
from pathlib import Path

from adapters.mini_swe_agent import bundle
from replayer.pins import load_pins
from sandboxes.docker import DockerSandbox, connect
from tests.support.upstream import Script, ScriptedUpstream

CWD = "/testbed"
SOCK_DIR = "/run/replayer-sock"
PORT = 8765
TRAJ = f"{bundle.WORK_MOUNT}/out.traj.json"


def run_mini(
    *, task: str, config: list[str], workspace: Path, work: Path, sockets: Path, script: Script
) -> tuple[bytes, list[dict]]:
    """One `mini` run; the trajectory lands in work/out.traj.json. Returns (stdout, upstream log)."""
    pins = load_pins()
    argv = [
        bundle.python(),
        "-m",
        "minisweagent.run.mini",
        "-m",
        "openai/fake-model",
        "-y",
        "--exit-immediately",
    ]
    for spec in [
        *config,
        f"model.model_kwargs.api_base=http://127.0.0.1:{PORT}/v1",
        f"environment.cwd={CWD}",
    ]:
        argv += ["-c", spec]
    argv += ["-t", task, "-o", TRAJ]
    env = {**bundle.base_env(), "OPENAI_API_KEY": "sk-fake-recorder", "TERM": "dumb"}
    with ScriptedUpstream(script, unix_path=sockets / "upstream.sock") as upstream:
        binds = {CWD: (workspace, False), SOCK_DIR: (sockets, False), **bundle.binds(work)}
        run_id = f"mini-{uuid.uuid4().hex[:8]}"
        with DockerSandbox.start(
            connect(), pins.base_image.tag, binds=binds, workdir=CWD, run_id=run_id
        ) as box:
            box.forward_port(PORT, f"{SOCK_DIR}/upstream.sock")
            res = box.exec(
                ["bash", "-c", 'exec "$@" </dev/null', "mini", *argv], workdir=CWD, env=env, timeout_s=300
            )
            if res.exit_code != 0:
                raise RuntimeError(
                    f"mini exited {res.exit_code}: {(res.stdout + res.stderr).decode()[-3000:]}"
                )
        log = [r.model_dump() for r in upstream.log]
    return res.stdout, log
