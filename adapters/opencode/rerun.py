"""Rerun a session's tool calls with the pinned CLI itself, fed the historical turns by the replay model.

The prefix's user prompts start `opencode run` (a fresh session, then `--session` for later prompts);
each main request the CLI sends is answered with the next historical step's tool calls (only those
the replay reruns), and the CLI's own `tool_use` events carry the fresh results: its output text,
metadata and error exactly as that version renders them, with its session state (files read before
an edit) built up as in the original run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.base import StepwiseRerunner, no_request, stdout_events
from replayer.adapters.opencode import bundle, tool_kinds
from replayer.adapters.opencode import home as agent_home
from replayer.adapters.opencode.replay_model import Answer, ReplayModel
from replayer.adapters.opencode.session import Native
from replayer.adapters.sandbox_paths import OPENCODE_REPLAY_PORT, local_url
from replayer.floor import errors
from replayer.floor.errors import SandboxError, excerpt
from replayer.floor.io import remove_alias, remove_entry, short_alias
from replayer.floor.trajectory import Observation, Trajectory
from replayer.sandboxes.base import RunningExec, Sandbox

PORT = OPENCODE_REPLAY_PORT
WORK_MOUNT = "/run/replayer-opencode"
SOCKET = "replay-model.sock"
ERRORS_ON_STDERR = ("--print-logs", "--log-level", "ERROR")
"""The CLI's logged errors on stderr, nothing else: an error its server hides from `run` behind "Unexpected
server error" (the stdout event) is logged with its cause (a model the release retired: "Model not found"),
and the log file in the home may not have it yet when the CLI exits. Every release since 1.1 takes both."""
_START_TIMEOUT_S = 120.0
_POLL_S = 0.05


def text_of(message: dict[str, Any]) -> str:
    return "".join(
        p.get("text", "") for p in message["parts"] if p.get("type") == "text" and not p.get("synthetic")
    )


def provider_model(native: Native) -> tuple[str, str]:
    """The provider and model of the session's last assistant message (the tool set depends on them)."""
    for message in reversed(native.messages):
        info = message["info"]
        if info.get("role") == "assistant" and info.get("providerID") and info.get("modelID"):
            return str(info["providerID"]), str(info["modelID"])
        model = info.get("model") or {}
        if info.get("role") == "user" and model.get("providerID") and model.get("modelID"):
            return str(model["providerID"]), str(model["modelID"])
    model = native.info.get("model") or {}
    return str(model.get("providerID") or "replayer"), str(model.get("id") or "replayed-model")


def logged_error(stderr: bytes) -> str | None:
    """The last error the CLI logged (`ERRORS_ON_STDERR`), as its log says it."""
    found = errors.logged_error(stderr.decode(errors="replace"))
    return f"its log: {excerpt(found, 300)}" if found else None


class OpenCodeRerunner(StepwiseRerunner):
    name = "opencode"

    def __init__(
        self, trajectory: Trajectory, sandbox: Sandbox, work: Path, home: Path, step_timeout_s: float
    ):
        assert trajectory.cwd
        super().__init__(trajectory)
        self.native = trajectory.native_as(Native)
        self.sandbox = sandbox
        self.cwd = trajectory.cwd
        self.step_timeout_s = step_timeout_s
        self.turn_of = self._turns()
        provider, model = provider_model(self.native)
        agent_home.place_config(home, provider, model, local_url(PORT))
        self.alias = short_alias(work)
        self.model = ReplayModel(self.alias / SOCKET, str(self.native.info.get("title") or ""))
        sandbox.forward_port(PORT, f"{WORK_MOUNT}/{SOCKET}")
        self.handle: RunningExec | None = None
        self.parts: dict[str, dict[str, Any]] = {}
        """callID -> the last tool part the current run printed."""
        self.turn: int | None = None
        self.session: str | None = None

    def _turns(self) -> dict[int, int]:
        """Step index -> index of the user message whose run it belongs to."""
        step_at = {at: n for n, at in enumerate(self.native.step_messages, start=1)}
        user, out = -1, {}
        for at, message in enumerate(self.native.messages):
            if message["info"].get("role") == "user":
                user = at
            elif at in step_at:
                out[step_at[at]] = user
        return out

    def run_step(self, index: int) -> None:
        step = self.steps[index]
        turn = self.turn_of[index]
        if turn != self.turn:
            self._start_run(turn)
        calls = [c for c in step.calls if tool_kinds.classify(c)[0] == "rerun"]
        self._next_request(f"step {index}")
        message = self.native.messages[self.native.step_messages[index - 1]]
        args = [(c.id, c.tool, orjson.dumps(c.input).decode()) for c in calls]
        self.model.answer(Answer(text=text_of(message), calls=args))
        self._collect({c.id for c in calls}, index)

    def _start_run(self, turn: int) -> None:
        if self.handle is not None:
            self._next_request("the end of a run")
            self.model.answer(Answer(text="(replayed run ends here)"))
            if not self.handle.wait(self.step_timeout_s):
                raise SandboxError("opencode did not end its run when the replayed turn ended")
            self._take_session()
        prompt = text_of(self.native.messages[turn]) if turn >= 0 else ""
        env = {**bundle.base_env(), "REPLAYER_PROMPT": prompt}
        argv = bundle.with_stdin_prompt([*bundle.run_argv(self.session), *ERRORS_ON_STDERR])
        self.handle = self.sandbox.start_exec(argv, workdir=self.cwd, env=env)
        self.parts = {}
        self.turn = turn

    def _take_session(self) -> None:
        if self.session is None and self.handle is not None:
            first = next(iter(stdout_events(bytes(self.handle.stdout))), {})
            self.session = first.get("sessionID")

    def _next_request(self, what: str) -> dict[str, Any]:
        assert self.handle is not None
        body = self.handle.await_item(self.model.requests, _START_TIMEOUT_S)
        if body is None:
            raise no_request(self.handle, "opencode", what, logged_error(bytes(self.handle.stderr)))
        return body

    def _take(self, lines: bytes) -> None:
        for event in stdout_events(lines):
            part = event.get("part")
            if event.get("type") == "tool_use" and isinstance(part, dict) and "callID" in part:
                self.parts[part["callID"]] = part

    def _collect(self, call_ids: set[str], index: int) -> None:
        assert self.handle is not None

        def done(lines: bytes) -> bool:
            self._take(lines)
            return call_ids <= set(self.parts)

        if not self.handle.await_lines(done, self.step_timeout_s * max(len(call_ids), 1)):
            missing = ", ".join(sorted(call_ids - set(self.parts)))
            raise SandboxError(f"opencode returned no result for {missing} in step {index}: {self._tail()}")
        self._take_session()
        for call_id in call_ids:
            state = self.parts[call_id]["state"]
            failed = state.get("status") == "error"
            content = str(state.get("error") if failed else state.get("output", ""))
            self.fresh[call_id] = Observation(content=content, is_error=failed, structured=state)

    def _tail(self) -> str:
        assert self.handle is not None
        return self.handle.last_stderr_line()

    def clean_home_copy(self, home: Path) -> None:
        for rel in agent_home.STORE_PATHS:
            remove_entry(home / rel)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.stop()
        try:
            self.sandbox.stop_forward(PORT)  # it listens no longer when the continuation starts
        finally:
            self.model.close()
        (self.alias / SOCKET).unlink(missing_ok=True)
        remove_alias(self.alias)
        # The rebuilt session is imported into a new store; the rerun's goes, inside the sandbox (the home
        # is the sandbox's: no host process opens it), with its WAL (never replayed into the new one).
        agent_home.remove_store(self.sandbox)
