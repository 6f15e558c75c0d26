"""Verdicts of `replayer verify`: where they are stored and whether one makes a version verified."""

from __future__ import annotations

from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict

from replayer.floor import settings
from replayer.floor.determinism import Determinism
from replayer.floor.io import write_bytes_atomic
from replayer.floor.pins import bundles_root, pinned_version
from replayer.floor.release import __version__ as REPLAYER_VERSION

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "verdicts"


class Check(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    passed: bool
    detail: str = ""


class Verdict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    schema_version: int = 1
    agent: str
    version: str
    replayer: str
    """The replayer version that checked it: only its own verdicts count."""
    passed: bool
    probe: str
    tools_offered: list[str]
    """What the version's first request offered the model."""
    probe_tools: list[str]
    """The tools the probe called (its shell tool, its read tool where it has one)."""
    boundaries: list[int]
    """The boundaries of the version's own probe session that were replayed and continued."""
    checks: list[Check]
    checked_at: str
    determinism: Determinism | None = None
    """`verify --repeat R`: the probe session's longest prefix rerun R times in fresh containers."""


# where verdicts live ------------------------------------------------------------------------------
def verdict_dirs() -> list[Path]:
    """The `verdicts` setting (REPLAYER_VERDICTS, replayer.toml) alone when set; else the user's verdicts
    beside the bundle cache, then those the replayer ships (docs/compatibility.md is generated from these)."""
    stated = settings.load().verdicts
    if stated:
        return [stated]
    return [bundles_root().parent / "verdicts", SHIPPED]


def verdict_path(root: Path, agent: str, version: str) -> Path:
    return root / f"{agent}@{version}.json"


def load_verdict(agent: str, version: str) -> Verdict | None:
    """The first readable verdict for this version by this replayer version."""
    for root in verdict_dirs():
        path = verdict_path(root, agent, version)
        try:
            verdict = Verdict.model_validate_json(path.read_bytes())
        except (OSError, ValueError):
            continue
        if verdict.replayer == REPLAYER_VERSION:
            return verdict
    return None


def is_verified(agent: str, version: str) -> bool:
    if version == pinned_version(agent):
        return True
    verdict = load_verdict(agent, version)
    return verdict is not None and verdict.passed


def store(verdict: Verdict, root: Path | None = None) -> Path:
    root = root or verdict_dirs()[0]
    root.mkdir(parents=True, exist_ok=True)
    path = verdict_path(root, verdict.agent, verdict.version)
    write_bytes_atomic(
        path, orjson.dumps(verdict.model_dump(mode="json"), option=orjson.OPT_INDENT_2) + b"\n"
    )
    return path


def shipped() -> list[Verdict]:
    return [Verdict.model_validate_json(p.read_bytes()) for p in sorted(SHIPPED.glob("*.json"))]
