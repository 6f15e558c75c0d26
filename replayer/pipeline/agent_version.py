"""Which version of the agent a replay runs: the one the file records, one inferred from the file's
features, the release current at the session's first timestamp (the registry's publish times, for a
format that names no version), or one the user states; and whether that version is verified (the
pinned one, or one whose probe `replayer verify` passed)."""

from __future__ import annotations

import contextlib
import datetime
import functools
import threading
from pathlib import Path

from pydantic import AwareDatetime, BaseModel, ConfigDict, ValidationError

from replayer.adapters.base import Adapter
from replayer.floor import registry
from replayer.floor.bundles import cache_lock
from replayer.floor.errors import BadInput
from replayer.floor.io import read_input, write_bytes_atomic
from replayer.floor.pins import bundles_root, load_pins, pinned_version, release
from replayer.floor.trajectory import Trajectory
from replayer.floor.verdicts import is_verified
from replayer.floor.versions import VersionRecord, VersionSource


def of_trajectory(adapter: Adapter, traj: Trajectory, stated: str | None) -> VersionRecord:
    """The version a replay of `traj` runs (`resolve`, from what the trajectory and its file say)."""
    started = adapter.first_timestamp(traj) if not stated and not traj.agent_version else None
    return resolve(adapter, traj.agent_version, traj.agent_version_inferred, stated, traj.runs_as, started)


def resolve(
    adapter: Adapter,
    recorded: str | None,
    inferred: bool,
    stated: str | None,
    runs_as: str | None = None,
    started: datetime.datetime | None = None,
) -> VersionRecord:
    """`recorded` is the trajectory's agent_version (`inferred`: the parser read it from the file's
    features, not from a version field). A stated version wins; no version at all means the release
    current at `started` (the session's first timestamp) where the adapter infers one
    (`Adapter.oldest_inferred_release`), else the pinned one. `runs_as` (the trajectory's: another class
    of the agent's own code runs) is added to the note."""
    pinned = pinned_version(adapter.name)
    source: VersionSource
    note = None
    dated = None
    if stated:
        version, source = concrete(adapter.name, stated), "stated"
        if version != stated:
            note = f"--agent-version {stated} is {version}"
    elif recorded:
        version, source = recorded, ("inferred" if inferred else "recorded")
    elif adapter.oldest_inferred_release is not None:
        version, note = current_at(adapter.name, adapter.oldest_inferred_release, started)
        source, dated = ("inferred", started) if version != pinned else ("default", None)
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
        registry_date=dated,
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


def current_at(agent: str, oldest: str, started: datetime.datetime | None) -> tuple[str, str | None]:
    """The release of `agent` that was current at `started` by its registry's publish times, no older than
    `oldest` and no newer than the pin (a session newer than the pin runs the pin), and what the result's
    note says of it: why the pin runs instead (the file records no time, the registry cannot be asked or
    knows no release that old), or that `oldest` stands in for an older release."""
    pinned = pinned_version(agent)
    if started is None:
        return pinned, f"the file records no version and no time: the pinned {pinned} ran"
    times = publish_times(agent, started)
    where = "npm" if load_pins().agents[agent].npm else "PyPI"
    day = started.date().isoformat()
    if times is None:
        return pinned, (
            f"the file records no version, and the {where} registry cannot be asked which release was "
            f"current on {day}: the pinned {pinned} ran"
        )
    current = registry.current_at(times, started)
    if current is None:
        return pinned, f"the {where} registry knows no release of {agent} by {day}: the pinned {pinned} ran"
    if release(current) >= release(pinned):
        return pinned, None
    if release(current) < release(oldest):
        return (
            oldest,
            f"{agent} {current} was current on {day} ({where}); {oldest}, the oldest release inferred, ran",
        )
    return current, f"the file records no version: {current} was {agent}'s current release on {day} ({where})"


class _Asked(BaseModel):
    """What the registry answered of an agent's publish times, and when (the cache's one file an agent)."""

    model_config = ConfigDict(extra="forbid")
    asked: AwareDatetime
    times: dict[str, AwareDatetime]


_MAX_CACHED = 4 << 20
"""The largest cached answer read (plain releases only: ~40 bytes each)."""
_asking = threading.Lock()


def publish_times(agent: str, started: datetime.datetime) -> dict[str, datetime.datetime] | None:
    """The plain releases of `agent` and when each was published, as its registry answered (None: it
    cannot be asked). One question per package across the runs and batch workers that share a bundle
    cache: the answer is kept in it (`.registry/AGENT.json`, read bounded) and serves any session that
    began before it was asked; a later one asks again."""
    with _asking:
        kept = _kept(agent)
        if kept is not None and started <= kept.asked:
            return kept.times
        try:
            with cache_lock("registry", agent):
                kept = _kept(agent)  # another process may have asked meanwhile
                if kept is not None and started <= kept.asked:
                    return kept.times
                return _ask(agent)
        except OSError:  # a bundle cache that cannot be written: asked without keeping the answer
            return _ask(agent)


@functools.cache
def _ask(agent: str) -> dict[str, datetime.datetime] | None:
    asked = datetime.datetime.now(datetime.UTC)
    times = registry.upload_times(load_pins().agents[agent])
    if times is None:
        return None
    plain = {v: t for v, t in times.items() if registry.FINAL.match(v)}
    with contextlib.suppress(OSError):  # a cache that cannot be written: asked again by the next run
        write_bytes_atomic(_cache_file(agent), _Asked(asked=asked, times=plain).model_dump_json().encode())
    return plain


def _kept(agent: str) -> _Asked | None:
    path = _cache_file(agent)
    if not path.is_file():
        return None
    try:
        return _Asked.model_validate_json(read_input(path, _MAX_CACHED))
    except (BadInput, ValidationError):
        return None  # damaged or over the bound: asked again, and replaced


def _cache_file(agent: str) -> Path:
    return bundles_root() / ".registry" / f"{agent}.json"
