"""A `replayer` process imports what its command line needs: the named command's module alone, no bridge
(aiohttp and its SSL contexts) unless a bridge starts, neither the API nor the engine for `--version`; the
models it imports are built when first validated. Checked on the modules a real entry-point process holds when it ends (the
CPU time is measured in bench/startup.py)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import orjson

from replayer.cli.app import VERBS
from tests.conftest import replayer_argv

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "claude_code" / "failing" / "session.jsonl"

_AT_EXIT = """
import atexit, os, sys
import orjson
def _every(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _every(sub)
def _modules():
    from pydantic import BaseModel
    schema = "replayer.adapters.opencode.schema"
    built = sorted(c.__qualname__ for c in _every(BaseModel) if c.__module__ == schema and c.__pydantic_complete__)
    with open(os.environ["MODULES_OUT"], "wb") as fh:
        fh.write(orjson.dumps({"modules": sorted(sys.modules), "built": built}))
atexit.register(_modules)
sys.argv = ["replayer", *sys.argv[1:]]
import runpy
runpy.run_module("replayer.cli", run_name="__main__")
"""


def _held(tmp: Path, *args: str) -> tuple[set[str], list[str]]:
    """The modules a `replayer ARGS` process held at its end, and the OpenCode models it had built."""
    out = tmp / "modules.json"
    argv = [replayer_argv()[0], "-c", _AT_EXIT, *args]
    env = {**os.environ, "MODULES_OUT": str(out)}
    subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, timeout=120)
    found = orjson.loads(out.read_bytes())
    return set(found["modules"]), found["built"]


COMMANDS = set(VERBS) - {"inspect"}


def test_version_imports_no_command_no_bridge_no_engine(tmp_path: Path) -> None:
    modules, _ = _held(tmp_path, "--version")
    assert "aiohttp" not in modules
    assert not {f"replayer.cli.{c}" for c in COMMANDS | {"inspect"}} & modules
    assert not {"replayer.api", "replayer.pipeline.engine", "replayer.adapters"} & modules


def test_inspect_imports_its_command_alone_and_no_bridge(tmp_path: Path) -> None:
    modules, built = _held(tmp_path, "inspect", str(FIXTURE))
    assert "replayer.cli.inspect" in modules
    assert not {f"replayer.cli.{c}" for c in COMMANDS} & modules
    assert "aiohttp" not in modules and "replayer.verbs.batch" not in modules
    assert "replayer.adapters.opencode.schema" in modules  # asked whether the file holds several sessions
    assert built == []  # its record models are built when a record first fails their check
