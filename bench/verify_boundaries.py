"""`replayer verify`'s last part, the probe session replayed and continued at every boundary: one replay
whose boundaries' continuations fork from its snapshots (`run -n 1,2,3 --continue`, what verify does)
against a replay and continuation for each boundary (what it did before), side by side in alternating
rounds, on a probe session recorded once by the pinned CLI."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from replayer.adapters import by_name
from replayer.bridges.request_tools import tool_names
from replayer.bridges.scripted import Script
from replayer.verbs import verify

VERIFY_BOUNDARIES_HEADING = "## verify: the probe's boundaries"
ROUNDS = 2
AGENTS = ("claude_code", "mini_swe_agent")


def _probe(agent: str, version: str, root: Path) -> tuple[Path, Path, list[int], verify.ProbeScript]:
    """The probe session recorded by `version`'s CLI (verify's first two parts), its workspace, boundaries
    and script."""
    adapter = by_name(agent)
    probe, first, main = verify.first_request(agent, version, root)
    source = verify.FIXTURES / probe.recording
    script = verify.probe_script(adapter, version, tool_names(main), first.cwd or "/")
    recorded, _ = verify._replay(
        adapter, version, source / "workspace", root / "record", source / probe.native, 1,
        Script(turns=script.turns), verify.PROMPT,
    )  # fmt: skip
    session = verify._continued_native(root / "record", recorded)
    assert session is not None
    from replayer.pipeline.engine import load

    steps = len(load(session)[1].steps)
    boundaries = list(range(1, steps if script.finishing else steps + 1))
    return session, source / "workspace", boundaries, script


def _each(
    agent: str,
    version: str,
    session: Path,
    workspace: Path,
    boundaries: list[int],
    script: verify.ProbeScript,
) -> float:
    adapter = by_name(agent)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        for k in boundaries:
            result, _ = verify._replay(
                adapter,
                version,
                workspace,
                Path(tmp) / f"b-{k}",
                session,
                k,
                Script(turns=script.final),
                None,
            )
            assert verify._continued("", result).passed and verify._exact("", result).passed
        return time.perf_counter() - t0


def _forked(
    agent: str,
    version: str,
    session: Path,
    workspace: Path,
    boundaries: list[int],
    script: verify.ProbeScript,
) -> float:
    adapter = by_name(agent)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        results = verify._every_boundary(
            adapter, version, workspace, Path(tmp), session, boundaries, script.final
        )
        wall = time.perf_counter() - t0
    assert all(verify._continued("", r).passed and verify._exact("", r).passed for r in results.values())
    return wall


def bench_verify_boundaries(tmp: Path) -> dict[str, dict[str, float]]:
    measured: dict[str, dict[str, float]] = {}
    for agent in AGENTS:
        version = by_name(agent).version()
        root = Path(tempfile.mkdtemp(dir=tmp))
        session, workspace, boundaries, script = _probe(agent, version, root)
        samples: dict[str, list[float]] = {"each": [], "forked": []}
        for _ in range(ROUNDS):
            samples["each"].append(_each(agent, version, session, workspace, boundaries, script))
            samples["forked"].append(_forked(agent, version, session, workspace, boundaries, script))
        measured[agent] = {way: statistics.median(s) for way, s in samples.items()}
        measured[agent]["boundaries"] = len(boundaries)
        print(agent, measured[agent], file=sys.stderr)
    return measured


def verify_boundaries_section(m: dict[str, dict[str, float]]) -> str:
    load = os.getloadavg()[1]
    rows = "\n".join(
        f"| {agent} {by_name(agent).version()} | {int(v['boundaries'])} | {v['each']:.1f} s | {v['forked']:.1f} s "
        f"| **{v['forked'] / v['each']:.2f}** |"
        for agent, v in m.items()
    )
    return f"""{VERIFY_BOUNDARIES_HEADING}

`python -m bench verify-boundaries`: the probe session of `replayer verify AGENT@PINNED` (recorded once by
the pinned CLI) replayed and continued through the gate at every boundary, as verify does it now (one
replay, each boundary's continuation forked from its snapshot) and as it did before (a replay and a
continuation for each boundary), {ROUNDS} alternating rounds, medians of wall time, load average
{load:.1f} over 5 minutes at the end (a shared machine).

| agent | boundaries | a replay each (baseline) | one replay, forks | ratio |
|---|---|---|---|---|
{rows}

What goes: the replays of every boundary but the last (their containers, and the reruns of steps 1 to
K-1 again at each boundary K); what stays: a continuation for each boundary, now in a container started
from the boundary's snapshot. mini-swe-agent's continuation is the larger part of its boundary (a Python
interpreter importing litellm in the container, seconds), so its share of the saving is smaller.
"""


if __name__ == "__main__":  # `python -m bench.verify_boundaries`: this section alone, printed
    with tempfile.TemporaryDirectory() as tmp:
        print(verify_boundaries_section(bench_verify_boundaries(Path(tmp))))
