"""Claude Code: session JSONL parsing, tool reruns by the CLI itself (driven), native rebuild."""

from __future__ import annotations

import posixpath
from pathlib import Path
from typing import Any

from replayer.adapters.base import (
    COMMAND,
    PATH,
    Adapter,
    Continuation,
    Ended,
    Launch,
    Rebuild,
    continued_file,
)
from replayer.adapters.claude_code import bundle, chain, continue_launch, session, wire
from replayer.adapters.claude_code import rerun as driven
from replayer.adapters.claude_code.gate import ClaudeCodeGate
from replayer.adapters.forms import NativeForm
from replayer.adapters.sandbox_paths import AGENT_HOME
from replayer.bridges.anthropic import AnthropicDialect, tools_to_chat
from replayer.bridges.sidecalls import PROBE, SideCall
from replayer.floor import bundles
from replayer.floor.divergence import COMMON
from replayer.floor.limits import Budgets
from replayer.floor.pins import load_pins, release
from replayer.floor.results import AgentStatus
from replayer.floor.rundirs import RunDirs
from replayer.floor.trajectory import Observation, ToolCall, ToolKind, Trajectory
from replayer.sandboxes.base import Sandbox

_TOKEN_CAP_MARKS = ("[Truncated: PARTIAL view", "exceeds maximum allowed tokens")


class ClaudeCodeContinuation(Continuation):
    session_id: str | None
    prefix_last_was_string: bool
    """The prefix ends with a user message whose content is a string (the nonce is appended to it)."""
    background_calls: list[str] = []
    """Bash calls of the prefix the CLI moved to the background."""


SMALL_MODELS = (
    (release("2.0.0"), "claude-3-5-haiku-20241022"),
    (release("2.1.0"), "claude-haiku-4-5-20251001"),
)
"""(first release not using it, the small model): the model Claude Code sends its titles, summaries and
checks to (no tools) by default, as the recordings of each version show (tests/fixtures/claude_code/versions:
1.0.x name claude-3-5-haiku-20241022, 2.0.x claude-haiku-4-5-20251001); the 2.1.x recordings send none."""


