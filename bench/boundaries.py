"""Every boundary of a long session: one job per boundary (each its own container and rerun of steps 1..k,
the batch's path before one replay served a trajectory) against one replay that passes every boundary,
both through the batch's local pool, and the floor: one `run` to the last boundary."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from bench import long_sessions
from replayer import api
from replayer.pipeline.engine import load
from replayer.verbs.batch import groups
from replayer.verbs.batch_dir import batch_labels, prepare_dir, remove_left
from replayer.verbs.batch_jobs import expand, image_ids
from replayer.verbs.batch_manifest import read_manifest
from replayer.verbs.batch_tally import JobOutcome
from replayer.verbs.boundaries import valid_boundaries
from replayer.verbs.executors import run_local

ROOT = Path(__file__).resolve().parent.parent
BOUNDARIES_HEADING = "## Every boundary of a session: one replay against one job per boundary"
FIXTURES = long_sessions.FIXTURES
WORKERS = 2
SESSIONS = (
    # agent, fixture the turns come from, generator, copies -> steps
    ("claude_code", "parallel", long_sessions.claude_code, 20),
    ("claude_code", "parallel", long_sessions.claude_code, 75),
    ("openhands", "v1", long_sessions.openhands, 10),
)
"""Claude Code: 2 steps a copy (40 and 150 steps); OpenHands (the companion agent): 4 steps a copy."""


def _batch(manifest: Path, out: Path, grouped: bool) -> dict[str, float]:
    """The manifest's jobs through the batch's local pool, one unit per replay (`grouped`) or per job."""
    entries = read_manifest(manifest)
    jobs = expand(entries, image_ids({None}))
    prepare_dir(out)
    units = groups(jobs) if grouped else [[job] for job in jobs]
    outcomes: list[JobOutcome] = []
    started = time.monotonic()
    run_local(units, out.absolute(), WORKERS, outcomes.append, batch_labels(out))
    wall = time.monotonic() - started
    remove_left(out)
    assert all(o.status == "done" for o in outcomes), [o for o in outcomes if o.status != "done"][:1]
    results = [orjson.loads((out / "jobs" / o.key / "result.json").read_bytes()) for o in outcomes]
    reruns = [sum(1 for d in r["divergences"] if d["kind"] == "rerun") for r in results]
    return {
        "wall_s": wall,
        "containers": len({r["container"] for r in results}),
        # one replay reruns its last boundary's calls once; one job per boundary reruns each job's own
        "calls": max(reruns) if grouped else sum(reruns),
        "prefixes": len(results),
    }


def bench_boundaries(tmp: Path) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for agent, fixture, generate, copies in SESSIONS:
        folder = tmp / f"{agent}-{copies}"
        folder.mkdir()
        session = generate(folder, copies)
        workspace = FIXTURES / agent / fixture / "workspace"
        manifest = folder / "manifest.jsonl"
        line = {"trajectory": str(session), "mode": "run", "workspace": str(workspace)}
        manifest.write_bytes(orjson.dumps(line) + b"\n")
        _, traj = load(session)
        last = valid_boundaries(traj)[-1]
        t0 = time.monotonic()
        api.run(session, last, workspace, folder / "floor")
        floor = time.monotonic() - t0
        one = _batch(manifest, folder / "one-replay", grouped=True)
        per_job = _batch(manifest, folder / "per-job", grouped=False)
        rows.append(
            {"agent": agent, "steps": len(traj.steps), "floor_s": floor, "one": one, "per_job": per_job}
        )
        shutil.rmtree(folder, ignore_errors=True)
    return rows


def _rate(prefixes: float, wall: float) -> str:
    cores = min(WORKERS, os.cpu_count() or 1)
    return f"{prefixes / wall * 3600 / cores:,.0f}"


def _path_row(name: str, label: str, r: dict[str, float], base_s: float, *more: str) -> str:
    """A table row of one path: its wall time and ratio to `base_s`, its containers and rerun calls, and
    the columns `more` adds."""
    cells = [name, label, f"{r['wall_s']:.1f} s", f"**{r['wall_s'] / base_s:.2f}**"]
    cells += [f"{r['containers']:.0f}", f"{r['calls']:.0f}", *more]
    return "| " + " | ".join(cells) + " |"


def _floor_row(name: str, floor_s: float) -> str:
    return f"| {name} | floor: one `run -n LAST` | {floor_s:.1f} s | 1.00 | 1 | | |"


def _load_note() -> list[str]:
    return [
        f"Load average at the end of the run: {os.getloadavg()[0]:.1f} (the machine is shared: the ratios, not",
        "the absolute times, are what carries over).",
    ]


def boundaries_section(rows: list[dict[str, object]]) -> str:
    lines = [
        BOUNDARIES_HEADING,
        "",
        f"Every valid boundary of a long session (boundary 0 included), as a batch of `run` jobs on {WORKERS}",
        "workers: one job per boundary (its own container and rerun of steps 1..k, the batch's path before",
        "this round) against one replay that writes each boundary's result as it passes it",
        "(`replayer/pipeline/multiboundary.py`); the floor is one `run -n LAST` of the same session, measured in the",
        "same run. Rerun calls: the tool calls rerun in containers. Prefixes per hour per core: the",
        f"boundaries written per hour of wall time, divided by the cores used (min(workers, cores) = "
        f"{min(WORKERS, os.cpu_count() or 1)}).",
        "",
        "| session | path | wall | / floor | containers | rerun calls | prefixes per hour per core |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        name = f"{row['agent']}, {row['steps']} steps"
        floor = float(row["floor_s"])  # type: ignore[arg-type]
        lines.append(_floor_row(name, floor))
        for label, key in (("one job per boundary", "per_job"), ("one replay", "one")):
            r: dict[str, float] = row[key]  # type: ignore[assignment]
            lines.append(_path_row(name, label, r, floor, _rate(r["prefixes"], r["wall_s"])))
    lines += [
        "",
        *_load_note(),
        "",
        "What dominates: one job per boundary starts a container (and, for a companion agent, the companion)",
        "per boundary and reruns steps 1..k for each k, O(K²) calls; one replay starts one container and",
        "reruns each call once, and each boundary adds the copies of its workspace and home and its rebuild.",
        "",
    ]
    return "\n".join(lines)


CONTINUED = ("claude_code", "parallel", long_sessions.claude_code, 10)
"""The session continuations are forked from: 20 Claude Code steps."""
CONTINUED_AT = 10
"""Continuations at this many boundaries (evenly spread over the valid ones, boundary 0 left out)."""


def _spread(valid: list[int], count: int) -> list[int]:
    inner = [k for k in valid if k > 0]
    if len(inner) <= count:
        return inner
    return sorted({inner[round(i * (len(inner) - 1) / (count - 1))] for i in range(count)})


def _forked_session(tmp: Path, label: str, count: int) -> tuple[Path, Path, Path, int, list[int]]:
    """The session of CONTINUED made in its own folder: (folder, session, workspace, steps, `count`
    boundaries spread over its valid ones)."""
    agent, fixture, generate, copies = CONTINUED
    folder = tmp / f"{label}-{agent}-{copies}"
    folder.mkdir()
    session = generate(folder, copies)
    _, traj = load(session)
    workspace = FIXTURES / agent / fixture / "workspace"
    return folder, session, workspace, len(traj.steps), _spread(valid_boundaries(traj), count)


def bench_continuations(tmp: Path, count: int = CONTINUED_AT) -> dict[str, object]:
    """Continuations (the mock model) at `count` boundaries of one session: one `run -n K --continue` per
    boundary against one `run -n a,b,... --continue` (one replay, a continuation forked from each
    boundary's snapshot, replayer/pipeline/fanout.py), one after the other in this process."""
    folder, session, workspace, steps, picked = _forked_session(tmp, "continued", count)
    t0 = time.monotonic()
    alone = [
        api.run(session, k, workspace, folder / f"alone-{k}", continue_agent=True, upstream="mock")
        for k in picked
    ]
    separate = time.monotonic() - t0
    t0 = time.monotonic()
    outcomes = api.run_boundaries(
        session, picked, workspace, folder / "one", continue_agent=True, upstream="mock"
    )
    one = time.monotonic() - t0
    forked = [outcomes[k] for k in picked]
    for result in [*alone, *forked]:
        assert isinstance(result, api.ReplayResult) and result.continuation is not None, result
        assert result.continuation.gate == "accepted", result.continuation
    shutil.rmtree(folder, ignore_errors=True)

    def reruns(results: list[object]) -> list[int]:
        return [sum(1 for d in r.divergences if d.kind == "rerun") for r in results]  # type: ignore[attr-defined]

    return {
        "agent": CONTINUED[0],
        "steps": steps,
        "boundaries": picked,
        "separate": {"wall_s": separate, "containers": len(alone), "calls": sum(reruns(alone))},
        # one replay container, and one container a continuation
        "one": {"wall_s": one, "containers": 1 + len(forked), "calls": max(reruns(forked))},
    }


def continuations_section(row: dict[str, object]) -> str:
    picked: list[int] = row["boundaries"]  # type: ignore[assignment]
    separate: dict[str, float] = row["separate"]  # type: ignore[assignment]
    one: dict[str, float] = row["one"]  # type: ignore[assignment]
    name = f"{row['agent']}, {row['steps']} steps"
    lines = [
        f"Continuations at {len(picked)} boundaries ({', '.join(map(str, picked))}) of one session, each to the",
        "end with the built-in mock model: one `run -n K --continue` per boundary against one",
        "`run -n a,b,... --continue` (one replay; each boundary's continuation in its own container, started",
        "from the boundary's snapshot image over a copy of its state: `replayer/pipeline/fanout.py`), one after",
        "the other in one process, measured in the same run.",
        "",
        "| session | path | wall | / separate runs | containers | rerun calls |",
        "|---|---|---|---|---|---|",
    ]
    for label, r in ((f"{len(picked)} separate continued runs", separate), ("one replay, forked", one)):
        lines.append(_path_row(name, label, r, separate["wall_s"]))
    lines += [
        "",
        "What remains in the forked path: every continuation starts its CLI and talks to the model as a",
        "separate run does; what it saves is the rerun of steps 1..k per boundary and the workspace copy.",
        "The continuations run one after the other, each in a container started from its snapshot image",
        "while the boundary before it continued.",
        "",
    ]
    return "\n".join(lines)


BOUNDARIES_RAY_HEADING = "## Every boundary of a session on the two-node local Ray cluster"


def _ray_batch(manifest: Path, out: Path, address: str, env: dict[str, str]) -> dict[str, float]:
    """The whole `replayer batch --ray ADDRESS` command (driver start included): one task per replay."""
    cmd = [
        sys.executable,
        "-m",
        "replayer.cli",
        "batch",
        str(manifest),
        "-o",
        str(out),
        "--json",
        "--ray",
        address,
    ]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, cwd=ROOT, env={**os.environ, **env})
    wall = time.monotonic() - started
    if proc.returncode != 0:
        raise SystemExit(f"batch --ray failed: {proc.stderr.decode(errors='replace')[-500:]}")
    results = [orjson.loads(p.read_bytes()) for p in (out / "jobs").glob("*/result.json")]
    nodes = {o["node"] for o in orjson.loads((out / "batch.json").read_bytes())["outcomes"]}
    reruns = [sum(1 for d in r["divergences"] if d["kind"] == "rerun") for r in results]
    return {
        "wall_s": wall,
        "containers": len({r["container"] for r in results}),
        "calls": max(reruns),
        "prefixes": len(results),
        "nodes": len(nodes),
    }


