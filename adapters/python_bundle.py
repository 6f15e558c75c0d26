"""A pinned Python agent in the sandbox (mini-swe-agent, OpenHands): its virtual environment mounted
read-only with the base interpreter it was made from (at the same path: a venv points at it), the
companion script folder, and the read-write work folder."""

from __future__ import annotations

from pathlib import Path

from replayer.floor.errors import SandboxError


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
    base = Path(home).parent
    if base in SYSTEM_PREFIXES:
        spec = bundle.name.replace("-", "@", 1)
        raise SandboxError(
            f"{spec} was made with the host system's Python ({home}), whose {base} cannot be mounted over "
            f"the sandbox's own: put a Python with a prefix of its own (pyenv, a python.org build) first on "
            f"PATH, then `replayer bundles rm {spec}` (a run installs it again)"
        )
    return base


SYSTEM_PREFIXES = (Path("/"), Path("/usr"))
"""A base interpreter's prefix the sandbox's own system lives in (Debian's python3 has /usr)."""


def venv_binds(
    bundle: Path, mount: str, companion: tuple[str, Path], work: tuple[str, Path]
) -> dict[str, tuple[Path, bool]]:
    """The venv at `mount` and its base interpreter, the companion folder (mount, host folder), read-only;
    the work folder (mount, host folder) read-write."""
    base = python_home(bundle)
    return {
        mount: (bundle, True),
        str(base): (base, True),
        companion[0]: (companion[1], True),
        work[0]: (work[1], False),
    }
