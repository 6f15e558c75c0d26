"""Every process the replayer starts on the host starts through replayer/floor/hostproc.py (a folder of its
own, only the environment it names, Python isolated): no module of replayer/, adapters/, bridges/ or
sandboxes/ (their companions aside, which run in the sandbox) starts one any other way. No Docker."""

from __future__ import annotations

import ast

from tests.test_layers import modules

LAUNCHER = "replayer.floor.hostproc"
MODULES = {"subprocess", "pty", "multiprocessing", "concurrent.futures.process", "asyncio.subprocess"}
"""Modules whose import is a way to start a process (multiprocessing.util, its finalizers, is not)."""
ALLOWED = {"multiprocessing.util"}
NAMES = {
    "os": ("exec", "spawn", "system", "popen", "posix_spawn", "fork"),
    "asyncio": ("create_subprocess_",),
    "psutil": ("Popen",),
    "concurrent.futures": ("ProcessPoolExecutor", "process"),
    "ray": ("init",),
}
"""Module -> the prefixes of its names that start a process (`os.execv`, `os.spawnlp`, `ray.init`...)."""


def _starts(name: str, module: str) -> bool:
    return any(name.startswith(prefix) for prefix in NAMES.get(module, ()))


def _module_of(name: str) -> str | None:
    """The forbidden module `name` is or is in, if any."""
    if name in ALLOWED:
        return None
    return next((m for m in MODULES if name == m or name.startswith(m + ".")), None)


def bypasses(source: str) -> list[str]:
    """The ways `source` starts a process without the launcher, as `line: what`."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    """Local name -> the module it names, for the modules of NAMES."""
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _module_of(alias.name):
                    found.append(f"{node.lineno}: import {alias.name}")
                if alias.name in NAMES:
                    aliases[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and not node.level:
            base = node.module or ""
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if (
                    _module_of(base)
                    or (_module_of(full) and full not in ALLOWED)
                    or _starts(alias.name, base)
                ):
                    found.append(f"{node.lineno}: from {base} import {alias.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            module = aliases.get(node.value.id)
            if module and _starts(node.attr, module):
                found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "__import__":
            found.append(f"{node.lineno}: __import__")
    return found


def test_only_the_launcher_starts_host_processes() -> None:
    found = {
        module: hits
        for module, path in modules().items()
        if module != LAUNCHER and (hits := bypasses(path.read_text()))
    }
    assert not found, (
        f"start host processes through {LAUNCHER} (its run/start/process_pool/start_ray): {found}"
    )


def test_the_launcher_is_where_the_guard_looks() -> None:
    assert LAUNCHER in modules()
    assert bypasses(modules()[LAUNCHER].read_text()), "the launcher itself starts processes"


PLANTED = [
    "import subprocess\nsubprocess.run(['ls'])",
    "from subprocess import Popen",
    "import subprocess as sp",
    "import os\nos.system('ls')",
    "import os as o\no.execvp('ls', ['ls'])",
    "import os\nos.spawnlp(os.P_WAIT, 'ls', 'ls')",
    "import os\nos.popen('ls')",
    "import os\nos.posix_spawnp('ls', ['ls'], {})",
    "from os import execv",
    "import pty\npty.spawn('ls')",
    "from pty import spawn",
    "import multiprocessing\nmultiprocessing.Process(target=print).start()",
    "from multiprocessing import get_context",
    "import multiprocessing.pool",
    "from concurrent.futures import ProcessPoolExecutor",
    "import asyncio\nasyncio.create_subprocess_exec('ls')",
    "from asyncio import create_subprocess_shell",
    "import psutil\npsutil.Popen(['ls'])",
    "import ray\nray.init()",
    "__import__('subprocess')",
]


def test_a_planted_bypass_is_caught() -> None:
    for source in PLANTED:
        assert bypasses(source), source


def test_what_starts_nothing_passes() -> None:
    source = (
        "import os, platform, multiprocessing.util, psutil\n"
        "from concurrent.futures import Future, wait\n"
        "os.kill(1, 0); os.environ.get('X'); platform.system(); psutil.Process().children()\n"
        "multiprocessing.util.Finalize(None, print)\n"
    )
    assert bypasses(source) == []
