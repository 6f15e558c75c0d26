"""The tool definitions an agent version offers the model, as they went on the wire: the pinned versions'
ship with each adapter (adapters/AGENT/data/VERSION/tools.json, captured by tests/capture_tools.py);
another version's, once captured from its own CLI (replayer/verbs/tool_capture.py), are kept beside the bundles
(BUNDLES/tool-definitions/AGENT@VERSION.json), and so is a version's CLI that sends no tools
(AGENT@VERSION.none.json: mini-swe-agent 1.x, text-based)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from replayer.floor.io import write_bytes_atomic
from replayer.floor.pins import bundles_root

CACHE = "tool-definitions"


class CapturedTools(BaseModel):
    """What BUNDLES/tool-definitions/AGENT@VERSION.json holds."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    agent: str
    version: str
    tools: list[Any]
    """As the CLI sent them on the wire (its first main-thread request's `tools`)."""
    model: str | None = None
    """The model the CLI was talking to: a CLI may describe its tools per model (Claude Code does)."""
    replayer: str
    probe: str
    """The recording the CLI continued."""
    captured_at: str


class NoTools(BaseModel):
    """What BUNDLES/tool-definitions/AGENT@VERSION.none.json holds: the version's CLI ran and its first
    request offered no tools, which running it again would not change (for this replayer's probe)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    agent: str
    version: str
    why: str
    """The capture's error, as an export's note gives it."""
    replayer: str
    probe: str
    captured_at: str


def shipped_path(agent: str, version: str) -> Path:
    return Path(__file__).resolve().parent / agent / "data" / version / "tools.json"


def cache_path(agent: str, version: str) -> Path:
    return bundles_root() / CACHE / f"{agent}@{version}.json"


def cached(agent: str, version: str) -> CapturedTools | None:
    path = cache_path(agent, version)
    try:
        found = CapturedTools.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None
    return found if (found.agent, found.version) == (agent, version) else None


def keep(found: CapturedTools) -> None:
    """Cache a capture (atomically)."""
    _kept(cache_path(found.agent, found.version), found)


def _kept(path: Path, found: BaseModel) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, orjson.dumps(found.model_dump(mode="json"), option=orjson.OPT_INDENT_2) + b"\n")


def no_tools_path(agent: str, version: str) -> Path:
    return bundles_root() / CACHE / f"{agent}@{version}.none.json"


def no_tools(agent: str, version: str, replayer: str) -> NoTools | None:
    """The kept finding that `version`'s CLI sends no tools, made by this `replayer` version (another's
    probe may differ: it captures again)."""
    try:
        found = NoTools.model_validate_json(no_tools_path(agent, version).read_bytes())
    except (OSError, ValidationError):
        return None
    return found if (found.agent, found.version, found.replayer) == (agent, version, replayer) else None


def keep_no_tools(found: NoTools) -> None:
    _kept(no_tools_path(found.agent, found.version), found)


def wire_tools(agent: str, version: str) -> list[Any] | None:
    """`version`'s definitions as sent on the wire, shipped or cached; None when neither is here."""
    path = shipped_path(agent, version)
    if path.is_file():
        tools = orjson.loads(path.read_bytes())
        return tools if isinstance(tools, list) else []
    found = cached(agent, version)
    return None if found is None else found.tools
