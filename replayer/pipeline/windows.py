"""Sessions recorded on Windows: the replay reads a copy of the file whose Windows paths are in their Git
Bash form (`replayer/floor/winpaths.py`), so the working directory, the calls' inputs, the observations and
the rebuilt session all name the one POSIX directory the container mounts the workspace at. The user's
file is read, never changed; the trajectory says it was recorded on Windows and where."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from replayer.floor import winpaths
from replayer.floor.io import private_copy, read_input
from replayer.floor.trajectory import Trajectory


def recorded_on_windows(traj: Trajectory, source: Path) -> bool:
    """Whether `traj` (read from the file `source`) was recorded on Windows: its cwd is a drive's path."""
    return winpaths.is_windows_path(traj.cwd) and source.is_file()


def mapped(source: Path, recorded: Trajectory, parse: Callable[[Path], Trajectory]) -> Trajectory:
    """The trajectory `parse` reads from `source`'s copy with its Windows paths mapped, saying so."""
    assert recorded.cwd is not None
    traj = parse(private_copy(source.name, winpaths.to_posix(read_input(source))))
    note = (
        f"recorded on Windows in {recorded.cwd}: its paths are read in their Git Bash form under / "
        f"(the drive letter kept), the working directory {traj.cwd}"
    )
    return traj.model_copy(
        update={
            "recorded_on": "windows",
            "recorded_cwd": recorded.cwd,
            "parse_notes": [*traj.parse_notes, note],
        }
    )
