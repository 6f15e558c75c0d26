"""What a long verb reports while it works: typed events passed to a callback (the CLI renders them live;
an API caller may log or ignore them). The engine never waits on a callback's output and never depends
on one being there."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from replayer.floor.results import AgentStatus, DivergenceStatus

StageName = Literal["parse", "sandbox", "rerun", "rebuild", "continue", "runs"]


@dataclass(frozen=True, slots=True)
class Stage:
    """A pipeline stage begins; `total`: how many items it has (calls to rerun, runs to make)."""

    name: StageName
    total: int | None = None


@dataclass(frozen=True, slots=True)
class CallRerun:
    """One historical call was run again; `status` compares its fresh observation with the historical."""

    step: int
    call_id: str
    tool: str
    status: DivergenceStatus
    seconds: float
    done: int
    total: int


@dataclass(frozen=True, slots=True)
class BridgeTraffic:
    """The continuation's traffic through the bridge changed (counted so far)."""

    main_requests: int
    input_tokens: int | None
    output_tokens: int | None


@dataclass(frozen=True, slots=True)
class AgentEnded:
    """The continued agent ended."""

    status: AgentStatus
    steps_used: int
    seconds: float


@dataclass(frozen=True, slots=True)
class RunEnded:
    """(`compare`) one variant run ended; `outcome` is its agent status, or the error of a failed run."""

    variant: str
    repeat: int
    outcome: str
    failed: bool
    done: int
    total: int


@dataclass(frozen=True, slots=True)
class JobEnded:
    """(`batch`) one job ended; `done` counts those of this run, skipped ones included."""

    key: str
    status: str
    done: int
    total: int


@dataclass(frozen=True, slots=True)
class Installing:
    """An agent's bundle is installed (the cache lacked that version): `start`, then `progress` every second
    with the bytes so far, then `done` with its size."""

    agent: str
    version: str
    source: str
    """Where it comes from: `npm PACKAGE` or `PyPI PACKAGE`."""
    bytes: int
    seconds: float
    phase: Literal["start", "progress", "done"]


@dataclass(frozen=True, slots=True)
class Building:
    """Something that takes a while is being built once (`replayer setup`'s base image): what, as a phrase."""

    what: str


Event = Stage | CallRerun | BridgeTraffic | AgentEnded | RunEnded | JobEnded | Installing | Building
OnEvent = Callable[[Event], None]


def ignore(event: Event) -> None:
    """The callback of a caller that wants no events."""
