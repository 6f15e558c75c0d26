"""Rerun a Gemini CLI session's calls with the pinned CLI itself, driven by the replay model.

The CLI starts with the session's first prompt (`-p`, `--yolo`) against the fed scripted Gemini API;
each main request it sends is answered with the next historical model turn (its text and calls, with
their original ids), the CLI runs its own tools, and the functionResponse parts of its next request are
the fresh observations, rendered as that version renders them. A later prompt resumes the CLI's session.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replayer.adapters.base import StepwiseRerunner
from replayer.adapters.driven import PORT, STEP_MARGIN_S, ReplayModel
from replayer.adapters.gemini_cli import bundle, session, wire
from replayer.bridges.gemini import ScriptedGemini
from replayer.bridges.scripted import TextBlock, ToolUseBlock, Turn
from replayer.floor.errors import SandboxError
from replayer.floor.io import remove_entry
from replayer.floor.limits import Budgets
from replayer.floor.trajectory import ToolCall, Trajectory
from replayer.sandboxes.base import RunningExec, Sandbox

WORK_MOUNT = "/run/replayer-gemini"
MODEL = "gemini-2.5-flash"


def unprefixed(call_id: str, name: str) -> str:
    return call_id[len(name) + 2 :] if call_id.startswith(f"{name}__") else call_id


class GeminiRerunner(StepwiseRerunner):
    name = "gemini"

    def __init__(self, trajectory: Trajectory, sandbox: Sandbox, work: Path, budgets: Budgets):
        assert trajectory.cwd
        super().__init__(trajectory)
        native = trajectory.native_as(session.Native)
        self.sandbox, self.cwd = sandbox, trajectory.cwd
        self.messages = native.messages
        self.step_timeout_s = budgets.max_command_timeout_s + STEP_MARGIN_S
        self.prompt_of = self._prompts(trajectory)
        self.model = ReplayModel(sandbox, work, WORK_MOUNT, MODEL, upstream=ScriptedGemini)
        self.handle: RunningExec | None = None
        self.prompt: int | None = None
        self.session_id: str | None = None

    def _prompts(self, trajectory: Trajectory) -> dict[int, int]:
        """Step index -> the message index of the prompt whose run it belongs to."""
        at_of = {m["id"]: at for at, m in enumerate(self.messages)}
        out = {}
        for step in trajectory.steps:
            at = at_of[step.message_id]
            before = [
                i
                for i in range(at)
                if self.messages[i].get("type") == "user"
                and not session.response_parts(self.messages[i])
                and not wire.ignored_user_text(wire.part_text(self.messages[i].get("content")))
            ]
            if not before:
                raise SandboxError(f"step {step.index} has no user prompt before it to start the CLI with")
            out[step.index] = before[-1]
        return out

    def run_step(self, index: int) -> None:
        prompt = self.prompt_of[index]
        if prompt != self.prompt:
            self._start_run(prompt)
        self._next_request(f"step {index}")
        step = self.steps[index]
        message = next(m for m in self.messages if m["id"] == step.message_id)
        blocks: list[TextBlock | ToolUseBlock] = []
        text = wire.part_text(message.get("content"))
        if text:
            blocks.append(TextBlock(text=text))
        calls = [c for c in step.calls if c.id not in self.kept]
        blocks += [ToolUseBlock(id=unprefixed(c.id, c.tool), name=c.tool, input=c.input) for c in calls]
        self.model.feed(Turn(blocks=list(blocks)))
        body = self._next_request(f"the results of step {index}")
        self._collect(body, calls, index)

    def _start_run(self, prompt: int) -> None:
        resume = None
        if self.handle is not None:
            closing = Turn(blocks=[TextBlock(text=self._closing_text(prompt))])
            self.model.feed(closing)
            if not self.model.answer_until_exit(self.handle, closing, self.step_timeout_s):
                raise SandboxError("gemini did not end its run when the replayed turn ended")
            resume = "latest"
        text = wire.part_text(self.messages[prompt].get("content"))
        argv = bundle.run_argv(text, resume=resume, model=MODEL)
        self.handle = self.sandbox.start_exec(
            ["bash", "-c", 'exec "$@" </dev/null', "gemini", *argv], workdir=self.cwd, env=bundle.env(PORT)
        )
        self.prompt = prompt
        self.pending: Any = None

    def _closing_text(self, next_prompt: int) -> str:
        for m in reversed(self.messages[:next_prompt]):
            if m.get("type") == "gemini":
                return wire.part_text(m.get("content"))
        return ""

    def _next_request(self, what: str) -> Any:
        assert self.handle is not None
        if self.pending is not None:
            body, self.pending = self.pending, None
            return body
        body = self.model.next_request(self.handle, "gemini", what, self.step_timeout_s)
        self.pending = None
        return body

    def _collect(self, body: Any, calls: list[ToolCall], index: int) -> None:
        contents = body.get("contents") or []
        last = contents[-1] if contents else {}
        responses = {
            p["functionResponse"].get("id"): p["functionResponse"]
            for p in last.get("parts") or []
            if isinstance(p, dict) and isinstance(p.get("functionResponse"), dict)
        }
        for call in calls:
            found = responses.get(unprefixed(call.id, call.tool))
            if found is None:
                raise SandboxError(f"gemini returned no result for {call.id} in step {index}")
            self.fresh[call.id] = session.observation({**found, "id": call.id})
        self.pending = body  # the request that carried the results asks for the next turn

    def clean_home_copy(self, home: Path) -> None:
        for rel in (".gemini/tmp", ".gemini/history"):
            remove_entry(home / rel)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.stop()
        self.model.close()
        # the driven CLI's own session and caches: the continuation starts from the rebuilt session
        self.sandbox.exec(
            ["bash", "-c", 'rm -rf "$HOME/.gemini/tmp" "$HOME/.gemini/history"'],
            workdir="/",
            env={"HOME": bundle.HOME},
            timeout_s=60,
        )
