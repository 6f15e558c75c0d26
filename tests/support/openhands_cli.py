"""Run the pinned OpenHands (V1 SDK) in the sandbox against the scripted chat upstream (recorder and tests)."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson

from replayer.adapters.openhands import bundle
from replayer.adapters.sandbox_paths import BRIDGE_PORT
from replayer.bridges.scripted import Script, ScriptedUpstream
from replayer.floor.pins import load_pins
from replayer.sandboxes.docker import DockerSandbox, connect

CWD = "/testbed"
SOCK_DIR = "/run/replayer-sock"
SUPPORT_MOUNT = "/opt/replayer/recorder-openhands"
SUPPORT_DIR = Path(__file__).resolve().parent / "openhands"
PORT = BRIDGE_PORT
MODEL = "openai/fake-model"


def run_sdk(
    *,
    task: str,
    workspace: Path,
    work: Path,
    sockets: Path,
    script: Script,
    conversation_id: str,
    max_iterations: int = 30,
) -> tuple[bytes, list[dict]]:
    """One V1 conversation; it is persisted in work/conversations/<id hex>. Returns (stdout, upstream log)."""
    (work / "home").mkdir(exist_ok=True)
    spec = {
        "model": MODEL,
        "base_url": f"http://127.0.0.1:{PORT}/v1",
        "cwd": CWD,
        "persistence_dir": f"{bundle.WORK_MOUNT}/conversations",
        "conversation_id": conversation_id,
        "task": task,
        "max_iterations": max_iterations,
    }
    binds = {CWD: (workspace, False), SOCK_DIR: (sockets, False), SUPPORT_MOUNT: (SUPPORT_DIR, True)}
    binds.update(bundle.binds(work))
    argv = [bundle.python(), f"{SUPPORT_MOUNT}/sdk_record.py", orjson.dumps(spec).decode()]
    with ScriptedUpstream(script, unix_path=sockets / "upstream.sock") as upstream:
        run_id = f"openhands-{uuid.uuid4().hex[:8]}"
        with DockerSandbox.start(
            connect(), load_pins().base_image.tag, binds=binds, workdir=CWD, run_id=run_id
        ) as box:
            box.forward_port(PORT, f"{SOCK_DIR}/upstream.sock")
            res = box.exec(
                ["bash", "-c", 'exec "$@" </dev/null', "oh", *argv],
                workdir=CWD,
                env=bundle.base_env(),
                timeout_s=300,
            )
            if res.exit_code != 0:
                raise RuntimeError(
                    f"openhands exited {res.exit_code}: {(res.stdout + res.stderr).decode()[-3000:]}"
                )
        log = [r.model_dump() for r in upstream.log]
    return res.stdout, log


V0_CONFIG = f"{SUPPORT_MOUNT}/v0_config.toml"


def run_v0(
    *, task: str, workspace: Path, work: Path, sockets: Path, script: Script
) -> tuple[bytes, list[dict]]:
    """One headless openhands-ai 1.6.0 run (V0 controller, local runtime) in the sandbox; the trajectory
    lands in work/trajectory.json. Returns (stdout, upstream log)."""
    binds = {CWD: (workspace, False), SOCK_DIR: (sockets, False), SUPPORT_MOUNT: (SUPPORT_DIR, True)}
    binds.update(bundle.binds_v0(work))
    argv = [
        bundle.python(bundle.NAME_V0),
        "-m",
        "openhands.core.main",
        "--config-file",
        V0_CONFIG,
        "-t",
        task,
    ]
    env = {**bundle.v0_env(), "SAVE_TRAJECTORY_PATH": f"{bundle.WORK_MOUNT}/trajectory.json"}
    with ScriptedUpstream(script, unix_path=sockets / "upstream.sock") as upstream:
        run_id = f"openhands-v0-{uuid.uuid4().hex[:8]}"
        with DockerSandbox.start(
            connect(), load_pins().base_image.tag, binds=binds, workdir=CWD, run_id=run_id
        ) as box:
            box.forward_port(PORT, f"{SOCK_DIR}/upstream.sock")
            res = box.exec(
                ["bash", "-c", 'exec "$@" </dev/null', "oh", *argv], workdir=CWD, env=env, timeout_s=600
            )
            if res.exit_code != 0 or not (work / "trajectory.json").exists():
                raise RuntimeError(
                    f"openhands exited {res.exit_code}: {(res.stdout + res.stderr).decode()[-3000:]}"
                )
        log = [r.model_dump() for r in upstream.log]
    return res.stdout, log
