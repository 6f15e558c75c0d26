"""Files that hold several sessions (an OpenHands evaluation output, OpenCode run logs appended in one file,
an OpenCode server's event dump...): `held` lists them, by asking each agent's reader
(`Reader.sessions_held`); `extract` writes one of them alone to a private file, which the agent's parser
then reads like any other file of its kind."""

from __future__ import annotations

from pathlib import Path

from replayer import adapters
from replayer.floor.errors import BadInput, excerpt
from replayer.floor.io import open_input, private_copy, read_input
from replayer.floor.trajectory import HeldSession

_FIRST_LINE_BYTES = 64 * 1024 * 1024
_EXTRACTED: dict[tuple[str, int, int, str], Path] = {}
_HELD: dict[tuple[str, int, int], list[HeldSession]] = {}
_HELD_MAX = 64


def held(path: Path) -> list[HeldSession]:
    """The sessions of a file that holds several, in file order; [] for any other file. Read once per
    version of the file: `inspect` and a batch load each of its sessions after listing them."""
    if not path.is_file():  # a folder, a missing or special file: the agent's detection says what it is
        return []
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HELD:
        if len(_HELD) >= _HELD_MAX:
            _HELD.pop(next(iter(_HELD)))
        _HELD[key] = _read_sessions(path)
    return _HELD[key]


def _read_sessions(path: Path) -> list[HeldSession]:
    with open_input(path) as fh:
        first_line = fh.readline(_FIRST_LINE_BYTES)
        while first_line and not first_line.strip():
            first_line = fh.readline(_FIRST_LINE_BYTES)
    for name in adapters.REGISTRY:
        found = adapters.adapter_class(name).sessions_held(path, first_line)
        if found is not None:
            return found
    return []


def extract(path: Path, sessions: list[HeldSession], session: str) -> Path:
    """`session`'s lines alone, in a private file named like `path` (removed when the process ends)."""
    chosen = next((s for s in sessions if s.id == session), None)
    if chosen is None:
        some = ", ".join(s.id for s in sessions[:5]) + (", ..." if len(sessions) > 5 else "")
        raise BadInput(f"{path} holds no session {excerpt(session)} (it holds {len(sessions)}: {some})")
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, session)
    if key not in _EXTRACTED:
        lines = read_input(path).splitlines()
        wanted = set(chosen.lines)
        data = b"".join(line + chosen.event_end for number, line in enumerate(lines, 1) if number in wanted)
        _EXTRACTED[key] = private_copy(path.name, data)
    return _EXTRACTED[key]
