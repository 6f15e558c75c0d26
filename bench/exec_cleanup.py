"""A sandbox command with its process-group file removed by the next command's wrapper (now) against removed
by an exec of its own after each command (before), and a port forwarder started and waited for in one exec
(now) against a detached exec and a probe's (before), side by side in alternating rounds on one sandbox. Each
exec the engine runs is a runc start in the container (namespaces joined, the seccomp filter loaded)."""

from __future__ import annotations

import os
import statistics
import time
import uuid
from pathlib import Path

from replayer.floor.pins import load_pins
from replayer.sandboxes.docker import DockerSandbox, connect

EXEC_CLEANUP_HEADING = "## A sandbox command is one exec"
ROUNDS = 3
COMMANDS = 40
FORWARDERS = 10


def busy_ticks() -> int:
    """The machine's busy CPU ticks so far (user, nice, system, irq, softirq): the engine's daemons too."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
    return sum(int(fields[i]) for i in (1, 2, 3, 6, 7))


def _commands(box: DockerSandbox, own_exec: bool) -> tuple[float, float]:
    """Wall and machine CPU seconds per command."""
    ticks, t0 = busy_ticks(), time.perf_counter()
    for _ in range(COMMANDS):
        box.exec(["true"], workdir="/", timeout_s=30)
        if own_exec:  # the baseline: the file removed at once, by an exec of its own
            ended, box.ended_pgid_files = box.ended_pgid_files, []
            box._run_quiet(["rm", "-f", *ended])
    wall = time.perf_counter() - t0
    return wall / COMMANDS, (busy_ticks() - ticks) / os.sysconf("SC_CLK_TCK") / COMMANDS


def _forwarders(box: DockerSandbox, two_execs: bool) -> tuple[float, float]:
    """Wall and machine CPU seconds per forwarder started and listening (each stopped after the timing)."""
    ports = range(9100, 9100 + FORWARDERS)
    ticks, t0 = busy_ticks(), time.perf_counter()
    for port in ports:
        if two_execs:  # the baseline: the forwarder by a detached exec, then a probe's exec
            box.spawn(["socat", f"TCP-LISTEN:{port},bind=127.0.0.1,fork,reuseaddr", "UNIX-CONNECT:/nowhere"])
            probe = f"for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && exit 0; sleep 0.05; done; exit 1"
            assert box.exec(["bash", "-c", probe], workdir="/", timeout_s=30).exit_code == 0
        else:
            box.forward_port(port, "/nowhere")
    wall = time.perf_counter() - t0
    cpu = (busy_ticks() - ticks) / os.sysconf("SC_CLK_TCK")
    for port in ports:
        box.stop_forward(port)
    return wall / FORWARDERS, cpu / FORWARDERS


def bench_exec_cleanup(tmp: Path) -> dict[str, float]:
    samples: dict[str, list[tuple[float, float]]] = {"before": [], "now": [], "fwd_before": [], "fwd_now": []}
    binds = {"/testbed": (tmp, False)}
    run_id = f"bench-exec-{uuid.uuid4().hex[:8]}"
    with DockerSandbox.start(
        connect(), load_pins().base_image.tag, binds=binds, workdir="/", run_id=run_id
    ) as box:
        for _ in range(ROUNDS):
            samples["before"].append(_commands(box, own_exec=True))
            samples["now"].append(_commands(box, own_exec=False))
            samples["fwd_before"].append(_forwarders(box, two_execs=True))
            samples["fwd_now"].append(_forwarders(box, two_execs=False))
    return medians(samples)


def medians(samples: dict[str, list[tuple[float, float]]]) -> dict[str, float]:
    """`WAY_wall` and `WAY_cpu`: the medians of each way's (wall, CPU) rounds."""
    out: dict[str, float] = {}
    for way, s in samples.items():
        out[f"{way}_wall"] = statistics.median(w for w, _ in s)
        out[f"{way}_cpu"] = statistics.median(c for _, c in s)
    return out


def exec_cleanup_section(m: dict[str, float]) -> str:
    load = os.getloadavg()[1]
    return f"""{EXEC_CLEANUP_HEADING}

`python -m bench exec-cleanup`: {COMMANDS} commands (`true`) through `DockerSandbox.exec` on one sandbox, with
each command's process-group file removed by the next command's wrapper (now) and by an exec of its own after
the command (before), {ROUNDS} alternating rounds, medians; CPU is the whole machine's busy time (the engine's
daemons and runc included), load average {load:.1f} over 5 minutes at the end (a shared machine).

| a command | wall | ratio | machine CPU | ratio |
|---|---|---|---|---|
| baseline: its file removed by an exec of its own | {m["before_wall"] * 1000:.0f} ms | 1.00 | {m["before_cpu"] * 1000:.0f} ms | 1.00 |
| the replayer: removed by the next command's wrapper | {m["now_wall"] * 1000:.0f} ms | **{m["now_wall"] / m["before_wall"]:.2f}** | {m["now_cpu"] * 1000:.0f} ms | **{m["now_cpu"] / m["before_cpu"]:.2f}** |

Every command the replayer runs in a sandbox (a rerun step, a read of a file, the forwarder's probe) ran a
second exec to remove the file that holds its process group (kept for a deadline's kill). The wrapper the
next command runs anyway now removes the ended ones first: what a command sees in the replayer's run folder
is unchanged (its own file only). An OpenCode replay with its continuation ran 31 execs, 9 of them removals.

The same sandbox, {FORWARDERS} port forwarders (`socat`, what a driven rerun and a continuation reach the bridge
through) a round, each started and waited for until it listens:

| a forwarder | wall | ratio | machine CPU | ratio |
|---|---|---|---|---|
| baseline: a detached exec, then a probe's exec | {m["fwd_before_wall"] * 1000:.0f} ms | 1.00 | {m["fwd_before_cpu"] * 1000:.0f} ms | 1.00 |
| the replayer: one exec starts it in a session of its own and probes | {m["fwd_now_wall"] * 1000:.0f} ms | **{m["fwd_now_wall"] / m["fwd_before_wall"]:.2f}** | {m["fwd_now_cpu"] * 1000:.0f} ms | **{m["fwd_now_cpu"] / m["fwd_before_cpu"]:.2f}** |

A Claude Code replay with its continuation starts two (the replay model's, the bridge's).
"""