class ClaudeCodeAdapter(Adapter[session.Native, ClaudeCodeContinuation]):
    name = "claude_code"
    continuation_type = ClaudeCodeContinuation
    native_type = session.Native
    key_env = "ANTHROPIC_API_KEY"
    needs_nonce = True
    side_calls = (
        PROBE,  # HEAD / before the first request
        SideCall(name="count_tokens", path=r"/v1/messages/count_tokens"),
        # titles, summaries, warm-ups and policy checks: the small model, no tools (32000 on 2.1.x)
        SideCall(name="small-model", path=r"/v1/messages", tools=False, max_tokens=32_000),
        # a sub-agent's conversation (the Agent/Task tool): tools, a main-thread model's output
        SideCall(name="sub-agent", path=r"/v1/messages", tools=True, max_tokens=128_000),
    )
    main_thread = staticmethod(wire.main_thread)
    output_normalizers = (*COMMON, "random_ids")
    walk_order_tools = frozenset({"Glob", "Grep"})
    probe_native = "session.jsonl"
    probe_recordings = ("claude_code/single", "claude_code/versions/*/probe")
    probe_shell = {"Bash": {"command": COMMAND, "description": "Probe command"}}
    probe_read = {"Read": {"file_path": PATH}}

    forms = (
        NativeForm("session", chain.looks_like_claude_code, "every release: ~/.claude/projects/*/ID.jsonl"),
    )

    def parse(self, path: Path, task: str | None = None) -> Trajectory:
        return session.parse(path)

    def classify(self, call: ToolCall, trajectory: Trajectory) -> tuple[ToolKind, str | None]:
        if call.tool in bundle.PURE_TOOLS:
            return "pure", None
        if call.tool not in bundle.RERUN_TOOLS:
            return "unknown", f"unknown tool {call.tool!r}"
        if call.tool in bundle.FILE_TOOLS:
            path = str(call.input.get("file_path", ""))
            cwd = (trajectory.cwd or "/").rstrip("/")
            if path.startswith("/") and not (posixpath.normpath(path) + "/").startswith(cwd + "/"):
                return "unknown", f"{call.tool} of {path}, outside the workspace {trajectory.cwd}"
        historical = call.historical.content if call.historical else ""
        if (
            call.tool == "Read"
            and isinstance(historical, str)
            and any(m in historical for m in _TOKEN_CAP_MARKS)
        ):
            return (
                "unknown",
                "Read hit the CLI's token cap, which the model API counted (not reproducible offline)",
            )
        return "rerun", None

    def sandbox_binds(self, trajectory: Trajectory, dirs: RunDirs) -> dict[str, tuple[Path, bool]]:
        pins = load_pins()
        version = pins.agents[self.name].version
        binds = {
            AGENT_HOME: (dirs.home, False),
            bundle.agent_mount(version): (pins.bundle_dir(self.name), True),
            driven.WORK_MOUNT: (dirs.work("claude-driven"), False),
        }
        if bundles.cli_path(self.name, version).needs_node:  # 2.1.112 and older: cli.js
            binds[bundles.NODE_MOUNT] = (bundles.host_node(), True)
        return binds

    def rerunner(
        self, trajectory: Trajectory, sandbox: Sandbox, dirs: RunDirs, budgets: Budgets
    ) -> driven.DrivenRerunner:
        work = dirs.work("claude-driven")
        return driven.DrivenRerunner(
            trajectory, sandbox, work, budgets, continue_launch.recorded_model(trajectory)
        )

    def rebuild(
        self, trajectory: Trajectory, after_step: int, observations: dict[str, Observation], dest: Path
    ) -> Rebuild[ClaudeCodeContinuation]:
        native = self.native(trajectory)
        items = session.with_observations(
            session.prefix_items(trajectory, after_step), observations, native.repaired
        )
        home = dest / "home"
        path = session.write_prefix(trajectory, items, home)
        last_user = next((r for r in reversed(items) if r.get("type") == "user"), None)
        last_is_string = last_user is not None and isinstance(
            last_user.get("message", {}).get("content"), str
        )
        return Rebuild(
            native_files=[path],
            expected_prefix=wire.to_messages(
                wire.as_loaded(items, session.prefix_leaf(native, items), self.version()),
                self.version(),
                continue_launch.recorded_model(trajectory),
            ),
            agent_home=home,
            continuation=ClaudeCodeContinuation(
                session_id=trajectory.session_id,
                prefix_last_was_string=last_is_string,
                background_calls=session.background_calls(items),
            ),
        )

    def continued_prefix(self, result_dir: Path, model: str | None = None) -> list[dict[str, Any]] | None:
        with continued_file(result_dir, "session.jsonl") as path:
            if path is None:
                return None
            continued = session.parse(path)
            model = model or continue_launch.recorded_model(continued)
            return wire.to_messages(self.native(continued).items, self.version(), model)

    def chat_tools(self, native: Path) -> list[dict[str, Any]]:
        return tools_to_chat(super().chat_tools(native))

    def dialect(self) -> AnthropicDialect:
        return AnthropicDialect()

    def gate(
        self, rebuild: Rebuild[ClaudeCodeContinuation], prompt: str | None, keep_prompt: bool
    ) -> ClaudeCodeGate:
        assert prompt is not None
        return ClaudeCodeGate(
            rebuild.expected_prefix,
            prompt,
            keep_prompt=keep_prompt,
            prefix_last_was_string=rebuild.continuation.prefix_last_was_string,
            background_calls=frozenset(rebuild.continuation.background_calls),
        )

    def default_model(self, trajectory: Trajectory) -> str | None:
        return continue_launch.recorded_model(trajectory)

    def side_call_models(self, version: str) -> tuple[str, ...]:
        for last, model in SMALL_MODELS:
            if release(version) < last:
                return (model,)
        return ()

    def continue_command(self, trajectory: Trajectory, launch: Launch) -> tuple[list[str], dict[str, str]]:
        assert launch.prompt is not None
        return continue_launch.command(trajectory, launch.prompt, launch.port, launch.model)

    def finish_continuation(self, ended: Ended[ClaudeCodeContinuation]) -> dict[str, str]:
        prompt, keep_prompt = ended.launch.prompt, ended.launch.keep_prompt
        assert prompt is not None
        native = ended.rebuild.native_files[0]
        return continue_launch.finish(ended.trajectory, native, ended.home, ended.dest, prompt, keep_prompt)

    def reported_status(self, trajectory: Trajectory, stdout: bytes, continued: Path) -> AgentStatus:
        return "agent_error" if continue_launch.reported_failure(stdout) else "completed"
