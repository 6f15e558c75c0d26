"""Which agent version ran and where it came from, the pins of a run, and what was installed for it
(a run's bundles, `replayer setup`'s report)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from replayer.floor.model_base import Frozen

VersionSource = Literal["recorded", "inferred", "stated", "default"]


class VersionRecord(Frozen):
    """The agent version a replay ran, where that version came from, and who reran the tools."""

    version: str
    source: VersionSource
    """recorded: the file's version field; inferred: from the file's features, or (`registry_date` set) the
    release current at the session's first timestamp by the registry's publish times; stated:
    --agent-version; default: neither the file nor the registry tells, so the pinned version ran."""
    status: Literal["verified", "unverified"]
    """verified: the pinned version, whose prefix, reruns and gate the test suite checks, or a version
    whose probe `replayer verify` passed (its verdict is stored)."""
    in_file: str | None = None
    """The version field of the file (None: it has none, or the version was inferred)."""
    registry_date: datetime.datetime | None = None
    """Inferred from the registry: the session's first timestamp, at which `version` was the newest plain
    release by the registry's publish times (npm `time`, PyPI upload times). None: not asked of the registry."""
    reruns: str
    """Whose code reran the tools: the version's own, or the replayer's reimplementation of the pinned one."""
    note: str | None = None
    """What ran other than what the file names: another version (its runner does not drive that version
    yet), another class of the agent's own code (mini-swe-agent's progress-tracking agent)."""


class Pins(Frozen):
    replayer: str
    adapter: str
    cli_package: str | None
    cli_version: str | None
    base_image: str


class InstalledBundle(Frozen):
    """A bundle this run installed because the cache lacked it (later runs reuse it)."""

    agent: str
    version: str
    source: str
    """`npm PACKAGE` or `PyPI PACKAGE`."""
    bytes: int
    seconds: float


class ImageStatus(BaseModel):
    """The base image, as `replayer setup` found or built it."""

    model_config = ConfigDict(extra="forbid")
    tag: str
    status: Literal["present", "built"]
    bytes: int | None = None
    """The image's size (as the engine reports it)."""
    seconds: float | None = None
    """(built) How long the build took."""


class BundleStatus(BaseModel):
    """An agent bundle, as `replayer setup` found or installed it."""

    model_config = ConfigDict(extra="forbid")
    agent: str
    version: str
    path: Path
    status: Literal["present", "installed"]


class SetupReport(BaseModel):
    """`replayer setup --json`."""

    model_config = ConfigDict(extra="forbid")
    engine: Literal["running", "started"]
    image: ImageStatus | None
    """None: --no-image."""
    bundles: list[BundleStatus]
    notes: list[str]
    """What the scripts warned about (e.g. an engine without disk quotas: no loop devices here)."""
