"""Where the pinned OpenHands environments live in the sandbox, and what they need mounted.

Two pins: `openhands` (the V1 software-agent SDK) and `openhands_v0` (openhands-ai with the legacy
controller). Each is a virtual environment made from pyenv's Python 3.12, mounted read-only with its
base interpreter at the same path (a venv points at it).
"""

from __future__ import annotations

from pathlib import Path

from replayer.adapters import sandbox_paths
from replayer.adapters.python_bundle import venv_binds
from replayer.adapters.sandbox_paths import AGENT_HOME
from replayer.floor.pins import load_pins

NAME = "openhands"
NAME_V0 = "openhands_v0"
WORK_MOUNT = "/run/replayer-openhands"
"""Read-write: the companion's socket, the persistence directories."""
COMPANION_MOUNT = "/opt/replayer/openhands-companion"
COMPANION_DIR = Path(__file__).resolve().parent / "companion"
WORK = "openhands"
"""The companion's socket and spec (V1 and V0 alike): a folder of the run's state (RunDirs.work)."""


def version(name: str = NAME) -> str:
    return load_pins().agents[name].version


def agent_mount(name: str = NAME) -> str:
    """V0 sits at its host path: its console scripts (jupyter-kernelgateway, which the V0 runtime
    starts) carry the absolute interpreter path of the place the venv was made in."""
    if name == NAME_V0:
        return str(load_pins().bundle_dir(NAME_V0))
    return sandbox_paths.agent_mount(name, version(name))


def python(name: str = NAME) -> str:
    """The pinned environment's interpreter inside the sandbox."""
    return f"{agent_mount(name)}/bin/python"


def binds(work: Path, name: str = NAME) -> dict[str, tuple[Path, bool]]:
    return venv_binds(
        load_pins().bundle_dir(name), agent_mount(name), (COMPANION_MOUNT, COMPANION_DIR), (WORK_MOUNT, work)
    )


def base_env() -> dict[str, str]:
    """The process environment OpenHands runs with in the sandbox (its terminal inherits it).

    HOME lies in the run's state directory, so nothing OpenHands writes there reaches the host."""
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": AGENT_HOME,
        "TERM": "dumb",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "OPENHANDS_SUPPRESS_BANNER": "1",
        "PYTHONUNBUFFERED": "1",
        "GIT_CONFIG_NOSYSTEM": "1",
    }


V0_LIB = "/usr/lib/x86_64-linux-gnu"
V0_DEBS = {"usr/bin/tmux": "/usr/bin/tmux"} | {
    f"usr/lib/x86_64-linux-gnu/{lib}": f"{V0_LIB}/{lib}"
    for lib in ("libevent_core-2.1.so.7", "libutempter.so.0")
}
"""The Debian files the V0 local runtime needs (tmux), from the bundle's debs/ folder onto the sandbox's /usr."""


def binds_v0(work: Path) -> dict[str, tuple[Path, bool]]:
    """The V0 environment, its base interpreter, tmux, and the read-write work folder."""
    bundle = load_pins().bundle_dir(NAME_V0)
    out = binds(work, NAME_V0)
    for rel, target in V0_DEBS.items():
        out[target] = ((bundle / "debs" / rel).resolve(), True)
    return out


def v0_env() -> dict[str, str]:
    """The V0 runtime's environment: no VS Code server, quiet logs."""
    return {**base_env(), "DISABLE_VSCODE_PLUGIN": "true", "LOG_LEVEL": "warning"}
