"""The container engines by name, and the one place that picks the engine in use: `--engine` (which calls
`select`), else `REPLAYER_ENGINE` or the `engine` setting (floor/settings.py), else Docker. The rest of the
replayer asks `chosen()` and never names an engine module (tests/test_seam.py)."""

from __future__ import annotations

import os
import sys
from typing import get_args

from replayer.floor import settings
from replayer.floor.errors import BadInput
from replayer.floor.options import EngineName
from replayer.sandboxes.base import Engine

NAMES: tuple[str, ...] = get_args(EngineName)
DEFAULT = "docker"
_SELECTED: list[str] = []


def by_name(name: str) -> Engine:
    """The engine called `name`; BadInput for one the replayer does not know."""
    if name == "docker":
        from replayer.sandboxes.ahead import AheadBackend
        from replayer.sandboxes.docker import DockerEngine

        return DockerEngine(ahead=AheadBackend)
    if name == "podman":
        from replayer.sandboxes.podman import PodmanEngine

        return PodmanEngine()
    raise BadInput(f"unknown engine {name!r} (known: {', '.join(NAMES)})")


def select(name: str) -> None:
    """Use `name` from now on in this process and in the workers it starts (they read `REPLAYER_ENGINE`)."""
    by_name(name)
    _SELECTED[:] = [name]
    os.environ["REPLAYER_ENGINE"] = name


def chosen() -> Engine:
    """The engine in use (see the module's docstring)."""
    return by_name(_SELECTED[0] if _SELECTED else settings.load().engine or DEFAULT)


def stop_live() -> None:
    """Remove every sandbox this process started and still holds (at an interruption). Every engine keeps
    them in sandboxes/docker.py (Podman through the same client); while that module is not loaded this
    process started none, and it is not imported then: an interruption may have cut a library's import
    short (urllib3 under the Docker SDK), and importing a half-imported library again fails."""
    if "replayer.sandboxes.docker" in sys.modules:
        chosen().stop_live()
