"""The Adapter protocol every agent module implements, and the per-run tool rerunner it hands out."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import orjson
from pydantic import BaseModel, ConfigDict

from bridges.core import Dialect, Gate
from replayer.io import write_bytes_atomic
from replayer.models import AgentStatus, Budgets, Observation, ToolCall, ToolKind, Trajectory
from replayer.rundirs import RunDirs
from sandboxes.base import Sandbox


def stdout_events(stdout: bytes) -> list[dict[str, Any]]:
    """The JSON objects an agent printed one per line (other lines, such as warnings, are skipped)."""
    events = []
    for line in stdout.splitlines():
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def copy_continued(continued: Path, dest: Path, name: str, key: str) -> dict[str, str]:
    """The continued native file copied as it is to `dest/name` (the result's `continued/`), listed in the
    result's files under `key`; nothing when the agent left no file."""
    if not continued.is_file():
        return {}
    write_bytes_atomic(dest / name, continued.read_bytes())
    return {key: f"continued/{name}"}


class Rebuild(BaseModel):
    """What an adapter's rebuild wrote and what the bridge must require."""

    model_config = ConfigDict(extra="forbid")
    native_files: list[Path]
    """Absolute paths of the rebuilt native session files."""
    expected_prefix: list[dict[str, Any]]
    """The model-visible conversation ending at the boundary, in the provider's wire format."""
    agent_home: Path | None = None
    """The isolated agent home (HOME / CODEX_HOME ...) the continuation runs with."""
    continuation: dict[str, Any] = {}
    """Adapter facts the continuation and its gate need (written to continuation.json)."""


class Launch(BaseModel):
    """What the continuation asks of the agent's command line."""

    model_config = ConfigDict(extra="forbid")
    prompt: str | None
    """The nonce or the boundary prompt; None for an agent that needs no nonce, without a boundary prompt."""
    keep_prompt: bool
    """The prompt is the user's boundary prompt (kept), not a nonce (stripped)."""
    port: int
    """The bridge, on 127.0.0.1 inside the sandbox."""
    model: str | None
    max_steps: int | None


class Rerunner(Protocol):
    """Reruns the calls of one trajectory, in order, with the agent's own tool semantics and state."""

    def run(self, call: ToolCall) -> Observation: ...

    def close(self) -> None:
        """Release what the reruns held (a companion process, a socket alias); called once, always."""
        ...


class Adapter(Protocol):
    """One agent: parse its native format, rerun its tools, rebuild its session, continue it."""

    name: str
    """Key of this agent in the pin file and in results."""
    key_env: str
    """The host variable the upstream key is read from by default."""
    needs_nonce: bool
    """The agent resumes only with a new user prompt (a nonce, stripped by the gate)."""
    takes_task: bool
    """The native format may lack the first prompt, which `task` then supplies (OpenCode's event log)."""
    idle_timeout_s: float
    """Default continuation idle timeout (no output and no bridge traffic)."""
    reruns_own_code: bool
    """The tools are rerun by the agent's own code at the version that runs (False: by the replayer's
    reimplementation of the pinned version's tools)."""
    drives_other_versions: bool
    """Reruns at a version other than the pinned one drive that version's own CLI (the replay model)."""
    oldest_own_version: str | None
    """The oldest version whose own code the adapter drives (None: any); a file of an older version runs
    the pinned one, and the result says so."""
    degradable_tools: bool
    """--allow-degraded may keep the historical result of a call that cannot be rerun (False: a session
    calling any such tool is refused, its tool semantics are the contract)."""

    def detect(self, head: list[Any]) -> bool:
        """Whether the first parsed records of a file belong to this agent's format."""
        ...

    def parse(self, path: Path, task: str | None = None) -> Trajectory:
        """`task` is given only to an adapter that `takes_task`."""
        ...

    def classify(self, call: ToolCall, trajectory: Trajectory) -> tuple[ToolKind, str | None]:
        """How a call is replayed; for "unknown", why it cannot be rerun."""
        ...

    def sandbox_binds(self, trajectory: Trajectory, dirs: RunDirs) -> dict[str, tuple[Path, bool]]:
        """Extra mounts the reruns need (container path -> host path, read-only), besides the workspace."""
        ...

    def rerunner(self, trajectory: Trajectory, sandbox: Sandbox, dirs: RunDirs, budgets: Budgets) -> Rerunner:
        """`dirs`: the run's state folders (the workspace copy is `dirs.workspace_at(trajectory.cwd)`)."""
        ...

    def rebuild(
        self, trajectory: Trajectory, after_step: int, observations: dict[str, Observation], dest: Path
    ) -> Rebuild:
        """Write the native session prefix ending after step `after_step`, with `observations` in place.

        `dest/home` is the agent home; reruns may already have written side files there."""
        ...

    def continued_prefix(self, result_dir: Path) -> list[dict[str, Any]] | None:
        """The continued conversation (the boundary's prefix and what followed) in this agent's wire form,
        from the cleaned continued native session; None when the job did not continue."""
        ...

    def chat_tools(self, native: Path) -> list[dict[str, Any]]:
        """The tool definitions the pinned CLI offers with this rebuilt session, in chat form (recorded data)."""
        ...

    # continuation -------------------------------------------------------------------------
    def dialect(self) -> Dialect:
        """The model protocol the agent speaks (the bridge's key header and error shape)."""
        ...

    def gate(self, rebuild: Rebuild, prompt: str | None, keep_prompt: bool) -> Gate:
        """The pure prefix gate for a continuation resumed with `prompt`."""
        ...

    def default_model(self, trajectory: Trajectory) -> str | None: ...

    def continuation_refusal(self, trajectory: Trajectory, model: str | None) -> str | None:
        """Why this trajectory cannot be continued (checked before any container starts), or None."""
        ...

    def continue_command(self, trajectory: Trajectory, launch: Launch) -> tuple[list[str], dict[str, str]]:
        """argv and environment of the pinned agent inside the sandbox."""
        ...

    def continuation_metadata(self, launch: Launch) -> dict[str, Any]:
        """Facts about how the continuation runs, recorded in the result (e.g. who enforces the step budget)."""
        ...

    def reported_status(self, trajectory: Trajectory, stdout: bytes, continued: Path) -> AgentStatus:
        """The outcome the agent's own output reports, once it exited with code 0 (`continued`: the folder
        of what `finish_continuation` wrote)."""
        ...

    def finish_continuation(
        self,
        trajectory: Trajectory,
        rebuild: Rebuild,
        home: Path,
        dest: Path,
        prompt: str | None,
        keep_prompt: bool,
        sandbox: Sandbox,
    ) -> dict[str, str]:
        """Copy the continued native session out of `home` into `dest`, cleaned of the envelope."""
        ...
