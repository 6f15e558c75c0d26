"""Plan a replay: the boundary must fall after a complete batch, and every refusal is explicit."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict

from replayer.adapters.base import Adapter
from replayer.floor.errors import PlanRefused
from replayer.floor.heap import collector_paused
from replayer.floor.results import Degradation
from replayer.floor.trajectory import Step, ToolCall, ToolKind, Trajectory, quick_init

NO_CWD = "the trajectory records no working directory"
"""Run mode mounts the workspace at the recorded cwd; without one there is nowhere to mount it (a file whose
calls name only relative paths runs in `trajectory.DEFAULT_CWD`)."""


@quick_init
@dataclass(frozen=True, slots=True)
class PlannedCall:
    """A call the replay reruns (or keeps): built here from the parse's steps, one per call, so a slotted
    dataclass (as the steps), not a model validated once more."""

    step: int
    call: ToolCall
    kind: ToolKind


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")
    after_step: int
    calls: list[PlannedCall]
    degradations: list[Degradation]
    boundary_call_ids: list[str]


def make_plan(
    adapter: Adapter, traj: Trajectory, after_step: int, allow_degraded: bool, executes: bool = True
) -> Plan:
    """`executes=False` (prepare) reruns nothing, so an unknown tool is listed but not refused."""
    with collector_paused():
        return _make_plan(adapter, traj, after_step, allow_degraded, executes)


def _make_plan(
    adapter: Adapter, traj: Trajectory, after_step: int, allow_degraded: bool, executes: bool
) -> Plan:
    degradations: list[Degradation] = []
    if not traj.session_id:
        raise PlanRefused("the trajectory has no native session id")
    steps = traj.steps
    if after_step < 0:
        raise PlanRefused(f"--after-step must be >= 0, got {after_step}")
    last_complete = _last_complete(steps)
    if after_step > len(steps):
        raise PlanRefused(
            f"boundary {after_step} is beyond the last step ({len(steps)}; last complete: {last_complete})"
        )
    final = next((s for s in steps if s.final), None)
    if final is not None and after_step >= final.index:
        raise PlanRefused(
            f"boundary {after_step} is at or after step {final.index}, where the run ended; "
            f"the last boundary is {final.index - 1}"
        )
    for step in steps[:after_step]:
        if not step.complete:
            missing = ", ".join(c.id for c in step.calls if c.historical is None)
            raise PlanRefused(
                f"boundary {after_step} would split step {step.index} (no observation for {missing}); "
                f"last complete batch before it: {step.index - 1}"
            )
    substituted = adapter.substitution(traj) if executes else None
    if substituted:
        if not allow_degraded:
            raise PlanRefused(f"{substituted}; --allow-degraded runs it so, recorded")
        degradations.append(Degradation(reason=substituted, action="class_substituted"))
    calls: list[PlannedCall] = []
    for step in steps[:after_step]:
        for call in step.calls:
            kind, why = adapter.classify(call, traj)
            if kind == "unknown" and executes:
                reason = f"{why} in step {step.index} (call {call.id})"
                if not allow_degraded:
                    raise PlanRefused(reason + "; --allow-degraded keeps its historical observation")
                degradations.append(Degradation.historical_kept(step.index, call, reason))
            calls.append(PlannedCall(step.index, call, kind))
    boundary_ids = [c.id for c in steps[after_step - 1].calls] if after_step else []
    return Plan(after_step=after_step, calls=calls, degradations=degradations, boundary_call_ids=boundary_ids)


def _last_complete(steps: list[Step]) -> int:
    last = 0
    for step in steps:
        if not step.complete:
            break
        last = step.index
    return last
