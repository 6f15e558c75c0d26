"""OpenHands V0 (openhands-ai 1.6.0 event lists): parsing, reruns by the V0 runtime, the cut event list
and the chat prefix; the continuation replays the cut list through ReplayManager, the runtime answering
each replayed action with its rebuilt observation, then lets the agent go on; a boundary prompt is a user
message event appended to the replayed list, which ReplayManager replays as any user message.

Whether the continuation's LLM calls functions natively or in V0's text form (`fn_call_converter`) is
the running version's decision (model and `native_tool_calling`): the companion asks it in the sandbox
before the agent starts, and in the text form renders the first request with the version's own converter.
"""

from __future__ import annotations

import copy
import datetime
import posixpath
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from replayer.adapters.base import (
    COMMAND,
    PATH,
    Adapter,
    Continuation,
    Ended,
    Launch,
    Rebuild,
    Rerunner,
    continued_file,
    copy_continued,
    first_time,
    last_event,
    recorded_tools,
    write_continue_spec,
)
from replayer.adapters.forms import NativeForm
from replayer.adapters.openhands import bundle, v0
from replayer.adapters.openhands import session as conversation
from replayer.adapters.openhands.shell import SHELL_PATH
from replayer.adapters.openhands.v0_rerun import OpenHandsV0Rerunner, companion_argv
from replayer.adapters.sandbox_paths import AGENT_HOME, CONTINUE_SPEC_PATH, PLACEHOLDER_KEY, local_url
from replayer.bridges.chat import ChatPrefixGate
from replayer.floor import cwdinfer
from replayer.floor.errors import PlanRefused, SandboxError, excerpt, last_line
from replayer.floor.io import write_bytes_atomic
from replayer.floor.limits import Budgets
from replayer.floor.results import AgentStatus
from replayer.floor.rundirs import RunDirs
from replayer.floor.trajectory import HeldSession, Observation, ToolCall, ToolKind, Trajectory
from replayer.sandboxes.base import Sandbox

TRAJECTORY = "trajectory.json"
REPLAY = ".replayer/replay.json"
OBSERVATIONS = ".replayer/observations.json"
CONTINUED = ".replayer/continued.json"
PREFIX = ".replayer/prefix.json"
DEFAULT_MAX_STEPS = 100
REQUEST_TIMEOUT_S = 600.0
"""The companion's `request` mode imports openhands and makes the agent (no runtime): ~10 s idle."""
RERUN_TOOLS = {"execute_bash", "str_replace_editor"}
V0_WORKSPACE = "/workspace"
"""Where V0's sandbox mounts the workspace by default (`workspace_mount_path_in_sandbox`)."""
"""What the V0 runtime reruns (CodeActAgent's bash and editor; jupyter and browsing are off in the pinned config)."""


class V0Continuation(Continuation):
    function_calling: bool | None = None
    """`LLM.is_function_calling_active()` of the continuation's LLM in the running version (None until the
    companion was asked, before the agent starts)."""
    request: list[dict[str, Any]] | None = None
    """Function calling off: the first request's messages in the text form, by the version's converter."""
    told_for: tuple[str, str | None] | None = None
    """The model and boundary prompt the facts were told for (None: not told yet)."""


class _RequestAnswer(BaseModel):
    """The companion's `request` line (written in the sandbox: validated, never trusted)."""

    model_config = ConfigDict(extra="forbid")
    type: str
    model: str
    function_calling: bool
    messages: list[dict[str, Any]] | None
    error: str | None


