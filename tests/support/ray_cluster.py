"""A Ray cluster of several nodes on this machine: a head and more raylets, each started by `ray start` with
its own resources, ports, node id and environment, all talking over the loopback interface (Ray's servers
listen on every interface: 2.60 has no option to narrow that).

Ray rewrites "127.0.0.1" and "localhost" (in --node-ip-address and in --address) to the address the machine
routes to the internet, so the nodes use 127.0.0.2: as loopback as 127.0.0.1, and not an address Ray
rewrites. A cluster has an auth token of its own (RAY_AUTH_MODE=token), passed to its nodes and drivers by
environment, never written to ~/.ray. Teardown ends the process groups its own `ray start`s created (never
`ray stop`, which stops every Ray process of the machine, other runs' included).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import orjson

HOST = "127.0.0.2"
RAY = [sys.executable, "-m", "ray.scripts.scripts"]
"""`ray` run by this interpreter, not by the `ray` script's: the nodes start their workers with the
interpreter that ran `ray start`, so that they import this checkout (a script linked from another
environment would give them that environment's replayer)."""


@dataclass
class RayCluster:
    address: str
    env: dict[str, str]
    """What a driver needs to join (the auth token)."""
    nodes: dict[str, str] = field(default_factory=dict)
    """Resource name (node_a, node_b) -> node id."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return int(s.getsockname()[1])


def _ports(*names: str) -> list[str]:
    return [arg for name in names for arg in (f"--{name}", str(_free_port()))]


_NODE_PORTS = (
    "node-manager-port",
    "object-manager-port",
    "metrics-export-port",
    "runtime-env-agent-port",
    "dashboard-agent-listen-port",
    "dashboard-agent-grpc-port",
)


def _start(argv: list[str], env: dict[str, str], groups: list[int]) -> None:
    proc = subprocess.Popen(
        [*RAY, "start", *argv],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    groups.append(proc.pid)  # its daemons stay in the session it leads
    output, _ = proc.communicate(timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"ray start failed: {output.decode(errors='replace')[-2000:]}")


def _stop(groups: list[int]) -> None:
    for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
        alive = []
        for group in groups:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, sig)
                alive.append(group)
        deadline = time.monotonic() + wait
        while alive and time.monotonic() < deadline:
            time.sleep(0.1)
            alive = [g for g in alive if _group_alive(g)]
        if not alive:
            return


def _group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


@contextlib.contextmanager
def ray_nodes(
    count: int = 2, cpus: int = 1, node_env: dict[str, dict[str, str]] | None = None
) -> Iterator[RayCluster]:
    """A head with resource {"node_a": 1} and `count - 1` more raylets ({"node_b": 1}, ...), `cpus` CPUs
    each; `node_env` adds environment variables per node (its tasks see them)."""
    node_env = node_env or {}
    temp = Path(tempfile.mkdtemp(prefix="rayc-", dir="/tmp"))  # short: Ray's socket paths live under it
    port = _free_port()
    cluster = RayCluster(
        address=f"{HOST}:{port}",
        env={
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(16),
            "RAY_USAGE_STATS_ENABLED": "0",
        },
    )
    common = ["--node-ip-address", HOST, "--num-cpus", str(cpus), "--object-store-memory", str(100 * 2**20)]
    groups: list[int] = []
    try:
        for n in range(count):
            name = f"node_{chr(ord('a') + n)}"
            head = ["--head", "--port", str(port), "--temp-dir", str(temp)]
            role = head if n == 0 else ["--address", cluster.address]
            node_id = secrets.token_hex(28)
            env = {
                **os.environ,
                **cluster.env,
                **node_env.get(name, {}),
                "RAY_OVERRIDE_NODE_ID_FOR_TESTING": node_id,
            }
            extra = [*_ports("dashboard-port"), "--include-dashboard", "false"] if n == 0 else []
            argv = [
                *role,
                *common,
                *extra,
                *_ports(*_NODE_PORTS),
                "--resources",
                orjson.dumps({name: 1}).decode(),
            ]
            _start([*argv, "--disable-usage-stats"], env, groups)
            cluster.nodes[name] = node_id
        yield cluster
    finally:
        _stop(groups)
        subprocess.run(["rm", "-rf", str(temp)], check=False)
