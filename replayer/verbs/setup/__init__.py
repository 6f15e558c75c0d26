"""`replayer setup` (and `make setup`, which calls it): what this machine needs before a run, each part
reused when present, so running it again costs a few checks.

1. the container engine (`--engine`, sandboxes/engines.py): one that answers is used; else this machine's
   is started by the engine's script: `docker_up.sh` (root; it installs Debian's docker.io and btrfs-progs
   with apt-get when they are missing) or `podman_up.sh` (root; Debian's podman, its API on a socket);
2. the pinned base image: one the engine holds is used; else it is built offline by `build_base_image.sh`
   (root; debootstrap minbase, installed with apt-get when missing, and `docker import` or `podman import`);
3. the pinned agent bundles and the pin file's `also` versions (`replayer.floor.bundles`).

The two scripts are package data beside this module: an installed wheel runs the same code as a clone.
Before running one, the checks here turn "cannot" (not root, nothing to install a missing tool with)
into one line naming what to do, instead of a script failing half-way.
"""

from __future__ import annotations

import importlib.resources
import os
import shutil
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Literal

from replayer import installer
from replayer.floor import bundles, hostproc
from replayer.floor.bundles import cache_lock
from replayer.floor.errors import ReplayError, SandboxError, last_line, unknown_agent
from replayer.floor.events import OnEvent, ignore
from replayer.floor.pins import bundles_root, load_pins
from replayer.floor.versions import BundleStatus, ImageStatus
from replayer.sandboxes.base import Engine


class SetupError(ReplayError):
    """A part of `replayer setup` cannot be done here (not root, no apt-get for a missing tool, an unknown
    agent), or its script failed."""

    exit_code = 12
    kind = "setup"


def engine(chosen: Engine) -> tuple[Literal["running", "started"], list[str]]:
    """The engine's state before, and the script's warnings."""
    if _reachable(chosen):
        return "running", []
    doing = f"starting the {chosen.label} engine"
    _need_root(doing)
    _need_tools(doing, chosen.tools)
    with cache_lock(*installer.APT):  # its apt-get, while a run may unpack a bundle's Debian packages
        notes = _run_script(chosen.up_script, chosen.up_args, doing)
    if not _reachable(chosen):
        raise SetupError(f"{doing}: the engine started but the replayer cannot reach it (DOCKER_HOST?)")
    return "started", notes


def base_image(chosen: Engine, on_build: Callable[[str], None] = lambda doing: None) -> ImageStatus:
    """The pinned base image, built when the engine lacks it (`on_build` hears what is built, first)."""
    pin = load_pins().base_image
    found = chosen.image_attrs(pin.tag)
    if found is not None:
        return ImageStatus(tag=pin.tag, status="present", bytes=found.get("Size"))
    doing = f"building the base image {pin.tag}"
    _need_root(doing)
    _need_tools(doing, {"debootstrap": "debootstrap"})
    on_build(f"{doing} (Debian {pin.suite} minbase from {pin.mirror}, {len(pin.packages)} packages; once)")
    started = time.monotonic()
    args = [pin.tag, pin.suite, pin.mirror, ",".join(pin.packages), chosen.name]
    with cache_lock(*installer.APT):  # its apt-get, if debootstrap is missing
        _run_script("build_base_image.sh", args, doing)
    seconds = time.monotonic() - started
    built = chosen.image_attrs(pin.tag) or {}
    return ImageStatus(tag=pin.tag, status="built", bytes=built.get("Size"), seconds=seconds)


def pinned_bundles(agents: list[str] | None) -> list[tuple[str, str]]:
    """(agent, version) of every pinned version and `also` version of `agents` (None: every agent)."""
    pins = load_pins().agents
    unknown = [a for a in agents or [] if a not in pins]
    if unknown:
        raise unknown_agent(unknown, list(pins))
    return [(a, v) for a, v in bundles.pinned_specs() if agents is None or a in agents]


LANES = 2
"""Bundles installed at once: an install waits on the registry and the disk as much as it computes."""


def install_bundles(wanted: list[tuple[str, str]], on_event: OnEvent = ignore) -> list[BundleStatus]:
    """Every bundle of `wanted`, found or installed, in its order (an install takes minutes: `on_event`
    hears its progress). LANES install at once, PyPI's first (they build and compile: the longest)."""
    if not all(bundles.installed(a, v) for a, v in wanted):
        _need_writable(bundles_root(), "installing agent bundles")

    def one(spec: tuple[str, str]) -> BundleStatus:
        agent, version = spec
        present = bundles.installed(agent, version)
        path = installer.ensure(agent, version, adopt=True, on_event=on_event)
        return BundleStatus(
            agent=agent, version=version, path=path, status="present" if present else "installed"
        )

    pins = load_pins().agents
    first = sorted(range(len(wanted)), key=lambda i: pins[wanted[i][0]].pypi is None)
    with ThreadPoolExecutor(LANES) as lanes:
        futures = {i: lanes.submit(one, wanted[i]) for i in first}
        return [futures[i].result() for i in range(len(wanted))]


def _reachable(chosen: Engine) -> bool:
    try:
        chosen.check()
    except SandboxError:
        return False
    return True


def _need_root(doing: str) -> None:
    if os.geteuid() != 0:
        raise SetupError(f"{doing} needs root: run `sudo replayer setup` (or have an administrator run it)")


def _need_tools(doing: str, tools: dict[str, str]) -> None:
    missing = sorted({package for tool, package in tools.items() if shutil.which(tool) is None})
    if missing and shutil.which("apt-get") is None:
        raise SetupError(
            f"{doing} needs {', '.join(missing)}, and there is no apt-get to install it: "
            "install it with this system's package manager, then run `replayer setup` again"
        )


def _need_writable(path: Path, doing: str) -> None:
    existing = next(p for p in (path, *path.parents) if p.exists())
    if not os.access(existing, os.W_OK | os.X_OK):
        raise SetupError(
            f"{doing} writes into {path}, which this user cannot write: run `sudo replayer setup`, "
            "or set REPLAYER_BUNDLES to a folder of yours"
        )


_SCRIPT_ENV = (
    "REPLAYER_DOCKERD_LOG",
    "REPLAYER_PODMAN_LOG",
    "REPLAYER_FS_ROOT",
    "DOCKER_HOST",
    "DOCKER_CONFIG",
    "HOME",
)
"""The user's variables the scripts (or the docker CLI they run) read."""


def _run_script(name: str, args: list[str], doing: str) -> list[str]:
    """Run a packaged script; its stderr lines (warnings) on success, SetupError with its last line else.
    In a session of its own: a Ctrl-C of the replayer does not reach the engine the script starts."""
    with importlib.resources.as_file(importlib.resources.files(__name__) / name) as script:
        done = hostproc.run(
            ["bash", str(script), *args],
            env=hostproc.passed(*_SCRIPT_ENV, *hostproc.NETWORK),
            stdin=hostproc.DEVNULL,
            capture_output=True,
            text=True,
            errors="replace",
            start_new_session=True,
        )
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    if done.returncode != 0:
        raise SetupError(f"{doing} failed: {last_line(done.stderr) or f'exit {done.returncode}'}")
    return lines
