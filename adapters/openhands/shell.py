"""The agent's shell state at the boundary (V1 and V0): the working directory, the exported variables the
prefix set or unset and the last exit status, kept in the agent home for the continuation's fresh shell.

Both versions run the agent's commands in one persistent shell, so a `cd` or `export` of the prefix is in
effect for the agent's next command. The reruns keep one shell too, but the continuation starts a new one:
its companion gives that shell this state before the agent acts (companion/shell_state.py). The state is
taken from the rerun's shell where a replay leaves a boundary: when the reruns end (`close`, written by
the companion into the live home, which no host process opens) and, for a replay passing several
boundaries, in each boundary's host copy of the home (`clean_home_copy`, the home as `close` leaves it).
The rebuilt home starts from either, so every continuation of the boundary (standalone, forked from a
snapshot) finds it.
"""

from __future__ import annotations

from pathlib import Path

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from replayer.adapters.companion import STEP_MARGIN_S, StepRerunner
from replayer.adapters.sandbox_paths import AGENT_HOME
from replayer.floor.errors import ConfinementError, SandboxError
from replayer.floor.io import remove_entry, write_bytes_atomic
from replayer.floor.trajectory import Trajectory
from replayer.sandboxes.base import Sandbox

SHELL_FILE = ".replayer/shell.json"
"""The boundary's shell state, in the agent home (absent: the shell is as it started)."""
SHELL_PATH = f"{AGENT_HOME}/{SHELL_FILE}"


class ShellState(BaseModel):
    """What the prefix changed in its shell (the companion's answer: validated, never trusted)."""

    model_config = ConfigDict(extra="forbid")
    cwd: str | None
    """The working directory, when it is not the one the shell started in."""
    status: int
    """`$?` before the agent's next command."""
    set: dict[str, str]
    """Exported variables the prefix added or changed."""
    unset: list[str]
    """Exported variables of the shell's start the prefix unset."""


class ShellRerunner(StepRerunner):
    """A companion rerunner whose companion answers `{"shell": PATH or null}` with the rerun shell's
    changes (`{"shell": ShellState or null}`), writing them to PATH in the sandbox when given."""

    def __init__(
        self, trajectory: Trajectory, sandbox: Sandbox, work: Path, argv: list[str], env: dict[str, str]
    ):
        super().__init__(trajectory, sandbox, work, argv, env)
        self.timeout_s = STEP_MARGIN_S
        """How long one command of the companion may take (subclasses: the command budget added)."""
        self.stepped = False
        """A step ran: the shell may differ from its start."""
        self.failed = False
        """A step failed: the replay ends without a boundary, and the companion may be gone."""

    def run_step(self, index: int) -> None:
        self.stepped = True
        try:
            super().run_step(index)
        except ConfinementError:
            raise
        except BaseException:
            self.failed = True
            raise

    def clean_home_copy(self, home: Path) -> None:
        if not self.stepped:
            return
        state = self._shell(None)
        if state is None:
            remove_entry(home / SHELL_FILE)
        else:
            (home / SHELL_FILE).parent.mkdir(parents=True, exist_ok=True)
            write_bytes_atomic(
                home / SHELL_FILE, orjson.dumps(state.model_dump(), option=orjson.OPT_INDENT_2)
            )

    def close(self) -> None:
        try:
            if self.stepped and not self.failed:
                self._shell(SHELL_PATH)
        finally:
            super().close()

    def _shell(self, path: str | None) -> ShellState | None:
        answer = self.companion.request({"shell": path or True}, self.timeout_s, "the shell state")
        if "error" in answer:
            raise SandboxError(
                f"{self.name} could not take the shell state at the boundary: {answer['error']}"
            )
        try:
            raw = answer["shell"]
            return None if raw is None else ShellState.model_validate(raw)
        except (KeyError, ValidationError) as exc:
            raise SandboxError(
                f"the {self.name} companion's shell state is malformed: {type(exc).__name__}"
            ) from None
