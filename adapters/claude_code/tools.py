"""Claude Code tool reruns (placeholder until the rendering rules are in)."""

from __future__ import annotations

from replayer.io import Workspace
from replayer.models import Budgets, Observation, ToolCall
from sandboxes.base import Sandbox

RERUN_TOOLS = frozenset({"Bash", "Read", "Write", "Edit", "MultiEdit"})
PURE_TOOLS = frozenset({"TodoWrite", "TaskCreate", "TaskGet", "TaskList", "TaskUpdate"})


class ClaudeCodeRerunner:
    def __init__(self, sandbox: Sandbox, workspace: Workspace, budgets: Budgets):
        self.sandbox = sandbox
        self.workspace = workspace
        self.budgets = budgets

    def run(self, call: ToolCall) -> Observation:
        raise NotImplementedError(call.tool)
