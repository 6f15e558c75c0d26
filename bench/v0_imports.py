"""OpenHands V0's imports, as the V0 processes of a run that import jsonschema make them (each action
execution server, the continuation's companion: three per `run --continue`, one per plain run): the pinned
openhands-ai 1.6.0 interpreter imports what the continuation's companion imports (`run_controller`'s module
among them), or the action execution server's module,
with rfc3987_syntax imported where first used (companion/deferred_iri.py, the replayer's) against as it
comes (jsonschema's import builds the RFC 3987 parser: the path before), in alternating rounds. Run on the
host by the bundle's interpreter; CPU is the child's (user + system), which others' load on the machine
moves less than wall time."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from replayer.adapters.openhands import bundle
from replayer.floor.pins import load_pins

V0_IMPORTS_HEADING = "## OpenHands V0: the imports of each process"
ROUNDS = 3
IMPORTS = {
    "continuation's companion": "import openhands.agenthub, openhands.core.setup, openhands.core.main",
    "action execution server": "import openhands.runtime.action_execution_server",
}


def _import(process: str, deferred: bool) -> tuple[float, float]:
    """Wall and CPU seconds of one interpreter making `process`'s imports."""
    first = "import deferred_iri; " if deferred else ""
    code = f"import sys; sys.path.insert(0, {str(bundle.COMPANION_DIR)!r}); {first}{IMPORTS[process]}"
    python = load_pins().bundle_dir(bundle.NAME_V0) / "bin" / "python"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as home:
        subprocess.run([str(python), "-c", code], check=True, env={**bundle.base_env(), "HOME": home})
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_v0_imports(tmp: Path) -> dict[str, dict[str, float]]:
    samples: dict[str, dict[str, list[float]]] = {}
    for _ in range(ROUNDS):
        for process in IMPORTS:
            for way, deferred in (("before", False), ("replayer", True)):
                wall, cpu = _import(process, deferred)
                row = samples.setdefault(f"{process} {way}", {})
                row.setdefault("wall_s", []).append(wall)
                row.setdefault("cpu_s", []).append(cpu)
    return {k: {m: statistics.median(v) for m, v in row.items()} for k, row in samples.items()}


def v0_imports_section(m: dict[str, dict[str, float]]) -> str:
    load = os.getloadavg()[1]

    def rows(process: str) -> str:
        old, new = m[f"{process} before"], m[f"{process} replayer"]
        return (
            f"| {process}: baseline, rfc3987_syntax as it comes | {old['wall_s']:.1f} s | {old['cpu_s']:.1f} s "
            f"| 1.00 |\n| {process}: the replayer, rfc3987_syntax where first used | {new['wall_s']:.1f} s | "
            f"{new['cpu_s']:.1f} s | **{new['cpu_s'] / old['cpu_s']:.2f}** |"
        )

    return f"""{V0_IMPORTS_HEADING}

`python -m bench v0-imports` (or `python -m bench.v0_imports`, printed only): the imports of a V0 process by
openhands-ai 1.6.0's interpreter, the continuation's companion's (`openhands.agenthub`, `openhands.core.setup`,
`openhands.core.main`) and the action execution server's module, with rfc3987_syntax imported where first used
(`companion/deferred_iri.py`) against as it comes; {ROUNDS} alternating rounds, medians, load average
{load:.1f} over 5 minutes at the end (a shared machine). CPU is the interpreter's, user and system.

| | wall | CPU | ratio (CPU) |
|---|---|---|---|
{chr(10).join(rows(process) for process in IMPORTS)}

jsonschema (imported through mcp by both) imports rfc3987_syntax for its `iri` formats, which builds an
Earley parser of RFC 3987 as it is imported, whether or not an IRI is ever checked. A `run --continue`
starts three such processes (the reruns' action execution server, the continuation's companion and its
server), a plain run one; the reruns' companion does not import jsonschema.
"""


if __name__ == "__main__":  # `python -m bench.v0_imports`: this section alone, printed
    with tempfile.TemporaryDirectory() as tmp:
        print(v0_imports_section(bench_v0_imports(Path(tmp))))
