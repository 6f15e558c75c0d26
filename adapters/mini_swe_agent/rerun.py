"""Rerun a trajectory's actions with mini-swe-agent's own code, through the companion in the sandbox.

One companion process serves the whole replay (importing the package takes seconds): per step it
gets the historical assistant message and answers with the observation messages that the pinned
agent, model and environment classes made of it (execution, submission check, template).
"""

from __future__ import annotations

from itertools import accumulate
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.companion import SOCKET, STEP_MARGIN_S, StepRerunner
from replayer.adapters.mini_swe_agent import bundle, config
from replayer.adapters.mini_swe_agent.session import Native, calls_and_cost
from replayer.floor.errors import PlanRefused
from replayer.floor.io import write_bytes_atomic
from replayer.floor.trajectory import Observation, Step, Trajectory
from replayer.sandboxes.base import Sandbox


def _add(a: tuple[int, float], b: tuple[int, float]) -> tuple[int, float]:
    return a[0] + b[0], a[1] + b[1]


def companion_argv(mode: str, spec: str, *extra: str) -> list[str]:
    return [bundle.python(), f"{bundle.COMPANION_MOUNT}/mini_companion.py", mode, spec, *extra]


class MiniRerunner(StepRerunner):
    name = "mini-swe-agent"

    def __init__(self, trajectory: Trajectory, sandbox: Sandbox, work: Path):
        self.native = trajectory.native_as(Native)
        self.totals = list(accumulate((calls_and_cost([m]) for m in self.native.messages), _add))
        """(n_calls, cost) through each message: the agent's counters when that message was added."""
        spec = config.companion_spec(self.native, output_path=None)
        write_bytes_atomic(work / "serve.json", orjson.dumps(spec))
        self.step_timeout_s = float(spec["config"]["environment"].get("timeout") or 30)
        argv = companion_argv("serve", f"{bundle.WORK_MOUNT}/serve.json", f"{bundle.WORK_MOUNT}/{SOCKET}")
        super().__init__(trajectory, sandbox, work, argv, bundle.base_env())

    def request(self, step: Step) -> tuple[dict[str, Any], float]:
        start, _ = self.native.step_spans[step.index - 1]
        message = self.native.messages[start]
        if self.native.format != "mini-swe-agent-1.1":  # 1.x kept no actions: the parsed ones
            actions = [dict(c.input) for c in step.calls]
            message = {**message, "extra": {**(message.get("extra") or {}), "actions": actions}}
        n_calls, cost = self.totals[start]
        timeout = len(step.calls) * (self.step_timeout_s + 5) + STEP_MARGIN_S
        return {"message": message, "n_calls": n_calls, "cost": cost}, timeout

    def observations(self, step: Step, answer: dict[str, Any]) -> dict[str, Observation]:
        messages: list[dict[str, Any]] = answer["messages"]
        if answer.get("exit_status") or any(m.get("role") == "exit" for m in messages):
            raise PlanRefused(
                f"step {step.index} submitted when replayed (mini-swe-agent stops there); "
                f"the boundary must come before step {step.index}"
            )
        by_id = {m["tool_call_id"]: m for m in messages if "tool_call_id" in m}
        if not by_id:  # no tool-call ids (text-based actions): the observations in call order
            by_id = {call.id: m for call, m in zip(step.calls, messages, strict=False)}
        return {c.id: _observation(by_id[c.id]) for c in step.calls if c.id in by_id}


def _observation(message: dict[str, Any]) -> Observation:
    """2.x keeps what the command gave in `extra`; 1.x's message has only its timestamp (from 1.16) besides."""
    if "extra" in message:
        return Observation(content=message["content"], structured=message["extra"])
    stamp = {"timestamp": message["timestamp"]} if "timestamp" in message else None
    return Observation(content=message["content"], structured=stamp)
