"""sandbox-replayer: replay coding-agent trajectories in containers.

The Python API (docs/api.md): `replayer.inspect`, `replayer.prepare`, `replayer.run`, `replayer.compare`
and `replayer.batch`, the command's verbs as functions (replayer/api.py)."""

from __future__ import annotations

import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"
_API = ("batch", "compare", "inspect", "prepare", "run")
__all__ = ["__version__", "batch", "compare", "inspect", "prepare", "run"]

if TYPE_CHECKING:
    from replayer.api import batch, compare, inspect, prepare, run


def __getattr__(name: str) -> Any:
    # imported on first use: `import replayer` stays light, and the adapters (which import replayer's
    # models) never find the API half-imported
    if name in _API:
        from replayer import api

        return getattr(api, name)
    raise AttributeError(f"module 'replayer' has no attribute {name!r}")


class _Package(types.ModuleType):
    """`replayer.compare` and `replayer.batch` are the API's functions, although modules of those names
    exist: importing such a module does not bind it on the package (it is in sys.modules, and
    `from replayer.batch import X` reaches it as before; `from replayer import batch` is the function)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _API and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
