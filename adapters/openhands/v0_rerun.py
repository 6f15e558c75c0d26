"""Rerun a V0 trajectory's actions with openhands-ai 1.6.0's own runtime, through the companion.

One companion serves the whole replay: it starts the local runtime once (its tmux shell persists across
steps, as in the original run; its state at the boundary is kept for the continuation,
adapters/openhands/shell.py) and executes each step's recorded actions as a replayed action is
executed (ReplayManager feeds the controller, which hands each action to the runtime).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.companion import SOCKET, STEP_MARGIN_S
from replayer.adapters.openhands import bundle, v0
from replayer.adapters.openhands.shell import ShellRerunner
from replayer.floor.limits import Budgets
from replayer.floor.trajectory import Observation, Step, Trajectory
from replayer.sandboxes.base import Sandbox

FIRST_REQUEST = "first-request.json"
"""The messages the reruns' companion tells the first request over, in the work folder."""


def companion_argv(mode: str, cwd: str, *args: str) -> list[str]:
    """`oh_v0_companion.py MODE CONFIG CWD ...` with the pinned V0 interpreter and config."""
    return [
        bundle.python(bundle.NAME_V0),
        f"{bundle.COMPANION_MOUNT}/oh_v0_companion.py",
        mode,
        f"{bundle.COMPANION_MOUNT}/v0_config.toml",
        cwd,
        *args,
    ]


class OpenHandsV0Rerunner(ShellRerunner):
    name = "openhands V0"
    start_timeout_s = 600.0
    """The companion listens once the runtime is up: its imports, then the action execution server (which
    the runtime itself waits up to 480 s for, and the companion starts once more when that wait expires),
    the kernel gateway and AgentSkills; ~30 s on an idle machine, past two minutes on a loaded one."""

    def __init__(self, trajectory: Trajectory, sandbox: Sandbox, work: Path, budgets: Budgets):
        assert trajectory.cwd
        self.native = trajectory.native_as(v0.NativeV0)
        argv = companion_argv("serve", trajectory.cwd, f"{bundle.WORK_MOUNT}/{SOCKET}")
        super().__init__(trajectory, sandbox, work, argv, bundle.v0_env())
        self.timeout_s = budgets.max_command_timeout_s + STEP_MARGIN_S
        self.sandbox = sandbox

    def tell_request(
        self, messages: list[dict[str, Any]], env: dict[str, str], timeout_s: float
    ) -> dict[str, Any]:
        """The companion's answer line to {"request": ...}: the first request over `messages`, told with
        `env` over its environment (oh_v0_companion.py `first_request`)."""
        path = f"{bundle.WORK_MOUNT}/{FIRST_REQUEST}"
        self.sandbox.write_file(path, orjson.dumps(messages))
        return self.companion.request(
            {"request": {"messages": path, "env": env}}, timeout_s, "the first request"
        )

    def request(self, step: Step) -> tuple[dict[str, Any], float]:
        events = self.native.events
        actions = [
            events[i]
            for i in self.native.step_events[step.index - 1]
            if "action" in events[i]
            and (events[i].get("tool_call_metadata") or {}).get("tool_call_id") not in self.kept
        ]
        return {"actions": actions}, len(actions) * self.timeout_s

    def observations(self, step: Step, answer: dict[str, Any]) -> dict[str, Observation]:
        by_call = {(o.get("tool_call_metadata") or {}).get("tool_call_id"): o for o in answer["observations"]}
        return {c.id: v0.observation_of(by_call[c.id]) for c in step.calls if c.id in by_call}
