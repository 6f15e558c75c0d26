"""Rerun a V0 trajectory's actions with openhands-ai 1.6.0's own runtime, through the companion.

One companion serves the whole replay: it starts the local runtime once (its tmux shell persists across
steps, as in the original run) and executes each step's recorded actions as a replayed action is
executed (ReplayManager feeds the controller, which hands each action to the runtime).
"""

from __future__ import annotations

from pathlib import Path

from adapters.companion import SocketCompanion
from adapters.openhands import bundle, v0
from replayer.errors import SandboxError
from replayer.models import Budgets, Observation, ToolCall, Trajectory
from sandboxes.base import Sandbox

SOCKET = "companion.sock"
_STEP_MARGIN_S = 60.0
_START_TIMEOUT_S = 600.0
"""The companion listens once the runtime is up: its imports, then the action execution server (which the
runtime itself waits up to 120 s for, and the companion starts once more when that wait expires), the
kernel gateway and AgentSkills; ~30 s on an idle machine, past two minutes on a loaded one."""


class OpenHandsV0Rerunner:
    def __init__(self, trajectory: Trajectory, sandbox: Sandbox, work: Path, budgets: Budgets):
        assert trajectory.cwd
        self.native: v0.NativeV0 = trajectory._native
        self.steps = {s.index: s for s in trajectory.steps}
        self.step_of = {c.id: s.index for s in trajectory.steps for c in s.calls}
        self.fresh: dict[str, Observation] = {}
        self.timeout_s = budgets.max_command_timeout_s + _STEP_MARGIN_S
        argv = [
            bundle.python(bundle.NAME_V0),
            f"{bundle.COMPANION_MOUNT}/oh_v0_companion.py",
            "serve",
            f"{bundle.COMPANION_MOUNT}/v0_config.toml",
            trajectory.cwd,
            f"{bundle.WORK_MOUNT}/{SOCKET}",
        ]
        self.companion = SocketCompanion(
            sandbox,
            argv,
            workdir=trajectory.cwd,
            env=bundle.v0_env(),
            work=work,
            socket_name=SOCKET,
            name="openhands V0",
            start_timeout_s=_START_TIMEOUT_S,
        )

    def run(self, call: ToolCall) -> Observation:
        if call.id not in self.fresh:
            self._run_step(self.step_of[call.id])
        return self.fresh[call.id]

    def _run_step(self, index: int) -> None:
        step = self.steps[index]
        events = self.native.events
        actions = [events[i] for i in self.native.step_events[index - 1] if "action" in events[i]]
        answer = self.companion.request({"actions": actions}, len(actions) * self.timeout_s, f"step {index}")
        if "error" in answer:
            raise SandboxError(f"openhands V0 failed to execute step {index}: {answer['error']}")
        by_call = {(o.get("tool_call_metadata") or {}).get("tool_call_id"): o for o in answer["observations"]}
        for call in step.calls:
            fresh = by_call.get(call.id)
            if fresh is None:
                raise SandboxError(f"openhands V0 made no observation for call {call.id} in step {index}")
            self.fresh[call.id] = v0.observation_of(fresh)

    def close(self) -> None:
        self.companion.close()