def bench_boundaries_ray(tmp: Path) -> list[dict[str, object]]:
    """Per session, side by side: the floor (one `run -n LAST`), one replay through the local pool, one replay
    as a task of a two-node Ray cluster on this machine (one CPU a node, started before, as a real one is)."""
    from tests.support.ray_cluster import ray_nodes

    rows: list[dict[str, object]] = []
    with ray_nodes(2) as cluster:
        for agent, fixture, generate, copies in SESSIONS:
            folder = tmp / f"ray-{agent}-{copies}"
            folder.mkdir()
            session = generate(folder, copies)
            workspace = FIXTURES / agent / fixture / "workspace"
            manifest = folder / "manifest.jsonl"
            line = {"trajectory": str(session), "mode": "run", "workspace": str(workspace)}
            manifest.write_bytes(orjson.dumps(line) + b"\n")
            _, traj = load(session)
            last = valid_boundaries(traj)[-1]
            t0 = time.monotonic()
            api.run(session, last, workspace, folder / "floor")
            floor = time.monotonic() - t0
            local = _batch(manifest, folder / "local", grouped=True)
            ray = _ray_batch(manifest, folder / "ray", cluster.address, cluster.env)
            rows.append(
                {"agent": agent, "steps": len(traj.steps), "floor_s": floor, "local": local, "ray": ray}
            )
            shutil.rmtree(folder, ignore_errors=True)
    return rows


