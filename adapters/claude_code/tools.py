"""Which Claude Code tools are rerun, which are pure, and the per-run rerunner that dispatches them."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from adapters import sandbox_paths
from adapters.claude_code import render
from adapters.claude_code.bash import BashTool
from adapters.claude_code.files import FileTools, ShellState
from adapters.sandbox_paths import AGENT_HOME
from replayer.errors import ConfinementError, excerpt
from replayer.io import Workspace
from replayer.models import Budgets, Observation, ToolCall
from replayer.pins import pinned_version
from sandboxes.base import Sandbox

DATA_MOUNT = "/opt/replayer/claude_code-data"
FILE_TOOLS = frozenset({"Read", "Write", "Edit"})
RERUN_TOOLS = frozenset({"Bash", *FILE_TOOLS, *render.NOT_OFFERED_HINTS})
"""Not-offered tools are 'rerun' too: the pinned CLI answers them with a fixed error, reproduced exactly."""
PURE_TOOLS = frozenset({"TaskCreate", "TaskGet", "TaskList", "TaskUpdate"})
"""Agent-internal state only (the task list); their historical result is kept."""
_INHERITED_ENV_SKIP = ("ANTHROPIC_", "PWD=", "SHLVL=", "HOSTNAME=", "_=", "OLDPWD=")


def data_dir(version: str) -> Path:
    return Path(__file__).resolve().parent / "data" / version


def snapshot_path(version: str) -> Path:
    return data_dir(version) / "shell-snapshot.sh"


def agent_mount(version: str) -> str:
    return sandbox_paths.agent_mount("claude_code", version)


def bash_env(version: str, session_id: str) -> dict[str, str]:
    """The environment the pinned CLI gives its Bash commands (recorded), for this session."""
    env = {}
    for line in (data_dir(version) / "bash-env.txt").read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith(_INHERITED_ENV_SKIP):
            env[key] = value
    env["CLAUDE_CODE_SESSION_ID"] = session_id
    return env


class _BashInput(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    command: str
    timeout: int | float | None = None
    description: str | None = None
    run_in_background: bool | None = None


class _ReadInput(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    file_path: str
    offset: int | None = None
    limit: int | None = None


class _WriteInput(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    file_path: str
    content: str


class _EditInput(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    file_path: str
    old_string: str
    new_string: str
    replace_all: bool | None = None


_INPUTS: dict[str, type[BaseModel]] = {
    "Bash": _BashInput,
    "Read": _ReadInput,
    "Write": _WriteInput,
    "Edit": _EditInput,
}


def _check_input(call: ToolCall) -> None:
    """A historical call whose input the CLI's schema rejects is not rerun: the CLI answers it with an
    input validation error whose exact text is not reproduced here (refused; --allow-degraded keeps it)."""
    try:
        _INPUTS[call.tool].model_validate(call.input)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = str(first["loc"][0]) if first["loc"] else "input"
        raise ConfinementError(
            f"its input field {where!r} is invalid ({first['msg']}; got {excerpt(first.get('input'))})"
        ) from None


class ClaudeCodeRerunner:
    def __init__(self, sandbox: Sandbox, workspace: Workspace, budgets: Budgets, session_id: str, cwd: str):
        version = pinned_version("claude_code")  # the semantics reimplemented here are the pinned version's
        self.state = ShellState(original_cwd=cwd, cwd=cwd)
        self.files = FileTools(workspace, self.state, budgets)
        self.bash = BashTool(
            sandbox,
            workspace,
            self.state,
            budgets,
            session_id=session_id,
            snapshot=f"{DATA_MOUNT}/shell-snapshot.sh",
            env=bash_env(version, session_id),
            home=AGENT_HOME,
        )

    def run(self, call: ToolCall) -> Observation:
        if call.tool in render.NOT_OFFERED_HINTS:
            return render.not_offered(call.tool)
        _check_input(call)
        if call.tool == "Bash":
            return self.bash.run(call.input, call.historical)
        if call.tool == "Read":
            return self.files.read(call.input)
        if call.tool == "Write":
            return self.files.write(call.input)
        if call.tool == "Edit":
            return self.files.edit(call.input)
        raise AssertionError(f"{call.tool} is not a rerun tool")

    def close(self) -> None:
        """Nothing outlives the calls: every Bash call is its own process in the sandbox."""
