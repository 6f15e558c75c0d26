"""Where the pinned mini-swe-agent virtual environment lives in the sandbox, and what it needs mounted."""

from __future__ import annotations

from pathlib import Path

from replayer.adapters import sandbox_paths
from replayer.adapters.python_bundle import venv_binds
from replayer.adapters.sandbox_paths import AGENT_HOME
from replayer.floor.pins import load_pins

NAME = "mini_swe_agent"
COMPANION_MOUNT = "/opt/replayer/mini-companion"
COMPANION_DIR = Path(__file__).resolve().parent / "companion"
WORK_MOUNT = "/run/replayer-mini"
"""Read-write: the companion's socket, the rebuilt and the continued trajectories."""


def version() -> str:
    return load_pins().agents[NAME].version


def agent_mount() -> str:
    return sandbox_paths.agent_mount(NAME, version())


def python() -> str:
    """The pinned environment's interpreter inside the sandbox."""
    return f"{agent_mount()}/bin/python"


def binds(work: Path) -> dict[str, tuple[Path, bool]]:
    return venv_binds(
        load_pins().bundle_dir(NAME), agent_mount(), (COMPANION_MOUNT, COMPANION_DIR), (WORK_MOUNT, work)
    )


def base_env() -> dict[str, str]:
    """The process environment mini-swe-agent runs with in the sandbox (commands inherit it)."""
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": AGENT_HOME,
        "MSWEA_CONFIGURED": "true",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
