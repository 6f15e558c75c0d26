"""The pinned Codex CLI: where it and its recorded data live, and which of its tools are rerun."""

from __future__ import annotations

from pathlib import Path

from replayer.adapters import sandbox_paths
from replayer.adapters.sandbox_paths import AGENT_HOME
from replayer.floor import bundles
from replayer.floor.pins import load_pins, pinned_version

NAME = "codex"
_TRIPLE = "x86_64-unknown-linux-musl"
BINARY_PLACES = (
    *bundles.PLACES,
    f"vendor/{_TRIPLE}/bin/{{c}}",
    f"vendor/{_TRIPLE}/codex/{{c}}",
    f"bin/{{c}}-{_TRIPLE}",
)
"""Where Codex releases put the native binary: >= 0.133 `vendor/<triple>/bin`, 0.42-0.132
`vendor/<triple>/codex`, 0.20-0.40 `bin/codex-<triple>`."""


def _runs_javascript(package: Path) -> bool:
    """A TypeScript-era launcher (0.1.x) runs dist/cli.js unless told to use a native binary."""
    return (package / "dist" / "cli.js").is_file() and not (package / "bin" / "use-native").exists()


def cli(at: str | None = None) -> bundles.Cli:
    """The CLI of Codex at `at` (default: the version that runs) inside its bundle."""
    return bundles.cli_path(NAME, at or version(), BINARY_PLACES, _runs_javascript)


CODEX_HOME = f"{AGENT_HOME}/.codex"
DATA = Path(__file__).resolve().parent / "data"

RERUN_TOOLS = {"exec_command", "apply_patch"}
DRIVEN_TOOLS = RERUN_TOOLS | {
    "write_stdin",
    "shell",
    "shell_command",
    "read_file",
    "list_dir",
    "grep_files",
    "view_image",
}
"""The CLI's built-in tools across versions (`shell` with an argv array until about 0.6x,
`shell_command`, the experimental file tools): a driven CLI of a version reruns its own."""
WINDOWS_SHELL_TOOLS = {"shell", "shell_command", "exec_command", "write_stdin"}
"""The shell tools of a session recorded on Windows: Codex ran their commands in PowerShell (the shell its
`<environment_context>` names there), which no Linux container runs; kept as recorded with --allow-degraded.
Its `apply_patch` and file tools name the mapped paths and rerun."""
WINDOWS_SHELL_REASON = (
    "a PowerShell command recorded on Windows (the container has no PowerShell to rerun it)"
)
SUBAGENT_TOOLS = {"spawn_agent", "send_input", "wait_agent", "close_agent", "resume_agent"}
"""The multi-agent tools (codex-rs feature `multi_agent`, on by default in 0.118): never rerun, since a rerun
would start subagents whose own model requests no rollout of this thread holds."""
CODE_MODE_TOOLS = {"exec", "wait", "exec_wait"}
"""Code mode's freeform tools (codex-rs `tools/code_mode`, 0.14x): `exec` runs a JavaScript script in the CLI's
isolated V8 runtime that calls the nested tools itself (`await tools.exec_command(...)`), `wait` (`exec_wait`
in some releases) collects a script that yielded. The rollout holds the script and its output items, not the
nested calls, so no call of its can be rerun one by one: unknown tools (kept as recorded with --allow-degraded)."""
CODE_MODE_REASON = (
    "a code-mode script (the CLI runs its JavaScript, which calls the nested tools; the rollout records "
    "no nested call to rerun)"
)
PURE_TOOLS = {"update_plan", "get_goal", "create_goal", "update_goal", "request_user_input"}
"""Their output depends on nothing outside the conversation: the historical one is kept (`request_user_input`'s
is the user's own answer, which no rerun can give again)."""


def version() -> str:
    return load_pins().agents[NAME].version


def agent_mount(at: str | None = None) -> str:
    """Where the bundle of `at` (default: the version that runs) is mounted in the sandbox."""
    return sandbox_paths.agent_mount(NAME, at or version())


def env_path(version: str) -> Path:
    return DATA / version / "exec-env.txt"


def exec_env(thread_id: str) -> dict[str, str]:
    """The environment the pinned CLI gives exec_command commands (recorded), for this thread."""
    path = env_path(pinned_version(NAME))  # the reimplemented exec follows the pinned version
    env = dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    for name in ("CODEX_THREAD_ID", "CODEX_SESSION_ID"):
        if name in env:
            env[name] = thread_id
    env.pop("CODEX_TOOL_CALL_ID", None)  # per call
    return env
