"""The bundles the suite's tests install on demand, installed ahead of them while the parallel part runs.

On a bare machine (CI) about forty versions besides the pinned ones are installed by the tests that run them,
each on a worker that then waits on npm or PyPI while the machine has CPU to spare. `make test` starts this
beside pytest: it installs the versions of tests/bundles_used.json one after another, in the order a whole
run needed them. A test that asks for a version being installed waits on the bundle's lock (the installer's,
as two runs of the product do); a version the list lacks, or one that fails here (a mirror that lacks it),
is installed or refused by the test as before: the tests' assertions do not change, only who waits.

    python -m tests.support.prefetch           # install the listed versions (what `make test` starts)
    python -m tests.support.prefetch --record  # list the cache's unpinned bundles, oldest install first
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import orjson

from replayer import installer
from replayer.floor import signals
from replayer.floor.bundles import INSTALLED, bundle_dir, installed_specs, parse_spec, pinned_specs
from replayer.floor.errors import Interrupted, ReplayError
from replayer.floor.io import write_bytes_atomic

USED = Path(__file__).resolve().parents[1] / "bundles_used.json"


def listed() -> list[tuple[str, str]]:
    return [parse_spec(spec) for spec in orjson.loads(USED.read_bytes())]


def record() -> list[str]:
    """The cache's bundles that are not pinned, by the time their install ended (after a bare machine's
    whole run: the order the suite needed them)."""
    pinned = set(pinned_specs())
    extra = [spec for spec in installed_specs() if spec not in pinned]
    extra.sort(key=lambda spec: (bundle_dir(*spec) / INSTALLED).stat().st_mtime)
    return [f"{agent}@{version}" for agent, version in extra]


def main(argv: list[str]) -> int:
    if argv == ["--record"]:
        specs = record()
        write_bytes_atomic(USED, orjson.dumps(specs, option=orjson.OPT_INDENT_2) + b"\n")
        print(f"{USED}: {len(specs)} bundles")
        return 0
    if argv:
        print("usage: python -m tests.support.prefetch [--record]", file=sys.stderr)
        return 2
    # `make test` ends it when the parallel part ends (or dies): an install it cuts removes its partial folder
    signals.install()
    signals.die_with_parent(os.getppid(), signal.SIGTERM)
    try:
        for agent, version in listed():
            try:
                installer.ensure(agent, version, adopt=True)
            except ReplayError as exc:  # the test that needs it says so
                print(f"prefetch {agent}@{version}: {exc}", file=sys.stderr)
    except Interrupted:
        return Interrupted.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
