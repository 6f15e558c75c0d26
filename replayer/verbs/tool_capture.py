"""The tool definitions an agent version offers the model, for training exports: a session is exported with
the tools of the version that recorded it, not the pinned version's.

The pinned versions' definitions ship with the adapters, and captured ones are kept beside the bundles
(adapters/tool_definitions.py). Another version's are captured once: its real CLI, from its installed bundle, continues the `replayer verify`
probe's head recording in the sandbox against the scripted model, and the tools of its first request are
kept in the bundle cache (BUNDLES/tool-definitions/AGENT@VERSION.json). When they cannot be had (the bundle
is not installed, the probe recordings are not here, the CLI sent no request) the pinned set is used, and
the export says so. A CLI whose first request offers no tools (mini-swe-agent 1.x) is kept as such
(AGENT@VERSION.none.json), so that the next export does not run it again to learn the same.
"""

from __future__ import annotations

import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict

from replayer.adapters.tool_definitions import (
    CapturedTools,
    NoTools,
    cached,
    keep,
    keep_no_tools,
    no_tools,
    shipped_path,
)
from replayer.floor import bundles
from replayer.floor.errors import ReplayError, excerpt
from replayer.floor.pins import pinned_version
from replayer.floor.registry import RELEASE
from replayer.floor.release import __version__ as REPLAYER_VERSION


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


def capture(agent: str, version: str, model: str | None = None) -> CapturedTools:
    """Run `version`'s CLI (its bundle installed) once, talking to `model` (the session's, when known), and
    cache the tools its first request offered."""
    from replayer.verbs.verify import first_request

    if not bundles.installed(agent, version):
        raise ReplayError(
            f"the bundle {agent}@{version} is not installed (`replayer bundles add {agent}@{version}`)"
        )
    probe, result, body = first_request(agent, version, model=model)
    tools = body.get("tools") if isinstance(body, dict) else None
    now = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    if not isinstance(tools, list):
        cont = result.continuation
        why = f"gate {cont.gate}, agent {cont.agent_status}" if cont else "no continuation"
        error = ReplayError(f"{agent} {version} sent no request with tools ({why})")
        if isinstance(body, dict):  # it sent its request, without tools: so it will again
            keep_no_tools(
                NoTools(
                    agent=agent,
                    version=version,
                    why=str(error),
                    replayer=REPLAYER_VERSION,
                    probe=f"{probe.recording} ({probe.version})",
                    captured_at=now,
                )
            )
        raise error
    found = CapturedTools(
        agent=agent,
        version=version,
        tools=tools,
        model=body.get("model") if isinstance(body.get("model"), str) else model,
        replayer=REPLAYER_VERSION,
        probe=f"{probe.recording} ({probe.version})",
        captured_at=now,
    )
    keep(found)
    return found


MAX_VERSION = 64


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
    if len(recorded) > MAX_VERSION or not RELEASE.match(recorded):  # it names the files looked up below
        note = f"the recorded version {excerpt(recorded)} is not a release"
        return ToolsSource(version=pinned, source="pinned_fallback", note=note)
    if shipped_path(data, recorded).is_file():
        return ToolsSource(version=recorded, source="shipped")
    found = cached(data, recorded)
    if found is not None:
        return ToolsSource(version=recorded, source="captured", model=found.model)
    none = no_tools(data, recorded, REPLAYER_VERSION)
    if none is not None:  # as the capture that found it says it
        return ToolsSource(version=pinned, source="pinned_fallback", note=f"{agent} {recorded}: {none.why}")
    if data != agent:
        note = f"no definitions of {agent} {recorded} are here, and its CLI is not captured by this adapter"
        return ToolsSource(version=pinned, source="pinned_fallback", note=note)
    try:
        found = capture(agent, recorded, model)
    except ReplayError as exc:
        return ToolsSource(version=pinned, source="pinned_fallback", note=f"{agent} {recorded}: {exc}")
    return ToolsSource(version=recorded, source="captured", model=found.model)