def boundaries_ray_section(rows: list[dict[str, object]]) -> str:
    lines = [
        BOUNDARIES_RAY_HEADING,
        "",
        "`python -m bench boundaries-ray`: the sessions of the table above, every valid boundary, one replay each,",
        f"through the local pool ({WORKERS} workers, in the bench's process) and as a task of a two-node Ray cluster",
        "on this machine (a head and a second raylet, one CPU each, `tests/support/ray_cluster.py`, started before",
        "the runs; the whole `replayer batch --ray ADDRESS` command, its driver's start and connection included),",
        "against the floor of one `run -n LAST`, side by side in one run. One job per boundary on Ray was left",
        "out: its O(K²) reruns take 10 to 30 times the floor on either executor (the table above).",
        "",
        "| session | path | wall | / floor | containers | rerun calls | nodes |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        name = f"{row['agent']}, {row['steps']} steps"
        floor = float(row["floor_s"])  # type: ignore[arg-type]
        lines.append(_floor_row(name, floor))
        for label, key in (("one replay, local pool", "local"), ("one replay, two-node Ray cluster", "ray")):
            r: dict[str, float] = row[key]  # type: ignore[assignment]
            lines.append(_path_row(name, label, r, floor, f"{r.get('nodes', 1):.0f}"))
    lines += [
        "",
        *_load_note(),
        "",
        "What dominates: a trajectory's boundaries are one unit of work (one replay), so on Ray they are one task",
        "on one node: the replay's own cost, plus the command's interpreter and Ray driver start. A cluster",
        "spreads the trajectories of a batch over its nodes, not the boundaries of one.",
        "",
    ]
    return "\n".join(lines)


BOUNDARIES_RAY_PER_JOB_HEADING = "## One job per boundary on the two-node local Ray cluster"


def bench_boundaries_ray_per_job(tmp: Path) -> dict[str, object]:
    """The first session of SESSIONS: the floor, then one job per boundary as tasks of a two-node Ray cluster
    (the batch's path before one replay served a trajectory), side by side in one run."""
    from replayer.verbs.executors import run_ray
    from tests.support.ray_cluster import ray_nodes

    agent, fixture, generate, copies = SESSIONS[0]
    folder = tmp / f"ray-per-job-{agent}-{copies}"
    folder.mkdir()
    session = generate(folder, copies)
    workspace = FIXTURES / agent / fixture / "workspace"
    manifest = folder / "manifest.jsonl"
    manifest.write_bytes(
        orjson.dumps({"trajectory": str(session), "mode": "run", "workspace": str(workspace)}) + b"\n"
    )
    _, traj = load(session)
    last = valid_boundaries(traj)[-1]
    with ray_nodes(2) as cluster:
        t0 = time.monotonic()
        api.run(session, last, workspace, folder / "floor")
        floor = time.monotonic() - t0
        os.environ.update(cluster.env)  # the driver joins with the cluster's token
        jobs = expand(read_manifest(manifest), image_ids({None}))
        out = folder / "per-job"
        prepare_dir(out)
        outcomes: list[JobOutcome] = []
        started = time.monotonic()
        run_ray(
            [[job] for job in jobs], out.absolute(), cluster.address, 2, outcomes.append, batch_labels(out)
        )
        wall = time.monotonic() - started
    remove_left(out)
    assert all(o.status == "done" for o in outcomes), [o for o in outcomes if o.status != "done"][:1]
    results = [orjson.loads((out / "jobs" / o.key / "result.json").read_bytes()) for o in outcomes]
    return {
        "agent": agent,
        "steps": len(traj.steps),
        "floor_s": floor,
        "wall_s": wall,
        "containers": len({r["container"] for r in results}),
        "calls": sum(sum(1 for d in r["divergences"] if d["kind"] == "rerun") for r in results),
        "prefixes": len(results),
        "nodes": len({o.node for o in outcomes}),
    }


def boundaries_ray_per_job_section(r: dict[str, object]) -> str:
    floor = float(r["floor_s"])  # type: ignore[arg-type]
    name = f"{r['agent']}, {r['steps']} steps"
    return "\n".join(
        [
            BOUNDARIES_RAY_PER_JOB_HEADING,
            "",
            "`python -m bench boundaries-ray-per-job`: the 40-step session above, every valid boundary as its own",
            "job (its own container and rerun of steps 1..k) on the two-node cluster, each job a task (the bench",
            "drives `run_ray` in its process, one unit per job), against the floor of one `run -n LAST`, side by side.",
            "",
            "| session | path | wall | / floor | containers | rerun calls | nodes |",
            "|---|---|---|---|---|---|---|",
            _floor_row(name, floor),
            _path_row(name, "one job per boundary, two-node Ray cluster", r, floor, f"{r['nodes']}"),  # type: ignore[arg-type]
            "",
            f"Load average at the end of the run: {os.getloadavg()[0]:.1f}. On Ray as in the local pool one job per",
            "boundary pays a container and the reruns of steps 1..k per boundary; two nodes share them, one replay",
            "(the table above) pays them once.",
            "",
        ]
    )


COMPARES_HEADING = "## compare at several boundaries: one replay against a compare a boundary"
COMPARED_AT = 5
"""Compares at this many boundaries (spread as the continuations' are) of the continuations' session."""


def bench_compares(tmp: Path, count: int = COMPARED_AT) -> dict[str, object]:
    """One variant, one run, with the mock model and a check, at `count` boundaries of one session: one
    `compare -n K` per boundary against one `compare -n a,b,...` (replayer/verbs/compare_boundaries.py),
    one after the other in this process."""
    folder, session, workspace, steps, picked = _forked_session(tmp, "compared", count)
    shared: dict[str, Any] = {"upstream": "mock", "check": "true"}
    t0 = time.monotonic()
    alone = [api.compare(session, k, workspace, folder / f"alone-{k}", ["a="], **shared) for k in picked]
    separate = time.monotonic() - t0
    t0 = time.monotonic()
    outcomes = api.compare_boundaries(session, picked, workspace, folder / "one", ["a="], **shared)
    one = time.monotonic() - t0
    forked = [outcomes[k] for k in picked]
    for result in [*alone, *forked]:
        assert isinstance(result, api.CompareResult), result
        assert all(r.status == "ok" and r.continuation for r in result.runs), result.runs
    shutil.rmtree(folder, ignore_errors=True)
    calls = [sum(result.divergences.values()) for result in alone]  # type: ignore[union-attr]
    return {
        "agent": CONTINUED[0],
        "steps": steps,
        "boundaries": picked,
        # a compare: its replay, its run, and its check in the replay's container
        "separate": {"wall_s": separate, "containers": 2 * len(alone), "calls": sum(calls)},
        # one replay, and per boundary its run and the check's own container
        "one": {"wall_s": one, "containers": 1 + 2 * len(forked), "calls": max(calls)},
    }


def compares_section(row: dict[str, object]) -> str:
    picked: list[int] = row["boundaries"]  # type: ignore[assignment]
    separate: dict[str, float] = row["separate"]  # type: ignore[assignment]
    one: dict[str, float] = row["one"]  # type: ignore[assignment]
    name = f"{row['agent']}, {row['steps']} steps"
    lines = [
        COMPARES_HEADING,
        "",
        "`python -m bench compare-boundaries`: a compare (one variant, one run, the built-in mock model, a",
        f"check) at {len(picked)} boundaries ({', '.join(map(str, picked))}) of one session: one `compare -n K`",
        "per boundary against one `compare -n a,b,...` (one replay, each boundary snapshotted as it passes,",
        "its runs forked from there: `replayer/verbs/compare_boundaries.py`), one after the other in one",
        "process, measured in the same run. Rerun calls: the calls the replays reran.",
        "",
        "| session | path | wall | / separate compares | containers | rerun calls |",
        "|---|---|---|---|---|---|",
        _path_row(name, f"{len(picked)} separate compares", separate, separate["wall_s"]),
        _path_row(name, "one replay, forked at each boundary", one, separate["wall_s"]),
        "",
        *_load_note(),
        "",
        "What remains in the forked path: every run starts its container and CLI and talks to the model as",
        "in a compare alone, and the check at a boundary takes a container of its own (the replay goes on",
        "after it); what it saves is the replay of steps 1..k per boundary.",
        "",
    ]
    return "\n".join(lines)
