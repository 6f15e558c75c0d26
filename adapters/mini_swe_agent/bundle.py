"""Where the pinned mini-swe-agent virtual environment lives in the sandbox, and what it needs mounted."""

from __future__ import annotations

from pathlib import Path

from adapters import sandbox_paths
from adapters.sandbox_paths import AGENT_HOME
from replayer.errors import SandboxError
from replayer.pins import load_pins

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


def python_home(bundle: Path) -> Path:
    """The base interpreter the virtual environment was made from (mounted at the same path)."""
    cfg = bundle / "pyvenv.cfg"
    try:
        lines = cfg.read_text().splitlines()
    except OSError:
        raise SandboxError(
            f"{bundle} is not installed; run replayer bundles add {bundle.name.replace('-', '@', 1)}"
        ) from None
    home = next((line.split("=", 1)[1].strip() for line in lines if line.startswith("home")), None)
    if not home:
        raise SandboxError(f"{cfg} names no base interpreter")
    return Path(home).parent


def binds(work: Path) -> dict[str, tuple[Path, bool]]:
    bundle = load_pins().bundle_dir(NAME)
    base = python_home(bundle)
    return {
        agent_mount(): (bundle, True),
        str(base): (base, True),
        COMPANION_MOUNT: (COMPANION_DIR, True),
        WORK_MOUNT: (work, False),
    }


def base_env() -> dict[str, str]:
    """The process environment mini-swe-agent runs with in the sandbox (commands inherit it)."""
    return {
        "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": AGENT_HOME,
        "MSWEA_CONFIGURED": "true",
        "MSWEA_COST_TRACKING": "ignore_errors",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
