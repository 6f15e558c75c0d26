"""Rerun a V1 conversation's action batches with the pinned SDK's own tools, through the companion.

One companion process serves the whole replay (one persistent terminal, like the agent's; its state at the
boundary is kept for the continuation, adapters/openhands/shell.py): per step
it injects the historical ActionEvents into a conversation of its own and lets `Agent.step` execute
them as pending actions, which it does without asking the model; the fresh observation events come
back with the chat message the SDK renders of each.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.companion import SOCKET, STEP_MARGIN_S
from replayer.adapters.openhands import bundle
from replayer.adapters.openhands.session import BASE_STATE, Native
from replayer.adapters.openhands.shell import ShellRerunner
from replayer.adapters.openhands.wire import tool_text
from replayer.floor.errors import SandboxError
from replayer.floor.io import write_bytes_atomic
from replayer.floor.limits import Budgets
from replayer.floor.trajectory import Observation, Step, Trajectory
from replayer.sandboxes.base import Sandbox


def companion_argv(*args: str) -> list[str]:
    return [bundle.python(), f"{bundle.COMPANION_MOUNT}/oh_companion.py", *args]


class OpenHandsRerunner(ShellRerunner):
    name = "openhands"
    start_timeout_s = 600.0
    """The companion listens once the SDK is imported and its terminal is up: seconds on an idle machine,
    past the companions' default 120 s on a loaded one (load ~25: "did not start: no output", still
    importing), as V0's companion (OpenHandsV0Rerunner.start_timeout_s)."""

    def __init__(self, trajectory: Trajectory, sandbox: Sandbox, work: Path, budgets: Budgets):
        self.native = trajectory.native_as(Native)
        write_bytes_atomic(work / BASE_STATE, orjson.dumps(self.native.base_state))
        spec = {
            "base_state": f"{bundle.WORK_MOUNT}/{BASE_STATE}",
            "task": self.native.first_user_text or "",
            "cwd": trajectory.cwd,
            "persistence_dir": f"{bundle.WORK_MOUNT}/rerun",
        }
        write_bytes_atomic(work / "serve.json", orjson.dumps(spec))
        argv = companion_argv("serve", f"{bundle.WORK_MOUNT}/serve.json", f"{bundle.WORK_MOUNT}/{SOCKET}")
        super().__init__(trajectory, sandbox, work, argv, bundle.base_env())
        self.timeout_s = budgets.max_command_timeout_s + STEP_MARGIN_S

    def request(self, step: Step) -> tuple[dict[str, Any], float]:
        events = self.native.events
        actions = [
            events[i]
            for i in self.native.step_events[step.index - 1]
            if events[i]["kind"] == "ActionEvent" and events[i].get("tool_call_id") not in self.kept
        ]
        return {"actions": actions}, len(actions) * self.timeout_s

    def observations(self, step: Step, answer: dict[str, Any]) -> dict[str, Observation]:
        by_call = {o["event"].get("tool_call_id"): o for o in answer["observations"]}
        out = {}
        for call in step.calls:
            fresh = by_call.get(call.id)
            if fresh is None:
                continue
            event = fresh["event"]
            text = tool_text(event)
            chat_text = "".join(c.get("text", "") for c in fresh["chat"].get("content") or [])
            if chat_text != text:
                raise SandboxError(
                    f"the SDK renders call {call.id} differently from the replayer (wire drift)"
                )
            is_error = (
                bool((event.get("observation") or {}).get("is_error"))
                if event["kind"] == "ObservationEvent"
                else True
            )
            out[call.id] = Observation(content=text, is_error=is_error, structured=event)
        return out
