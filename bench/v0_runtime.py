"""OpenHands V0's runtime start in the sandbox, as each V0 run pays it (the reruns' companion, then the
continuation's: twice per `run --continue`): the pinned openhands-ai 1.6.0 companion makes the agent and its
local runtime from the replayed config, connects (the action execution server, its tmux shell, its plugins)
and runs one command. The runtime as the replayer starts it (no Jupyter kernel while the agent has no IPython
tool, `oh_v0_companion._without_jupyter_unless_used`) against the one the agent's class asks for (the kernel
gateway and its kernel included: the path before), in alternating rounds, each in a fresh container.
CPU is the container's (every process in it), which others' load on the machine moves less than wall time."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import docker

from replayer.adapters.openhands import bundle
from replayer.floor.pins import load_pins
from replayer.sandboxes.base import SandboxSpec
from replayer.sandboxes.engines import by_name

V0_RUNTIME_HEADING = "## OpenHands V0: the runtime start"
ROUNDS = 2
PROBE = "probe.py"
PROBE_SOURCE = """
import sys
companion_dir, mode = sys.argv[1:3]
sys.path.insert(0, companion_dir)
sys.argv = ["oh_v0_companion.py"]
import oh_v0_companion as companion
from openhands.events.action import CmdRunAction
from openhands.utils.async_utils import call_async_from_sync

if mode == "recorded":
    companion._without_jupyter_unless_used = lambda config, agent: None
companion._serve_settled()
config, _, runtime = companion._runtime(f"{companion_dir}/v0_config.toml", "/testbed")
call_async_from_sync(runtime.connect)
action = CmdRunAction(command="ls")
action.set_hard_timeout(120, blocking=False)
print(type(runtime.run_action(action)).__name__, flush=True)
companion._close(runtime)
companion.os._exit(0)
"""


def _start(tmp: Path, mode: str) -> tuple[float, float]:
    """Wall and container CPU seconds of one runtime start (and one command) in a fresh container."""
    work = Path(tempfile.mkdtemp(dir=tmp))
    (work / PROBE).write_text(PROBE_SOURCE)
    testbed = Path(tempfile.mkdtemp(dir=tmp))
    binds = {**bundle.binds_v0(work), "/testbed": (testbed, False)}
    run_id = uuid.uuid4().hex[:12]
    spec = SandboxSpec(image=load_pins().base_image.tag, binds=binds, workdir="/testbed", run_id=run_id)
    box = by_name("docker").start(spec)
    try:
        argv = [bundle.python(bundle.NAME_V0), f"{bundle.WORK_MOUNT}/{PROBE}", bundle.COMPANION_MOUNT, mode]
        t0 = time.perf_counter()
        done = box.exec(argv, workdir="/testbed", env=bundle.v0_env(), timeout_s=900)
        wall = time.perf_counter() - t0
        assert done.exit_code == 0 and b"CmdOutputObservation" in done.stdout, done.stderr[-2000:]
        stats = docker.from_env().containers.get(f"replayer-{run_id}").stats(stream=False)  # Docker's name
        cpu = stats["cpu_stats"]["cpu_usage"]["total_usage"] / 1e9
    finally:
        box.stop()
    return wall, cpu


def bench_v0_runtime(tmp: Path) -> dict[str, dict[str, float]]:
    samples: dict[str, dict[str, list[float]]] = {"recorded": {}, "replayer": {}}
    for _ in range(ROUNDS):
        for mode, row in samples.items():
            wall, cpu = _start(tmp, mode)
            row.setdefault("wall_s", []).append(wall)
            row.setdefault("cpu_s", []).append(cpu)
    return {m: {k: statistics.median(v) for k, v in row.items()} for m, row in samples.items()}


def v0_runtime_section(m: dict[str, dict[str, float]]) -> str:
    old, new = m["recorded"], m["replayer"]
    load = os.getloadavg()[1]
    return f"""{V0_RUNTIME_HEADING}

`python -m bench v0-runtime` (or `python -m bench.v0_runtime`, printed only): openhands-ai 1.6.0's local runtime started in a fresh
container from the replayed config by the companion's own code, connected and one command run, as each V0
rerun and each V0 continuation starts it; {ROUNDS} alternating rounds, medians, load average {load:.1f} over
5 minutes at the end (a shared machine). CPU is the container's, all its processes.

| | wall | container CPU | ratio (CPU) |
|---|---|---|---|
| baseline: the plugins CodeActAgent asks for (AgentSkills, Jupyter: the kernel gateway and its kernel) | {old["wall_s"]:.1f} s | {old["cpu_s"]:.1f} s | 1.00 |
| the replayer: no Jupyter kernel while the agent has no IPython tool | {new["wall_s"]:.1f} s | {new["cpu_s"]:.1f} s | **{new["cpu_s"] / old["cpu_s"]:.2f}** |

A `run --continue` starts this runtime twice (the reruns, then the continuation); the running version's
first request is told by the reruns' companion (a compare's variant starts the interpreter once more for it:
"the first-request question" below).
"""


if __name__ == "__main__":  # `python -m bench.v0_runtime`: this section alone, printed
    with tempfile.TemporaryDirectory() as tmp:
        print(v0_runtime_section(bench_v0_runtime(Path(tmp))))
