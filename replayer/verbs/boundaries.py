"""Which boundaries of a trajectory a request names: `run -n`'s forms beyond one number (`all`,
`sample:K[:SEED]`, numbers and ranges) and a manifest line's `boundaries`, checked against the boundaries
the plan can accept."""

from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from replayer.floor.errors import BadInput, PlanRefused, excerpt
from replayer.floor.trajectory import Trajectory


class Sample(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sample: int = Field(ge=1)
    seed: int = 0


def valid_boundaries(traj: Trajectory) -> list[int]:
    """Boundaries the plan can accept: up to the last complete batch before the end (one before a compaction
    cuts it off, as a cut anywhere does)."""
    last = 0
    for step in traj.steps:
        if not step.complete or step.final:
            break
        last = step.index
    return list(range(0, last + 1))


Boundaries = Literal["all"] | list[int] | Sample
"""Which boundaries of a trajectory: every valid one, a list, or a seeded sample of the valid ones."""


def parse_boundaries(text: str) -> Boundaries:
    """`run -n`'s forms beyond one number: `all`, `sample:K[:SEED]`, or numbers and ranges `3,7,10-12`."""
    text = text.strip()
    if text == "all":
        return "all"
    try:
        if text.startswith("sample:"):
            count, _, seed = text.removeprefix("sample:").partition(":")
            return Sample(sample=int(count), seed=int(seed) if seed else 0)
        picked: list[int] = []
        for part in text.split(","):
            low, dash, high = part.strip().partition("-")
            first, last = int(low), int(high) if dash else int(low)
            if first < 0 or last < first:
                raise ValueError(part)
            picked.extend(range(first, last + 1))
        return picked
    except (ValueError, ValidationError):
        raise BadInput(
            f"-n {excerpt(text)}: give a boundary N, a list and ranges (3,7,10-12), all, or sample:K[:SEED]"
        ) from None


def pick_boundaries(spec: Boundaries, traj: Trajectory) -> list[int]:
    """The boundaries `spec` names, sorted; a named one the plan cannot accept is refused as the plan
    refuses `-n K` (exit 4), whether it is named alone or in a list."""
    valid = valid_boundaries(traj)
    if spec == "all":
        return valid
    if isinstance(spec, Sample):
        return sorted(random.Random(spec.seed).sample(valid, min(spec.sample, len(valid))))
    for boundary in spec:
        if boundary not in valid:
            span = f"{valid[0]}..{valid[-1]}" if valid else "none"
            raise PlanRefused(f"boundary {boundary} is not one of {span}")
    return sorted(set(spec))
