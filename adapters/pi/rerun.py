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

from adapters.companion import SocketCompanion
from adapters.pi import bundle
from adapters.pi.session import Native
from adapters.pi.wire import tool_text
from replayer.errors import SandboxError
from replayer.io import write_bytes_atomic
from replayer.models import Observation, ToolCall, Trajectory
from sandboxes.base import Sandbox

SOCKET = "companion.sock"
_STEP_MARGIN_S = 60.0


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


class PiRerunner:
    def __init__(self, trajectory: Trajectory, sandbox: Sandbox, work: Path, step_timeout_s: float):
        assert trajectory.cwd
        native: Native = trajectory._native
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
        self.step_of_call = {c.id: s.index for s in trajectory.steps for c in s.calls}
        self.fresh: dict[str, Observation] = {}
        self.step_timeout_s = step_timeout_s
        spec = {
            "cwd": trajectory.cwd,
            "agent_dir": bundle.AGENT_DIR,
            "messages": messages,
            "step_of": step_of,
        }
        write_bytes_atomic(work / "rerun.json", orjson.dumps(spec))
        self.companion = SocketCompanion(
            sandbox,
            bundle.companion_argv(
                "rerun", f"{bundle.WORK_MOUNT}/rerun.json", f"{bundle.WORK_MOUNT}/{SOCKET}"
            ),
            workdir=trajectory.cwd,
            env=bundle.base_env(),
            work=work,
            socket_name=SOCKET,
            name="Pi",
        )

    def run(self, call: ToolCall) -> Observation:
        if call.id not in self.fresh:
            self._run_step(self.step_of_call[call.id])
        return self.fresh[call.id]

    def _run_step(self, index: int) -> None:
        answer = self.companion.request(
            {"step": index}, self.step_timeout_s + _STEP_MARGIN_S, f"step {index}"
        )
        if answer.get("step") != index:
            raise SandboxError(f"the Pi companion answered step {answer.get('step')} for step {index}")
        for result in answer["results"]:
            self.fresh[result["toolCallId"]] = observation(result)

    def close(self) -> None:
        self.companion.close()