class OpenHandsV0Adapter(Adapter[v0.NativeV0, V0Continuation]):
    continuation_type = V0Continuation
    native_type = v0.NativeV0
    name = bundle.NAME_V0
    oldest_inferred_release = "0.35.0"
    probe_native = "trajectory.json"
    probe_recordings = ("openhands/v0",)
    probe_shell = {"execute_bash": {"command": COMMAND, "security_risk": "LOW"}}
    probe_read = {"str_replace_editor": {"command": "view", "path": PATH, "security_risk": "LOW"}}
    probe_finish = ("finish", {"message": "done"})
    probe_model = "openai/fake-model"  # a bare event list names no LiteLLM model

    forms = (
        NativeForm(
            "event list",
            v0.looks_like_v0,
            "V0 (0.x): an event list, its export or an evaluation output's history",
        ),
    )

    def parse(self, path: Path, task: str | None = None) -> Trajectory:
        return v0.parse(path)

    @classmethod
    def sessions_held(cls, path: Path, first_line: bytes) -> list[HeldSession] | None:
        return v0.sessions_held(path, first_line)

    def first_timestamp(self, trajectory: Trajectory) -> datetime.datetime | None:
        """V0 writes its event times without a zone (the host's local time): read as UTC."""
        return first_time(e.get("timestamp") for e in self.native(trajectory).events)

    def own_text(self, tool: str, text: str) -> str | None:
        return conversation.own_text(text)

    def inferred_cwd(self, trajectory: Trajectory) -> str | None:
        """A list without a command observation records no working_dir: V0's sandbox works in its fixed
        default, /workspace, where the editor's absolute paths are (another folder they all share else)."""
        paths = [
            c.input["path"]
            for s in trajectory.steps
            for c in s.calls
            if c.tool == "str_replace_editor" and isinstance(c.input.get("path"), str)
        ]
        if all(p.startswith(V0_WORKSPACE + "/") for p in paths):
            return V0_WORKSPACE
        return cwdinfer.common_directory(posixpath.dirname(p) for p in paths)

    def classify(self, call: ToolCall, trajectory: Trajectory) -> tuple[ToolKind, str | None]:
        if call.tool in ("finish", "think"):
            return "pure", None
        if call.tool in RERUN_TOOLS:
            return "rerun", None
        return (
            "unknown",
            f"unknown tool {call.tool!r} (rerun by the V0 runtime: only {', '.join(sorted(RERUN_TOOLS))})",
        )

    def sandbox_binds(self, trajectory: Trajectory, dirs: RunDirs) -> dict[str, tuple[Path, bool]]:
        return {AGENT_HOME: (dirs.home, False), **bundle.binds_v0(dirs.work(bundle.WORK))}

    def rerunner(
        self, trajectory: Trajectory, sandbox: Sandbox, dirs: RunDirs, budgets: Budgets
    ) -> OpenHandsV0Rerunner:
        return OpenHandsV0Rerunner(trajectory, sandbox, dirs.work(bundle.WORK), budgets)

    def rebuild(
        self, trajectory: Trajectory, after_step: int, observations: dict[str, Observation], dest: Path
    ) -> Rebuild[V0Continuation]:
        native = self.native(trajectory)
        events = copy.deepcopy(native.events[: native.step_end(after_step)])
        for call_id, fresh in observations.items():
            at = native.observation_of.get(call_id)
            if at is not None and at < len(events) and isinstance(fresh.structured, dict):
                events[at] = {**copy.deepcopy(fresh.structured), "id": events[at].get("id")}
        for step in trajectory.steps[:after_step]:
            if step.message_id.startswith("action-"):
                raise PlanRefused(
                    f"step {step.index} has no tool_call_metadata: its model message is unknown"
                )
        home = dest / "home"
        path = home / TRAJECTORY
        document: Any = {**native.wrapper, "history": events} if native.wrapper is not None else events
        write_bytes_atomic(path, orjson.dumps(document, option=orjson.OPT_INDENT_2))
        # What the continuation replays: the cut list without the system event (the agent makes its own)
        # and without recall actions (the task's recall is made again), as ReplayManager needs it.
        replay = [e for e in events if e.get("action") not in ("system", "recall")]
        write_bytes_atomic(home / REPLAY, orjson.dumps(replay))
        rebuilt = {c: events[i] for c, i in native.observation_of.items() if i < len(events)}
        write_bytes_atomic(home / OBSERVATIONS, orjson.dumps(rebuilt))
        spec = {
            "replay": f"{AGENT_HOME}/{REPLAY}",
            "observations": f"{AGENT_HOME}/{OBSERVATIONS}",
            "save": f"{AGENT_HOME}/{CONTINUED}",
            "shell": SHELL_PATH,
        }
        write_continue_spec(home, spec)
        return Rebuild(
            native_files=[path],
            expected_prefix=v0.to_messages(events),
            agent_home=home,
            continuation=V0Continuation(),
        )

    def continued_prefix(self, result_dir: Path, model: str | None = None) -> list[dict[str, Any]] | None:
        with continued_file(result_dir, TRAJECTORY) as path:
            if path is None:
                return None
            return v0.to_messages(self.native(v0.parse(path)).events)

    def chat_tools(self, native: Path) -> list[dict[str, Any]]:
        # adapters/openhands/data/<V0 version>/: one data folder for both formats
        return list(recorded_tools(bundle.NAME, self.version()))

    def tools_data_name(self) -> str:
        return bundle.NAME

    # continuation -----------------------------------------------------------------------------
    def gate_facts(
        self,
        box: Sandbox,
        trajectory: Trajectory,
        rebuild: Rebuild[V0Continuation],
        model: str | None,
        boundary_prompt: str | None = None,
    ) -> Rebuild[V0Continuation]:
        """Ask the running version, with the continuation's config, whether its LLM calls functions; if not,
        the first request it would send over the rebuilt prefix and the boundary prompt (its converter's
        text form)."""
        assert model and trajectory.cwd
        if rebuild.continuation.told_for == (model, boundary_prompt):  # told by the reruns' companion
            return rebuild
        messages = rebuild.expected_prefix + _prompted(boundary_prompt)
        box.write_file(f"{AGENT_HOME}/{PREFIX}", orjson.dumps(messages))
        argv = companion_argv("request", trajectory.cwd, f"{AGENT_HOME}/{PREFIX}")
        env = self._agent_env(trajectory, model)
        done = box.exec(argv, workdir=trajectory.cwd, env=env, timeout_s=REQUEST_TIMEOUT_S)
        answer = _request_answer(done.stdout, done.stderr, done.exit_code)
        return self._told(rebuild, answer, env, model, boundary_prompt)

    def gate_facts_at_boundary(
        self,
        rerunner: Rerunner,
        trajectory: Trajectory,
        rebuild: Rebuild[V0Continuation],
        model: str | None,
        boundary_prompt: str | None = None,
    ) -> Rebuild[V0Continuation]:
        """The reruns' companion has the version imported and its agent made: it tells the first request
        with the continuation's environment, as `gate_facts`'s `request` process would (one start of the
        version's interpreter less per continuation)."""
        if not isinstance(rerunner, OpenHandsV0Rerunner) or not model:
            return rebuild
        env = self._agent_env(trajectory, model)
        messages = rebuild.expected_prefix + _prompted(boundary_prompt)
        answer = _request_answer_line(rerunner.tell_request(messages, env, REQUEST_TIMEOUT_S))
        return self._told(rebuild, answer, env, model, boundary_prompt)

    def _told(
        self,
        rebuild: Rebuild[V0Continuation],
        answer: _RequestAnswer,
        env: dict[str, str],
        model: str,
        boundary_prompt: str | None,
    ) -> Rebuild[V0Continuation]:
        if answer.error is not None:
            raise PlanRefused(text_form_refusal(self.version(), answer, env["REPLAYER_NATIVE_TOOL_CALLING"]))
        request = None if answer.function_calling else answer.messages
        facts = V0Continuation(
            function_calling=answer.function_calling, request=request, told_for=(model, boundary_prompt)
        )
        return rebuild.model_copy(update={"continuation": facts})

    def gate(self, rebuild: Rebuild[V0Continuation], prompt: str | None, keep_prompt: bool) -> ChatPrefixGate:
        # The agent always sends its own system message first (AgentController._add_system_message, from
        # its prompt templates); a file without a system event has none in the prefix to hold it to.
        # With function calling off, the first request is the prefix in the version's text form.
        # A boundary prompt is the user message ConversationMemory renders after the prefix (the text form
        # has it converted already).
        text = rebuild.continuation.request
        prefix = (
            rebuild.expected_prefix + _prompted(prompt if keep_prompt else None) if text is None else text
        )
        recorded = bool(prefix) and prefix[0].get("role") == "system"
        return ChatPrefixGate(prefix, system_from_agent=not recorded)

    def default_model(self, trajectory: Trajectory) -> str | None:
        # an evaluation output records the LiteLLM route; a bare event list only the served model
        model = v0.recorded_llm_config(self.native(trajectory).wrapper).get("model")
        return model if isinstance(model, str) and model else None

    def continuation_refusal(self, trajectory: Trajectory, model: str | None) -> str | None:
        if not model:
            return "a V0 trajectory names no LiteLLM model; pass --model (e.g. openai/<model>)"
        foreign = v0.foreign_actions(self.native(trajectory).events)
        if foreign:
            # observed: openhands-ai 1.6.0 fails loading the rebuilt list (LLMMalformedActionError)
            return (
                f"the trajectory holds actions upstream OpenHands V0 does not define ({', '.join(foreign)}): "
                "the pinned openhands-ai cannot load them to continue (prepare and the reruns do not need it)"
            )
        return None

    def continue_command(self, trajectory: Trajectory, launch: Launch) -> tuple[list[str], dict[str, str]]:
        assert launch.model and trajectory.cwd
        argv = companion_argv(
            "continue", trajectory.cwd, CONTINUE_SPEC_PATH, str(launch.max_steps or DEFAULT_MAX_STEPS)
        )
        if launch.keep_prompt and launch.prompt is not None:
            argv.append(launch.prompt)
        return argv, {**self._agent_env(trajectory, launch.model), "LLM_BASE_URL": local_url(launch.port)}

    def _agent_env(self, trajectory: Trajectory, model: str) -> dict[str, str]:
        return {
            **bundle.v0_env(),
            "LLM_MODEL": model,
            "LLM_API_KEY": PLACEHOLDER_KEY,
            "REPLAYER_NATIVE_TOOL_CALLING": v0.native_tool_calling(self.native(trajectory).wrapper),
        }

    def continuation_metadata(self, launch: Launch, rebuild: Rebuild[V0Continuation]) -> dict[str, Any]:
        found = rebuild.continuation.function_calling
        mode = None if found is None else ("native" if found else "text (fn_call_converter)")
        return {
            "max_iterations_after_replay": launch.max_steps or DEFAULT_MAX_STEPS,
            "function_calling": mode,
        }

    def reported_status(self, trajectory: Trajectory, stdout: bytes, continued: Path) -> AgentStatus:
        end = last_event(stdout, "exit")
        if end is None:
            return "agent_error"
        if end.get("status") == "finished":
            return "completed"
        if "maximum iteration" in str(end.get("error") or "").lower():
            return "max_steps"
        return "agent_error"

    def finish_continuation(self, ended: Ended[V0Continuation]) -> dict[str, str]:
        return copy_continued(ended.home / CONTINUED, ended.dest, TRAJECTORY, "continued_trajectory")


