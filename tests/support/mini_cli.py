"""Run the real `mini` CLI (LocalEnvironment) in the sandbox against the scripted chat upstream.

The pinned package by default; with `v1_venv`, a mini-swe-agent 1.x installed there (to record
the older trajectory format).
"""

from __future__ import annotations

import uuid
from pathlib import Path

from replayer.adapters.mini_swe_agent import bundle
from replayer.adapters.sandbox_paths import BRIDGE_PORT
from replayer.bridges.scripted import Script, ScriptedUpstream
from replayer.floor.pins import load_pins
from replayer.sandboxes.docker import DockerSandbox, connect

CWD = "/testbed"
SOCK_DIR = "/run/replayer-sock"
PORT = BRIDGE_PORT
TRAJ = f"{bundle.WORK_MOUNT}/out.traj.json"
V1_MOUNT = "/opt/replayer/recorder/mini-1"
V1_CONFIG = f"{bundle.WORK_MOUNT}/v1-config.yaml"
# mini 1.x takes one config file: its builtin mini.yaml with the upstream and the cwd set, and the
# scenario's `SECTION.KEY=VALUE` settings (argv[1:]).
_V1_WRITE_CONFIG = f"""
import sys, yaml
from minisweagent.config import builtin_config_dir
c = yaml.safe_load((builtin_config_dir / "mini.yaml").read_text())
c["model"].setdefault("model_kwargs", {{}})["api_base"] = "http://127.0.0.1:{PORT}/v1"
c["environment"]["cwd"] = "{CWD}"
for setting in sys.argv[1:]:
    key, _, value = setting.partition("=")
    section, _, name = key.partition(".")
    c[section][name] = yaml.safe_load(value)
c["env"] = c["environment"]  # the section's name in `mini` before 1.17 (its own mini.yaml says environment)
yaml.safe_dump(c, open("{V1_CONFIG}", "w"))
"""


def run_mini(
    *,
    task: str,
    config: list[str],
    workspace: Path,
    work: Path,
    sockets: Path,
    script: Script,
    v1_venv: Path | None = None,
) -> tuple[bytes, list[dict]]:
    """One `mini` run; the trajectory lands in work/out.traj.json. Returns (stdout, upstream log)."""
    pins = load_pins()
    python = f"{V1_MOUNT}/bin/python" if v1_venv else bundle.python()
    argv = [python, "-m", "minisweagent.run.mini", "-m", "openai/fake-model", "-y", "--exit-immediately"]
    if v1_venv:
        argv += ["-c", V1_CONFIG]
    else:
        for spec in [
            *config,
            f"model.model_kwargs.api_base=http://127.0.0.1:{PORT}/v1",
            f"environment.cwd={CWD}",
        ]:
            argv += ["-c", spec]
    argv += ["-t", task, "-o", TRAJ]
    env = {**bundle.base_env(), "OPENAI_API_KEY": "sk-fake-recorder", "TERM": "dumb"}
    binds = {CWD: (workspace, False), SOCK_DIR: (sockets, False), **bundle.binds(work)}
    if v1_venv:
        binds[V1_MOUNT] = (v1_venv, True)
    with ScriptedUpstream(script, unix_path=sockets / "upstream.sock") as upstream:
        run_id = f"mini-{uuid.uuid4().hex[:8]}"
        with DockerSandbox.start(
            connect(), pins.base_image.tag, binds=binds, workdir=CWD, run_id=run_id
        ) as box:
            box.forward_port(PORT, f"{SOCK_DIR}/upstream.sock")
            if v1_venv:
                box.exec([python, "-c", _V1_WRITE_CONFIG, *config], workdir=CWD, env=env, timeout_s=120)
            res = box.exec(
                ["bash", "-c", 'exec "$@" </dev/null', "mini", *argv], workdir=CWD, env=env, timeout_s=300
            )
            if res.exit_code != 0:
                raise RuntimeError(
                    f"mini exited {res.exit_code}: {(res.stdout + res.stderr).decode()[-3000:]}"
                )
        log = [r.model_dump() for r in upstream.log]
    return res.stdout, log
