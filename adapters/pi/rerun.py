"""Rerun a Pi session's tool calls with Pi's own agent loop and tools, through the companion in the sandbox.

One companion process serves the whole replay over a unix socket in the run's state directory: an
AgentSession of the pinned package (the CLI's own read, bash, edit and write, its argument validation,
parallel batches and error results) whose model stream hands out the historical assistant messages;
for each step it answers with the toolResult messages Pi made of that step's calls.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.companion import SOCKET, STEP_MARGIN_S, StepRerunner
from replayer.adapters.pi import bundle
from replayer.adapters.pi.session import Native
from replayer.adapters.pi.wire import tool_text
from replayer.floor.errors import SandboxError
from replayer.floor.io import write_bytes_atomic
from replayer.floor.limits import Budgets
from replayer.floor.trajectory import Observation, Step, Trajectory
from replayer.sandboxes.base import Sandbox


def chronological(native: Native) -> list[dict[str, Any]]:
    """Every message of the active branch in file order (a compaction hides some from the context, not
    from the reruns: their effects on the workspace happened)."""
    return [
        e["message"]
        for e in native.entries
        if e.get("type") == "message" and isinstance(e.get("message"), dict)
    ]


def observation(result: dict[str, Any]) -> Observation:
    return Observation(content=tool_text(result), is_error=bool(result.get("isError")), structured=result)


class PiRerunner(StepRerunner):
    name = "Pi"

    def __init__(self, trajectory: Trajectory, sandbox: Sandbox, work: Path, budgets: Budgets):
        native = trajectory.native_as(Native)
        messages = chronological(native)
        call_at = {
            block.get("id"): at
            for at, m in enumerate(messages)
            if m.get("role") == "assistant"
            for block in m.get("content") or []
            if isinstance(block, dict) and block.get("type") == "toolCall"
        }
        step_of = {
            str(call_at[s.calls[0].id]): s.index
            for s in trajectory.steps
            if s.calls and s.calls[0].id in call_at
        }
        self.timeout_s = budgets.max_command_timeout_s + 2 * STEP_MARGIN_S
        """One command's time (Pi runs a step's calls in parallel), a margin for the step and one for Pi's loop."""
        spec = {
            "cwd": trajectory.cwd,
            "agent_dir": bundle.AGENT_DIR,
            "messages": messages,
            "step_of": step_of,
        }
        write_bytes_atomic(work / "rerun.json", orjson.dumps(spec))
        argv = bundle.companion_argv(
            "rerun", f"{bundle.WORK_MOUNT}/rerun.json", f"{bundle.WORK_MOUNT}/{SOCKET}"
        )
        super().__init__(trajectory, sandbox, work, argv, bundle.base_env())

    def request(self, step: Step) -> tuple[dict[str, Any], float]:
        return {"step": step.index}, self.timeout_s

    def observations(self, step: Step, answer: dict[str, Any]) -> dict[str, Observation]:
        if answer.get("step") != step.index:
            raise SandboxError(f"the Pi companion answered step {answer.get('step')} for step {step.index}")
        return {result["toolCallId"]: observation(result) for result in answer["results"]}
