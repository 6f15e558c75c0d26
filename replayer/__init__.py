"""sandbox-replayer: replay coding-agent trajectories in containers.

The Python API (docs/api.md): `replayer.inspect`, `replayer.prepare`, `replayer.run`, `replayer.compare`
and `replayer.batch`, the command's verbs as functions (replayer/api.py). Importing the package imports
nothing else: each function is looked up in the API on first use. The layers below it are
docs/architecture.md's: floor, sandboxes and bridges, adapters, pipeline, verbs, api, cli."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from replayer.floor.release import __version__

_API = ("batch", "compare", "inspect", "prepare", "run")
__all__ = ["__version__", "batch", "compare", "inspect", "prepare", "run"]

if TYPE_CHECKING:
    from replayer.api import batch, compare, inspect, prepare, run


def __getattr__(name: str) -> Any:
    if name in _API:
        from replayer import api

        return getattr(api, name)
    raise AttributeError(f"module 'replayer' has no attribute {name!r}")
