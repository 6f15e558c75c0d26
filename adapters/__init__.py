"""Agent adapters, one package each, registered in `REGISTRY`; `detect` picks the one a file belongs to."""

from __future__ import annotations

import importlib
from pathlib import Path

from replayer.adapters.base import Adapter, recorded_tools
from replayer.adapters.forms import NativeForm
from replayer.adapters.head import SqliteFile, read_head
from replayer.floor.errors import BadInput
from replayer.floor.io import open_input

__all__ = [
    "Adapter",
    "SqliteFile",
    "adapter_class",
    "all_adapters",
    "by_name",
    "detect",
    "read_head",
    "recorded_tools",
]

REGISTRY: dict[str, str] = {
    "claude_code": "replayer.adapters.claude_code:ClaudeCodeAdapter",
    "codex": "replayer.adapters.codex:CodexAdapter",
    "mini_swe_agent": "replayer.adapters.mini_swe_agent:MiniSweAgentAdapter",
    "opencode": "replayer.adapters.opencode:OpenCodeAdapter",
    "pi": "replayer.adapters.pi:PiAdapter",
    "gemini_cli": "replayer.adapters.gemini_cli:GeminiCliAdapter",
    "openhands": "replayer.adapters.openhands:OpenHandsAdapter",
    "openhands_v0": "replayer.adapters.openhands.v0_adapter:OpenHandsV0Adapter",
}
"""Every agent by name -> its adapter class (imported when first asked for), in detection order: the
first whose `detect` claims a file's head parses it. Adding an agent is its package and one line here."""


def adapter_class(name: str) -> type[Adapter]:
    module, _, attr = REGISTRY[name].partition(":")
    cls: type[Adapter] = getattr(importlib.import_module(module), attr)
    assert cls.name == name, f"{REGISTRY[name]} is named {cls.name!r}, registered as {name!r}"
    return cls


def all_adapters() -> list[Adapter]:
    return [adapter_class(name)() for name in REGISTRY]


def detect(path: Path) -> Adapter:
    return detect_form(path)[0]


def detect_form(path: Path) -> tuple[Adapter, NativeForm]:
    """The agent whose trajectory `path` is, and which of its native forms (adapters/forms.py)."""
    if not path.exists() and not path.is_symlink():
        raise BadInput(f"{path} does not exist")
    head = read_head(path)
    for name in REGISTRY:
        cls = adapter_class(name)
        form = cls.form(head)
        if form is not None:
            return cls(), form
    if not head and _blank(path):
        raise BadInput(f"{path} is empty: not a trajectory")
    raise BadInput(f"{path} is not a trajectory of a known agent (unknown format)")


_BLANK_BYTES = 64 * 1024


def _blank(path: Path) -> bool:
    """The file holds nothing but white space (looked at up to 64 KiB; a directory is not blank)."""
    if path.is_dir():
        return False
    with open_input(path) as fh:
        start = fh.read(_BLANK_BYTES + 1)
    return len(start) <= _BLANK_BYTES and not start.strip()


def by_name(name: str) -> Adapter:
    if name in REGISTRY:
        return adapter_class(name)()
    raise BadInput(f"no adapter named {name!r}")
