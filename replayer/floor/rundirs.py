"""The run's state folders, laid out once by the engine and handed to the adapters (no adapter finds a
folder by walking up from another)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from replayer.floor.io import Workspace


class RunDirs(BaseModel):
    """The state directory of one run: the workspace copy mounted at the trajectory's cwd, the isolated
    agent home, the bridge's socket folder, and a folder per adapter-private use (a companion's socket,
    a replay model's)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    root: Path

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def bridge(self) -> Path:
        """The bridge's unix socket folder (mounted at continue_run.BRIDGE_MOUNT)."""
        return self.root / "bridge"

    def work(self, name: str) -> Path:
        """An adapter's own folder beside the workspace and the home, made on first use."""
        if not name or "/" in name or name in {".", "..", "workspace", "home", "bridge"}:
            raise ValueError(f"{name!r} is not a work folder name")
        path = self.root / name
        path.mkdir(exist_ok=True)
        return path

    def workspace_at(self, cwd: str) -> Workspace:
        """The workspace copy as the sandbox sees it, at `cwd`."""
        return Workspace(self.workspace, cwd)
