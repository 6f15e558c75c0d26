"""Claude Code: session JSONL parsing, tool reruns with the pinned CLI's semantics, native rebuild."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from adapters.base import Rebuild
from adapters.claude_code import chain, session, wire
from adapters.claude_code.tools import PURE_TOOLS, RERUN_TOOLS, ClaudeCodeRerunner
from replayer.io import Workspace
from replayer.models import Budgets, Observation, ToolCall, ToolKind, Trajectory
from sandboxes.base import Sandbox


class ClaudeCodeAdapter:
    name = "claude_code"

    def detect(self, head: list[Any]) -> bool:
        return chain.looks_like_claude_code(head)

    def parse(self, path: Path) -> Trajectory:
        return session.parse(path)

    def classify(self, call: ToolCall, agent_version: str | None) -> ToolKind:
        if call.tool in RERUN_TOOLS:
            return "rerun"
        if call.tool in PURE_TOOLS:
            return "pure"
        return "unknown"

    def rerunner(self, trajectory: Trajectory, sandbox: Sandbox, workspace: Workspace, budgets: Budgets) -> ClaudeCodeRerunner:
        return ClaudeCodeRerunner(sandbox, workspace, budgets)

    def rebuild(
        self, trajectory: Trajectory, after_step: int, observations: dict[str, Observation], dest: Path
    ) -> Rebuild:
        native: session.Native = trajectory._native
        items = session.with_observations(session.prefix_items(trajectory, after_step), observations, native.repaired)
        home = dest / "home"
        path = session.write_prefix(trajectory, items, home)
        return Rebuild(native_files=[path], expected_prefix=wire.to_messages(items), agent_home=home)
