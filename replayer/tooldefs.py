"""The tool definitions an agent version offers the model, for training exports: a session is exported with
the tools of the version that recorded it, not the pinned version's.

The pinned versions' definitions ship with the adapters (adapters/AGENT/data/VERSION/tools.json). Another
version's are captured once: its real CLI, from its installed bundle, continues the `replayer verify`
probe's head recording in the sandbox against the scripted model, and the tools of its first request are
kept in the bundle cache (BUNDLES/tool-definitions/AGENT@VERSION.json). When they cannot be had (the bundle
is not installed, the probe recordings are not here, the CLI sent no request) the pinned set is used, and
the export says so.
"""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from replayer import __version__ as REPLAYER_VERSION
from replayer import bundles
from replayer.errors import ReplayError
from replayer.io import write_bytes_atomic
from replayer.pins import bundles_root, pinned_version

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


class ToolsSource(BaseModel):
    """Whose tool definitions an export carries (the metadata's `tools`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    version: str
    """The version whose definitions they are."""
    source: Literal["shipped", "captured", "pinned_fallback"]
    """shipped: the adapter's data for that version; captured: from that version's own CLI (cached);
    pinned_fallback: the recording version's could not be had, the pinned version's stand in."""
    model: str | None = None
    """captured: the model the CLI was talking to when its definitions were captured."""
    note: str | None = None
    """Why the pinned set stands in."""


def shipped_path(agent: str, version: str) -> Path:
    return Path(__file__).resolve().parent.parent / "adapters" / agent / "data" / version / "tools.json"


def cache_path(agent: str, version: str) -> Path:
    return bundles_root() / CACHE / f"{agent}@{version}.json"


def cached(agent: str, version: str) -> CapturedTools | None:
    path = cache_path(agent, version)
    try:
        found = CapturedTools.model_validate_json(path.read_bytes())
    except (OSError, ValidationError):
        return None
    return found if (found.agent, found.version) == (agent, version) else None


def capture(agent: str, version: str, model: str | None = None) -> CapturedTools:
    """Run `version`'s CLI (its bundle installed) once, talking to `model` (the session's, when known), and
    cache the tools its first request offered."""
    from replayer.verify import first_request

    if not bundles.installed(agent, version):
        raise ReplayError(
            f"the bundle {agent}@{version} is not installed (`replayer bundles add {agent}@{version}`)"
        )
    probe, result, body = first_request(agent, version, model=model)
    tools = body.get("tools") if isinstance(body, dict) else None
    if not isinstance(tools, list):
        cont = result.continuation
        why = f"gate {cont.gate}, agent {cont.agent_status}" if cont else "no continuation"
        raise ReplayError(f"{agent} {version} sent no request with tools ({why})")
    found = CapturedTools(
        agent=agent,
        version=version,
        tools=tools,
        model=body.get("model") if isinstance(body.get("model"), str) else model,
        replayer=REPLAYER_VERSION,
        probe=f"{probe.recording} ({probe.version})",
        captured_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )
    path = cache_path(agent, version)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, orjson.dumps(found.model_dump(mode="json"), option=orjson.OPT_INDENT_2) + b"\n")
    return found


def wire_tools(agent: str, version: str) -> list[Any] | None:
    """`version`'s definitions as sent on the wire, shipped or cached; None when neither is here."""
    path = shipped_path(agent, version)
    if path.is_file():
        tools = orjson.loads(path.read_bytes())
        return tools if isinstance(tools, list) else []
    found = cached(agent, version)
    return None if found is None else found.tools


def source_for(
    agent: str, recorded: str | None, data_agent: str | None = None, model: str | None = None
) -> ToolsSource:
    """Whose definitions a session recorded by `recorded` (None: the file names no version) is exported
    with, capturing them first (the CLI talking to `model`, the session's) when they are not here: once
    per version, the first capture's model is the one the cache records. `data_agent`: the name the
    adapter's data goes by."""
    data = data_agent or agent
    pinned = pinned_version(agent)
    if recorded is None:
        return ToolsSource(version=pinned, source="pinned_fallback", note="the session names no version")
    if shipped_path(data, recorded).is_file():
        return ToolsSource(version=recorded, source="shipped")
    found = cached(data, recorded)
    if found is not None:
        return ToolsSource(version=recorded, source="captured", model=found.model)
    if data != agent:
        note = f"no definitions of {agent} {recorded} are here, and its CLI is not captured by this adapter"
        return ToolsSource(version=pinned, source="pinned_fallback", note=note)
    try:
        found = capture(agent, recorded, model)
    except ReplayError as exc:
        return ToolsSource(version=pinned, source="pinned_fallback", note=f"{agent} {recorded}: {exc}")
    return ToolsSource(version=recorded, source="captured", model=found.model)
