"""OpenHands V0's first-request question, as each V0 continuation asks it: whether the running version calls
functions natively and, if not, the request its converter makes of the rebuilt prefix. The path before: a
`request` process of the companion started for it (the interpreter, openhands imported, the agent made);
the replayer's: the reruns' companion, alive with openhands imported and its runtime up, tells it over its
socket. Both are asked of the same container in alternating rounds, the reruns' companion started once;
CPU is the container's (every process in it) between before and after each question, which others' load
on the machine moves less than wall time."""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import docker

from replayer.adapters.openhands.v0_adapter import OpenHandsV0Adapter
from replayer.floor.limits import Budgets, SandboxLimits
from replayer.floor.pins import load_pins
from replayer.pipeline import steps
from replayer.pipeline.engine import load
from replayer.pipeline.plan import make_plan
from replayer.sandboxes.engines import by_name

V0_REQUEST_HEADING = "## OpenHands V0: the first-request question"
ROUNDS = 3
TRAJECTORY = (
    Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "openhands" / "v0" / "trajectory.json"
)
MODEL = "openai/fake-model"


def _cpu_s(name: str) -> float:
    stats = docker.from_env().containers.get(name).stats(stream=False)
    return stats["cpu_stats"]["cpu_usage"]["total_usage"] / 1e9


def bench_v0_request(tmp: Path) -> dict[str, dict[str, float]]:
    adapter, traj = load(TRAJECTORY)
    assert isinstance(adapter, OpenHandsV0Adapter)
    plan = make_plan(adapter, traj, 4, allow_degraded=False)
    limits = SandboxLimits()
    state, dirs = steps.materialize_state(TRAJECTORY.parent / "workspace", limits, tmp, steps.Skips())
    samples: dict[str, dict[str, list[float]]] = {"process": {}, "companion": {}}
    try:
        box = steps.start_sandbox(
            by_name("docker"),
            adapter,
            traj,
            dirs,
            load_pins().base_image.tag,
            run_id=uuid.uuid4().hex[:12],
            limits=limits,
            labels={},
            bridge=False,
        )
        try:
            rerunner = adapter.rerunner(traj, box, dirs, Budgets())
            try:
                rerunner.companion.connect()  # the reruns' companion listens once its runtime is up
                rebuild = steps.rebuild(adapter, traj, plan, {}, Path(tempfile.mkdtemp(dir=tmp)))
                asks = {
                    "process": lambda: adapter.gate_facts(box, traj, rebuild, MODEL),
                    "companion": lambda: adapter.gate_facts_at_boundary(rerunner, traj, rebuild, MODEL),
                }
                for _ in range(ROUNDS):
                    for way, ask in asks.items():
                        cpu0, t0 = _cpu_s(box.name), time.perf_counter()
                        told = ask()
                        wall = time.perf_counter() - t0
                        cpu = _cpu_s(box.name) - cpu0
                        assert told.continuation.function_calling is True
                        samples[way].setdefault("wall_s", []).append(wall)
                        samples[way].setdefault("cpu_s", []).append(cpu)
            finally:
                rerunner.close()
        finally:
            box.stop()
    finally:
        state.remove()
    return {w: {k: statistics.median(v) for k, v in row.items()} for w, row in samples.items()}


def v0_request_section(m: dict[str, dict[str, float]]) -> str:
    old, new = m["process"], m["companion"]
    load = os.getloadavg()[1]
    return f"""{V0_REQUEST_HEADING}

`python -m bench v0-request` (or `python -m bench.v0_request`, printed only): the question each V0
continuation asks the running version before the agent starts (function calling native or in the text form,
and then the request its converter makes), over the recording's prefix at boundary 4, in one container whose
reruns' companion is up; {ROUNDS} alternating rounds, medians, load average {load:.1f} over 5 minutes at the
end (a shared machine). CPU is the container's, all its processes, from before to after the answer.

| | wall | container CPU | ratio (CPU) |
|---|---|---|---|
| baseline: a `request` process of the companion (interpreter, openhands imported, the agent made) | {old["wall_s"]:.1f} s | {old["cpu_s"]:.1f} s | 1.00 |
| the replayer: told by the reruns' companion over its socket (the agent made) | {new["wall_s"]:.1f} s | {new["cpu_s"]:.1f} s | **{new["cpu_s"] / old["cpu_s"]:.2f}** |

Each V0 continuation asks once; a continuation after a replay (`run -n K --continue`, and each boundary of
`run -n a,b --continue`) is told by the reruns' companion as the replay passes its boundary, a compare's
variant (its own agent version or model, in a container started from the snapshot) still starts the process.
"""


if __name__ == "__main__":  # `python -m bench.v0_request`: this section alone, printed
    with tempfile.TemporaryDirectory() as tmp:
        print(v0_request_section(bench_v0_request(Path(tmp))))
