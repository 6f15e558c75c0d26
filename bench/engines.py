"""Docker and Podman side by side in one run (sandboxes/engines.py): containers started and removed per
second, a fork (snapshot a container at a boundary, start a sandbox from the snapshot) and one replay
(`replayer run -n 2` of a recorded Claude Code session, the whole command). Rounds alternate the engines:
the machine's load drifts. Podman's numbers are ratios against Docker's."""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from replayer.floor.pins import load_pins
from replayer.sandboxes.base import Engine, SandboxSpec
from replayer.sandboxes.engines import NAMES, by_name

ENGINES_HEADING = "## Engines: Podman beside Docker"
ROOT = Path(__file__).resolve().parent.parent
FIXTURE = ROOT / "tests" / "fixtures" / "claude_code" / "write_edit"
STARTS = 8
ROUNDS = 3


def _spec(tmp: Path, image: str) -> SandboxSpec:
    work = Path(tempfile.mkdtemp(dir=tmp))
    return SandboxSpec(
        image=image, binds={"/work": (work, False)}, workdir="/work", run_id=uuid.uuid4().hex[:12]
    )


def _starts(engine: Engine, tmp: Path) -> float:
    """Seconds per container: started (ready for exec) and removed, STARTS in a row."""
    image = load_pins().base_image.tag
    t0 = time.perf_counter()
    for _ in range(STARTS):
        engine.start(_spec(tmp, image)).stop()
    return (time.perf_counter() - t0) / STARTS


def _fork(engine: Engine, tmp: Path) -> tuple[float, float]:
    """Seconds to snapshot a container that wrote a file, and to start a sandbox from the snapshot."""
    box = engine.start(_spec(tmp, load_pins().base_image.tag))
    try:
        box.exec(["sh", "-c", "echo state > /root/at-boundary"], workdir="/", timeout_s=60)
        t0 = time.perf_counter()
        label = f"sandbox-replayer.bench={uuid.uuid4().hex[:8]}"
        image = box.snapshot(
            f"sandbox-replayer/snapshot:bench-{uuid.uuid4().hex[:8]}", dict([label.split("=")])
        )
        snap_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        fork = engine.start(_spec(tmp, image))
        start_s = time.perf_counter() - t0
        assert fork.read_file("/root/at-boundary") == b"state\n"
        fork.stop()
    finally:
        box.stop()
    engine.remove_images(label)
    return snap_s, start_s


def _replay(name: str, tmp: Path) -> float:
    out = tmp / f"replay-{uuid.uuid4().hex[:8]}"
    argv = [sys.executable, "-m", "replayer.cli", "run", str(FIXTURE / "session.jsonl"), "-n", "2"]
    argv += ["-w", str(FIXTURE / "workspace"), "-o", str(out), "--engine", name]
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, capture_output=True, cwd=ROOT)
    return time.perf_counter() - t0


def bench_engines(tmp: Path) -> dict[str, dict[str, float]]:
    engines = {name: by_name(name) for name in NAMES}
    for engine in engines.values():
        engine.check()
    samples: dict[str, dict[str, list[float]]] = {n: {} for n in engines}
    for _ in range(ROUNDS):
        for name, engine in engines.items():
            row = samples[name]
            row.setdefault("start_s", []).append(_starts(engine, tmp))
            snap_s, fork_s = _fork(engine, tmp)
            row.setdefault("snapshot_s", []).append(snap_s)
            row.setdefault("fork_start_s", []).append(fork_s)
            row.setdefault("replay_s", []).append(_replay(name, tmp))
    return {n: {k: statistics.median(v) for k, v in row.items()} for n, row in samples.items()}


def engines_section(m: dict[str, dict[str, float]]) -> str:
    d, p = m["docker"], m["podman"]
    load = os.getloadavg()[1]
    rows = [
        ("containers per second (start, ready for exec, remove)", 1 / d["start_s"], 1 / p["start_s"], "/s"),
        ("a snapshot at a boundary (pause, check, commit)", d["snapshot_s"], p["snapshot_s"], "s"),
        ("a fork's container started from the snapshot", d["fork_start_s"], p["fork_start_s"], "s"),
        (
            "one replay: `replayer run -n 2` (write_edit), the whole command",
            d["replay_s"],
            p["replay_s"],
            "s",
        ),
    ]
    lines = [
        f"| {what} | {dv:.2f} {unit} | {pv:.2f} {unit} | **{pv / dv:.2f}** |" for what, dv, pv, unit in rows
    ]
    return f"""{ENGINES_HEADING}

`python -m bench engines`: Docker (`dockerd`, overlay2 on the btrfs data root) and Podman 4.3 (its
Docker-compatible API service, runc, overlay on the root file system) side by side, {ROUNDS} alternating
rounds, medians, load average {load:.1f} over 5 minutes at the end (a shared machine;
the rounds alternate the engines); the ratio is Podman's over Docker's (for containers per second, above 1
is faster). {STARTS} containers a round for the start rate. Forks under Podman always start this way (no pre-started
slots, `docs/engines.md`). Not measured apart: Docker's containers here get a disk quota on their layer (a
btrfs qgroup) and Podman's none, a difference in what each run does, not only in the engines.

| | Docker | Podman | ratio |
|---|---|---|---|
{chr(10).join(lines)}
"""
