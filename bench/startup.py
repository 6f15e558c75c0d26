"""The CLI's start-up: CPU time of a `replayer` process (user + system, the child's own) for `--version` and
for `inspect` of a recorded fixture, against the old path run side by side: the same command line in a
process that first does what the CLI did at start-up before its imports were deferred (every command's
module imported, aiohttp with its SSL contexts, every pydantic model of those modules built)."""

from __future__ import annotations

import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

STARTUP_HEADING = "## Start-up of the CLI"
ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "claude_code" / "failing" / "session.jsonl"
ROUNDS = 9

_OLD_PATH = """
import sys
import aiohttp
from pydantic import BaseModel
from replayer.cli.app import VERBS
from replayer.cli.main import main
for verb in VERBS:
    __import__(f"replayer.cli.{verb}")
def every(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from every(sub)
for model in list(every(BaseModel)):
    if not model.__pydantic_complete__ and model.__module__.startswith("replayer."):
        model.model_rebuild()
sys.argv = ["replayer", *sys.argv[1:]]
main()
"""
"""The old start-up: what the CLI imported and built before any command ran, then the command itself."""


def _cpu(argv: list[str], env: dict[str, str]) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def bench_startup(tmp: Path) -> list[dict[str, object]]:
    """Each command line, the old path and the new alternated round by round (the machine's load drifts);
    the bytecode of both cached beforehand, as an installation has it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(tmp / "pycache")
    lines = {"--version": ["--version"], "inspect (Claude Code fixture)": ["inspect", str(FIXTURE)]}
    bare = [sys.executable, "-c", "pass"]
    rows: list[dict[str, object]] = []
    for name, args in lines.items():
        new = [sys.executable, "-m", "replayer.cli", *args]
        old = [sys.executable, "-c", _OLD_PATH, *args]
        _cpu(new, env), _cpu(old, env)  # bytecode written
        times = [(_cpu(bare, env), _cpu(old, env), _cpu(new, env)) for _ in range(ROUNDS)]
        python, before, after = (statistics.median(t[i] for t in times) for i in range(3))
        rows.append({"line": name, "python_s": python, "old_s": before, "new_s": after})
    return rows


def startup_section(rows: list[dict[str, object]]) -> str:
    def ms(value: object) -> str:
        assert isinstance(value, float)
        return f"{value * 1000:.0f} ms"

    table = "\n".join(
        f"| `replayer {r['line']}` | {ms(r['python_s'])} | {ms(r['old_s'])} | {ms(r['new_s'])} | "
        f"**{r['new_s'] / r['old_s']:.2f}** |"  # type: ignore[operator]
        for r in rows
    )
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    return f"""{STARTUP_HEADING}

CPU time (user + system) of one `replayer` process, median of {ROUNDS} rounds, the old start-up and the new
alternated round by round (`bench/startup.py`). Old: the same command line in a process that first does what
the CLI did before any command ran, before this round: every command's module imported (each imports the API,
the engine, the batch verb), aiohttp (whose client builds two SSL contexts as it is imported), every pydantic
model of those modules built (models of modules the command imports later are left deferred: if anything,
the old path is understated). New: the entry point imports the named command's module alone, the
bridges import aiohttp when a bridge or a scripted upstream starts, the record models and the floor's models
are built when first validated (`defer_build`). Bytecode cached on both sides.
Load average (1, 5, 15 min) as the run ended: {load}.

| command line | bare `python -c pass` | old start-up | new | ratio |
|---|---|---|---|---|
{table}

{STARTUP_HISTORY}

What stays: typer, rich and pydantic themselves; for `inspect`, the API's and the engine's imports (the
engine module holds the parse's entry point beside the replay) and every agent's adapter, which
`pipeline/multisession.py` imports to ask each whether the file holds several sessions (two agents do).
"""


STARTUP_HISTORY = """This round, the old start-up is also the code before it, run side by side in the same minutes (its own
checkout, the same measurement, load about 12 on 2 cores): `--version` 402 -> 262 ms (0.65), `inspect` of the
Claude Code fixture 900 -> 615 ms (0.68); the emulated old path above overstates `--version` (it builds every
model of every command's modules) and understates `inspect` (the agents' models stay deferred in it). Without
cached bytecode (PYTHONDONTWRITEBYTECODE, set in this project's sessions) each process compiles its modules
again: about 0.5 s of CPU more at that load, on either side."""


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        print(startup_section(bench_startup(Path(tmp))))
