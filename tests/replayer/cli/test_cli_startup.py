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


_SIGNAL_DURING_IMPORT = """
import os, signal, sys
class _Signal:  # a real SIGTERM to this process while the Docker SDK's urllib3 imports its response module
    def find_spec(self, name, path=None, target=None):
        if name == "urllib3.response":
            sys.stderr.write("signalled\\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGTERM)
        return None
sys.meta_path.insert(0, _Signal())
sys.argv = ["replayer", *sys.argv[1:]]
import runpy
runpy.run_module("replayer.cli", run_name="__main__")
"""


def test_a_signal_while_the_engine_library_imports_ends_as_one_interruption(tmp_path: Path) -> None:
    """An interruption that cuts the Docker SDK's import short (urllib3 half-imported) is one interruption:
    exit 130 and its one line. The sweep of live sandboxes does not import the engine again (this process
    started none): a second import of the half-imported library failed, a traceback and exit 1."""
    single = FIXTURE.parent.parent / "single"
    args = ["run", str(single / "session.jsonl"), "-n", "1", "-w", str(single / "workspace")]
    argv = [replayer_argv()[0], "-c", _SIGNAL_DURING_IMPORT, *args, "-o", str(tmp_path / "out")]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.stderr.startswith("signalled\n"), proc.stderr
    assert proc.returncode == 130 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == "replayer: interrupted"
    assert not (tmp_path / "out").exists()
