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

from adapters.companion import SocketCompanion
from adapters.mini_swe_agent import bundle, config
from adapters.mini_swe_agent.trajectory import Native, calls_and_cost
from replayer.errors import PlanRefused, SandboxError
from replayer.io import write_bytes_atomic
from replayer.models import Observation, ToolCall, Trajectory
from sandboxes.base import Sandbox

_STEP_MARGIN_S = 60.0
SOCKET = "companion.sock"


def _add(a: tuple[int, float], b: tuple[int, float]) -> tuple[int, float]:
    return a[0] + b[0], a[1] + b[1]


def companion_argv(mode: str, spec: str, *extra: str) -> list[str]:
    return [bundle.python(), f"{bundle.COMPANION_MOUNT}/mini_companion.py", mode, spec, *extra]


class MiniRerunner:
    def __init__(self, trajectory: Trajectory, sandbox: Sandbox, work: Path):
        assert trajectory.cwd
        self.native: Native = trajectory._native
        self.step_of = {c.id: s.index for s in trajectory.steps for c in s.calls}
        self.calls = {s.index: s.calls for s in trajectory.steps}
        self.fresh: dict[str, Observation] = {}
        self.totals = list(accumulate((calls_and_cost([m]) for m in self.native.messages), _add))
        """(n_calls, cost) through each message: the agent's counters when that message was added."""
        companion_config = config.companion_config(self.native, output_path=None)
        spec = {"version": bundle.version(), "config": companion_config}
        write_bytes_atomic(work / "serve.json", orjson.dumps(spec))
        self.step_timeout_s = float(companion_config["environment"].get("timeout") or 30)
        self.companion = SocketCompanion(
            sandbox,
            companion_argv("serve", f"{bundle.WORK_MOUNT}/serve.json", f"{bundle.WORK_MOUNT}/{SOCKET}"),
            workdir=trajectory.cwd,
            env=bundle.base_env(),
            work=work,
            socket_name=SOCKET,
            name="mini-swe-agent",
        )

    def run(self, call: ToolCall) -> Observation:
        if call.id not in self.fresh:
            self._run_step(self.step_of[call.id])
        return self.fresh[call.id]

    def _run_step(self, index: int) -> None:
        start, _ = self.native.step_spans[index - 1]
        message = self.native.messages[start]
        if self.native.format != "mini-swe-agent-1.1":  # 1.x kept no actions: the parsed ones
            actions = [dict(c.input) for c in self.calls[index]]
            message = {**message, "extra": {**(message.get("extra") or {}), "actions": actions}}
        n_calls, cost = self.totals[start]
        calls = self.calls[index]
        timeout = len(calls) * (self.step_timeout_s + 5) + _STEP_MARGIN_S
        payload = {"message": message, "n_calls": n_calls, "cost": cost}
        answer = self.companion.request(payload, timeout, f"step {index}")
        if "error" in answer:
            raise SandboxError(f"mini-swe-agent failed to execute step {index}: {answer['error']}")
        messages: list[dict[str, Any]] = answer["messages"]
        if any(m.get("role") == "exit" for m in messages):
            raise PlanRefused(
                f"step {index} submitted when replayed (mini-swe-agent stops there); "
                f"the boundary must come before step {index}"
            )
        by_id = {m["tool_call_id"]: m for m in messages if "tool_call_id" in m}
        for n, call in enumerate(calls):
            fresh = by_id.get(call.id) if by_id else (messages[n] if n < len(messages) else None)
            if fresh is None:
                raise SandboxError(f"mini-swe-agent made no observation for call {call.id} in step {index}")
            self.fresh[call.id] = Observation(content=fresh["content"], structured=fresh.get("extra"))

    def close(self) -> None:
        self.companion.close()
