"""The fork as `replayer.fork` made it before boundary clones, for `python -m bench fork` to time side by
side: a process started at the run's turn (the fork's imports, the trajectory loaded), a fresh state with
copies of the boundary's workspace and home, a container started with an exec that made its run
directory. Prints `ready` once the container is, then waits for its stdin to close and cleans up.

`python -m bench.fork_before TRAJECTORY BOUNDARY IMAGE FALLBACK_DIR`
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import replayer.pipeline.fork  # noqa: F401  (the imports a fork process paid before it could do anything)
from replayer.floor.limits import SandboxLimits
from replayer.floor.rundirs import RunDirs
from replayer.pipeline.boundary import copy_places
from replayer.pipeline.engine import load, pins_for
from replayer.sandboxes.docker import RUN_DIR, DockerSandbox, connect
from replayer.sandboxes.quota import StateDir


def main(trajectory: str, boundary: str, image: str, fallback: str) -> None:
    adapter, traj = load(Path(trajectory))
    pins_for(adapter)
    assert traj.cwd
    limits = SandboxLimits()
    state = StateDir.create(limits.disk_bytes, fallback_parent=Path(fallback))
    copy_places(Path(boundary), state.path, limits)
    (state.path / "bridge").mkdir()
    dirs = RunDirs(root=state.path)
    binds = {traj.cwd: (dirs.workspace, False), **adapter.sandbox_binds(traj, dirs)}
    box = DockerSandbox.start(
        connect(), image, binds=binds, workdir=traj.cwd, run_id=f"bench-before-{uuid.uuid4().hex[:6]}"
    )
    box.exec(["mkdir", "-p", RUN_DIR], workdir="/", timeout_s=30)  # what every start did before
    print("ready", flush=True)
    sys.stdin.read()
    box.stop()
    state.remove()


if __name__ == "__main__":
    main(*sys.argv[1:5])
