"""Write tests/module_seconds.json from the `--durations=0` lines of a whole `make test` log: the seconds of
every module (setup, call and teardown of its tests summed), which orders the parallel run (tests/conftest.py).

    python -m tests.support.module_seconds LOG
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import orjson

from replayer.floor.io import write_bytes_atomic
from tests.conftest import MODULE_SECONDS

DURATION = re.compile(r"^(\d+(?:\.\d+)?)s (?:setup|call|teardown)\s+(\S+?\.py)(?:::|$)")


def module_seconds(log: str) -> dict[str, float]:
    seconds: dict[str, float] = {}
    for line in log.splitlines():
        if match := DURATION.match(line.strip()):
            module = match.group(2)
            seconds[module] = seconds.get(module, 0.0) + float(match.group(1))
    return {module: round(total, 1) for module, total in sorted(seconds.items(), key=lambda kv: -kv[1])}


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.support.module_seconds LOG", file=sys.stderr)
        return 2
    seconds = module_seconds(Path(argv[0]).read_text(errors="replace"))
    if not seconds:
        print(f"{argv[0]}: no --durations=0 lines", file=sys.stderr)
        return 1
    write_bytes_atomic(MODULE_SECONDS, orjson.dumps(seconds, option=orjson.OPT_INDENT_2) + b"\n")
    print(f"{MODULE_SECONDS}: {len(seconds)} modules, {sum(seconds.values()):.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
