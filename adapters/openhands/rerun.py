"""Rerun a V1 conversation's action batches with the pinned SDK's own tools, through the companion.

One companion process serves the whole replay (one persistent terminal, like the agent's): per step
it injects the historical ActionEvents into a conversation of its own and lets `Agent.step` execute
them as pending actions, which it does without asking the model; the fresh observation events come
back with the chat message the SDK renders of each.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from adapters.companion import SocketCompanion
from adapters.openhands import bundle
from adapters.openhands.conversation import BASE_STATE, Native
from adapters.openhands.wire import tool_text
from replayer.errors import SandboxError
from replayer.io import write_bytes_atomic
from replayer.models import Budgets, Observation, ToolCall, Trajectory
from sandboxes.base import Sandbox

SOCKET = "companion.sock"
_STEP_MARGIN_S = 60.0


def companion_argv(*args: str) -> list[str]:
    return [bundle.python(), f"{bundle.COMPANION_MOUNT}/oh_companion.py", *args]


class OpenHandsRerunner:
    def __init__(self, trajectory: Trajectory, sandbox: Sandbox, work: Path, budgets: Budgets):
        assert trajectory.cwd
        self.native: Native = trajectory._native
        self.steps = {s.index: s for s in trajectory.steps}
        self.step_of = {c.id: s.index for s in trajectory.steps for c in s.calls}
        self.fresh: dict[str, Observation] = {}
        self.timeout_s = budgets.max_command_timeout_s + _STEP_MARGIN_S
        write_bytes_atomic(work / BASE_STATE, orjson.dumps(self.native.base_state))
        spec = {
            "base_state": f"{bundle.WORK_MOUNT}/{BASE_STATE}",
            "task": self.native.first_user_text or "",
            "cwd": trajectory.cwd,
            "persistence_dir": f"{bundle.WORK_MOUNT}/rerun",
        }
        write_bytes_atomic(work / "serve.json", orjson.dumps(spec))
        self.companion = SocketCompanion(
            sandbox,
            companion_argv("serve", f"{bundle.WORK_MOUNT}/serve.json", f"{bundle.WORK_MOUNT}/{SOCKET}"),
            workdir=trajectory.cwd,
            env=bundle.base_env(),
            work=work,
            socket_name=SOCKET,
            name="openhands",
        )

    def run(self, call: ToolCall) -> Observation:
        if call.id not in self.fresh:
            self._run_step(self.step_of[call.id])
        return self.fresh[call.id]

    def _run_step(self, index: int) -> None:
        step = self.steps[index]
        actions = [
            self.native.events[i]
            for i in self.native.step_events[index - 1]
            if self.native.events[i]["kind"] == "ActionEvent"
        ]
        timeout = len(actions) * self.timeout_s
        answer = self.companion.request({"actions": actions}, timeout, f"step {index}")
        if "error" in answer:
            raise SandboxError(f"openhands failed to execute step {index}: {answer['error']}")
        by_call = {o["event"].get("tool_call_id"): o for o in answer["observations"]}
        for call in step.calls:
            fresh = by_call.get(call.id)
            if fresh is None:
                raise SandboxError(f"openhands made no observation for call {call.id} in step {index}")
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
            self.fresh[call.id] = Observation(content=text, is_error=is_error, structured=event)

    def close(self) -> None:
        self.companion.close()
