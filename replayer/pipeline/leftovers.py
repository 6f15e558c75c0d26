"""Processes the prefix left running: alive in the sandbox at the boundary, started by historical commands
(in the background) rather than by the replayer. Listed in the result; ended before the agent starts when
the user asks (`--end-leftovers`), since such a process could act during the continuation (post its own
model requests to the bridge, change the workspace under the agent).

Which processes are the replayer's own is read from what the kernel sets, not from anything a process can
choose: the sandbox's init (pid 1), its first child (the container's main command), and every process in
a tree whose root the engine started by exec (parent pid 0: the forwarders, this listing). A process a
historical command started outlives that command's exec only by being re-parented to init, which makes it,
and all it started, a leftover.
"""

from __future__ import annotations

import signal
from typing import NamedTuple

from replayer.floor.errors import SandboxError
from replayer.floor.results import LeftoverProcess, Leftovers
from replayer.sandboxes.base import Runtime

MAX_LISTED = 100
COMMAND_CHARS = 200
_ROUNDS = 5
"""Listing and killing again, for a process that forks while it is being ended."""

_LIST = r"""
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  st=$(cat "$d/status" 2>/dev/null) || continue
  case "$st" in *"State:"*"Z (zombie)"*) continue ;; esac
  pp=$(printf '%s\n' "$st" | sed -n 's/^PPid:[[:space:]]*//p')
  [ -n "$pp" ] || continue
  c=$(head -c 400 "$d/cmdline" 2>/dev/null | tr '\0\n\t' '   ')
  printf '%s\t%s\t%s\n' "$p" "$pp" "$c"
done
"""


class Row(NamedTuple):
    pid: int
    ppid: int
    command: str


def parse(table: bytes) -> list[Row]:
    rows = []
    for line in table.decode("utf-8", "replace").splitlines():
        pid, _, rest = line.partition("\t")
        ppid, _, command = rest.partition("\t")
        if pid.isdigit() and ppid.isdigit():
            rows.append(Row(int(pid), int(ppid), command.strip()))
    return rows


def left(rows: list[Row]) -> list[Row]:
    """The rows that are not the replayer's own (see the module's docstring), in pid order."""
    parent = {r.pid: r.ppid for r in rows}
    main = min((r.pid for r in rows if r.ppid == 1), default=None)

    def own(pid: int) -> bool:
        seen: set[int] = set()
        while pid not in seen:
            seen.add(pid)
            if pid in (1, main):
                return True
            up = parent.get(pid)
            if up is None:
                return False  # its parent is gone between two reads: not ours to keep
            if up == 0:
                return True  # started by the engine (an exec)
            if up == 1:
                return False  # re-parented to init: left by a command that ended
            pid = up
        return False

    return sorted((r for r in rows if not own(r.pid)), key=lambda r: r.pid)


def _table(box: Runtime) -> list[Row]:
    res = box.exec(["sh", "-c", _LIST], workdir="/", timeout_s=60, max_output_bytes=8 << 20)
    if res.exit_code != 0 or res.output_truncated:
        raise SandboxError("cannot list the processes in the sandbox at the boundary")
    return parse(res.stdout)


def at_boundary(box: Runtime, end: bool) -> Leftovers:
    """The processes the prefix left running; with `end`, killed (SIGKILL) before this returns."""
    found = left(_table(box))
    record = Leftovers(
        processes=[LeftoverProcess(pid=r.pid, command=r.command[:COMMAND_CHARS]) for r in found[:MAX_LISTED]],
        count=len(found),
    )
    if not end or not found:
        return record
    alive = found
    for _ in range(_ROUNDS):
        pids = [str(r.pid) for r in alive]
        box.exec(["kill", f"-{int(signal.SIGKILL)}", *pids], workdir="/", timeout_s=60)
        alive = left(_table(box))
        if not alive:
            return record.model_copy(update={"ended": True})
    raise SandboxError(
        f"{len(alive)} process(es) the prefix left running could not be ended (--end-leftovers)"
    )