def _prompted(prompt: str | None) -> list[dict[str, Any]]:
    """The boundary prompt as V0's ConversationMemory renders a user message (native form), if any."""
    return [] if prompt is None else [{"content": [{"type": "text", "text": prompt}], "role": "user"}]


def _request_answer(stdout: bytes, stderr: bytes, exit_code: int | None) -> _RequestAnswer:
    event = last_event(stdout, "request") if exit_code == 0 else None
    answer = _valid_answer(event)
    if answer is None:
        tail = last_line(stderr) or "no output"
        raise SandboxError(
            f"the V0 companion did not tell the first request (exit {exit_code}): {excerpt(tail)}"
        )
    return answer


def _request_answer_line(line: dict[str, Any]) -> _RequestAnswer:
    """The reruns' companion's answer to {"request": ...} (its "error": what it raised telling it)."""
    answer = _valid_answer(line.get("request"))
    if answer is None:
        why = line.get("error") or "a malformed answer"
        raise SandboxError(f"the V0 companion did not tell the first request: {excerpt(str(why))}")
    return answer


def _valid_answer(event: Any) -> _RequestAnswer | None:
    """A `request` answer written in the sandbox, validated: one of messages and error; None if not."""
    try:
        answer = _RequestAnswer.model_validate(event) if event is not None else None
    except ValidationError:
        return None
    if answer is None or (answer.messages is None) == (answer.error is None):
        return None
    return answer


def text_form_refusal(version: str, answer: _RequestAnswer, setting: str) -> str:
    return (
        f"openhands_v0 {version} calls functions in its text form with {answer.model} (native_tool_calling "
        f"{setting}) and its converter refuses the prefix: {excerpt(answer.error, 200)}"
    )
