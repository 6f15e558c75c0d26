"""A PyPI agent's bundle installed by the replayer (the pinned uv, as of the release, compiled) against pip in
a fresh virtual environment (the way mini-swe-agent's bundles were made before), side by side: each into a
bundle cache of its own with an empty package cache, so both download and unpack everything."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from replayer import installer
from replayer.floor import registry
from replayer.floor.bundles import agent_pin, tree_size

PYPI_INSTALL_HEADING = "## A PyPI agent's bundle: uv against pip"
AGENT = "mini_swe_agent"
VERSION = "1.17.5"
"""An unpinned release, as the suite installs three: resolved as of its own release by uv."""


def _cpu() -> float:
    """CPU seconds of this process and of its children waited for."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _measured(install) -> tuple[float, float]:
    cpu, wall = _cpu(), time.perf_counter()
    install()
    return time.perf_counter() - wall, _cpu() - cpu


def _pip(tmp: Path) -> Path:
    venv = tmp / "pip" / f"{AGENT}-{VERSION}"
    python = str(agent_pin(AGENT).python)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-I", "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    pip += ["--only-binary", ":all:", "--index-url", registry.pypi(), f"{agent_pin(AGENT).pypi}=={VERSION}"]
    subprocess.run(pip, check=True, env={**os.environ, "PIP_CACHE_DIR": str(tmp / "pip-cache")})
    return venv


def bench_pypi_install(tmp: Path) -> dict[str, float]:
    os.environ["REPLAYER_BUNDLES"] = str(tmp / "uv")
    try:
        installer._uv(str(agent_pin(AGENT).uv))  # uv itself, once per cache: not the install measured
        pip_wall, pip_cpu = _measured(lambda: _pip(tmp))
        uv_wall, uv_cpu = _measured(lambda: installer.ensure(AGENT, VERSION))
        uv_size = tree_size(tmp / "uv" / f"{AGENT}-{VERSION}")
    finally:
        del os.environ["REPLAYER_BUNDLES"]
    return {
        "pip_wall": pip_wall,
        "pip_cpu": pip_cpu,
        "pip_mb": tree_size(tmp / "pip" / f"{AGENT}-{VERSION}") / 1e6,
        "uv_wall": uv_wall,
        "uv_cpu": uv_cpu,
        "uv_mb": uv_size / 1e6,
    }


def pypi_install_section(m: dict[str, float]) -> str:
    load = os.getloadavg()[1]
    return f"""{PYPI_INSTALL_HEADING}

`python -m bench pypi-install`: mini-swe-agent {VERSION} (not the pin) installed into an empty bundle cache,
once by `pip` in a fresh `python -m venv` (wheels only, compiled as it installs: how its bundles were made
before) and once by the replayer (`installer.ensure`: the pinned uv, resolved as of two days after the
release, compiled, sealed with its digest manifest), each with an empty package cache; CPU is this process's
and its children's. Load average {load:.1f} over 5 minutes at the end; Python {sys.version.split()[0]}.

| install | wall | ratio | CPU | ratio | size |
|---|---|---|---|---|---|
| baseline: pip | {m["pip_wall"]:.1f} s | 1.00 | {m["pip_cpu"]:.1f} s | 1.00 | {m["pip_mb"]:.0f} MB |
| the replayer: uv | {m["uv_wall"]:.1f} s | **{m["uv_wall"] / m["pip_wall"]:.2f}** | {m["uv_cpu"]:.1f} s | **{m["uv_cpu"] / m["pip_cpu"]:.2f}** | {m["uv_mb"]:.0f} MB |

The sizes differ by what each resolves: pip today's newest dependencies, uv those of the release's day (and
no pip or setuptools in the environment). The suite installs three such versions on a bare machine.
"""
