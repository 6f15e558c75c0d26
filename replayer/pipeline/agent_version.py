"""Which version of the agent a replay runs: the one the file records, one inferred from the file's
features, or one the user states; and whether that version is verified (the pinned one,
or one whose probe `replayer verify` passed)."""

from __future__ import annotations

import functools

from replayer.adapters.base import Adapter
from replayer.floor import registry
from replayer.floor.pins import load_pins, pinned_version, release
from replayer.floor.verdicts import is_verified
from replayer.floor.versions import VersionRecord, VersionSource


def resolve(
    adapter: Adapter, recorded: str | None, inferred: bool, stated: str | None, runs_as: str | None = None
) -> VersionRecord:
    """`recorded` is the trajectory's agent_version (`inferred`: the parser read it from the file's
    features, not from a version field). A stated version wins; no version at all means the pinned one.
    `runs_as` (the trajectory's: another class of the agent's own code runs) is added to the note."""
    pinned = pinned_version(adapter.name)
    source: VersionSource
    note = None
    if stated:
        version, source = concrete(adapter.name, stated), "stated"
        if version != stated:
            note = f"--agent-version {stated} is {version}"
    elif recorded:
        version, source = recorded, ("inferred" if inferred else "recorded")
    else:
        version, source = pinned, "default"
    oldest = adapter.oldest_own_version
    if oldest is not None and release(version) < release(oldest):
        stand_in = adapter.stand_in_version or pinned
        older = f"{adapter.name} {version} predates {oldest}, the oldest version its runner drives: {stand_in} ran"
        version, source = stand_in, "default"
        note = "; ".join(n for n in (note, older) if n)
    note = "; ".join(n for n in (note, runs_as) if n) or None
    return VersionRecord(
        version=version,
        source=source,
        status="verified" if is_verified(adapter.name, version) else "unverified",
        in_file=recorded if not inferred else None,
        note=note,
        reruns=(
            f"{adapter.name} {version}, its own code"
            if adapter.reruns_own_code or adapter.drives(version)
            else f"the replayer's reimplementation of {adapter.name} {pinned}"
        ),
    )


def concrete(agent: str, stated: str) -> str:
    """The released version a stated `--agent-version` names (a dist-tag asked of the registry once per
    process, so every fork and boundary of one run gets the same answer)."""
    return _concrete(agent, stated)


@functools.cache
def _concrete(agent: str, stated: str) -> str:
    return registry.concrete(agent, load_pins().agents[agent], stated)
