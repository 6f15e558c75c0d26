"""`replayer view DIR` on a folder of results: DIR/index.html lists every run found below DIR (replays,
batch jobs and their refusals, compare runs, verify verdicts) with agent, version, boundary, status,
divergences and continuation outcome, filterable, each linking to its report.

The folder holds what sandboxes wrote: the walk opens every directory and file by descriptor with
O_NOFOLLOW (no link is followed), never reads a special file, reads at most `MAX_FILE_BYTES` of a file,
lists at most `MAX_ENTRIES` entries in all and goes at most `MAX_DEPTH` levels down. A result directory's
own folders (its workspace copy, the agent home) are not walked.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from replayer.floor.compare_results import CompareResult
from replayer.floor.errors import BadInput, OutputError, ReplayError
from replayer.floor.foreign import Folder
from replayer.floor.io import write_bytes_atomic
from replayer.floor.results import ReplayResult

PAGE = "index.html"
MAX_DEPTH = 6
MAX_ENTRIES = 100_000
MAX_RUNS = 10_000


class IndexRow(BaseModel):
    """One run as the index lists it."""

    model_config = ConfigDict(extra="forbid")
    kind: str
    """replay, batch job, compare run or verify."""
    path: str
    """Where it is, relative to DIR."""
    trajectory: str | None = None
    """The trajectory's file name."""
    agent: str | None = None
    version: str | None = None
    boundary: int | None = None
    status: str
    divergences: dict[str, int] = {}
    """Status -> count over the prefix's reruns."""
    continuation: str | None = None
    """The continuation's outcome (agent status, gate), None without one."""
    report: str | None = None
    """The run's report page, relative to DIR."""
    note: str | None = None
    """An error, a refusal reason, or why the run has no report."""


class Index(BaseModel):
    model_config = ConfigDict(extra="forbid")
    root: str
    rows: list[IndexRow]
    skipped: list[str]
    """What the walk left out (over a bound, unreadable), said on the page."""


class _Walk:
    def __init__(self) -> None:
        self.entries = 0
        self.skipped: list[str] = []


def _listing(folder: Folder, walk: _Walk, where: str) -> dict[str, bool]:
    """Name -> is a directory (not a link), bounded by what the walk has left."""
    out: dict[str, bool] = {}
    with os.scandir(folder.fd) as it:
        for entry in it:
            walk.entries += 1
            if walk.entries > MAX_ENTRIES:
                walk.skipped.append(
                    f"{where or '.'}: more than {MAX_ENTRIES} entries in all, the rest not listed"
                )
                break
            out[entry.name] = entry.is_dir(follow_symlinks=False)
    return out


def _json(folder: Folder, name: str) -> Any:
    data = folder.maybe_read(name)
    if data is None:
        return None
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


def _counts(divergences: list[Any]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for d in divergences:
        counts[d.status] = counts.get(d.status, 0) + 1
    return counts


def _replay_row(folder: Folder, rel: str, kind: str) -> IndexRow:
    try:
        result = ReplayResult.model_validate_json(folder.read("result.json"))
    except (ValueError, ValidationError, BadInput) as exc:
        return IndexRow(
            kind=kind, path=rel, status="unreadable", note=f"result.json: {str(exc).splitlines()[0]}"
        )
    cont = result.continuation
    return IndexRow(
        kind=kind,
        path=rel,
        trajectory=Path(result.request.trajectory).name,
        agent=result.agent,
        version=result.version.version if result.version else result.agent_version,
        boundary=result.after_step,
        status=result.status if result.request.mode != "prepare" else "prepared",
        divergences=_counts(result.divergences),
        continuation=f"{cont.agent_status} (gate {cont.gate})" if cont else None,
    )


def _compare_rows(folder: Folder, rel: str) -> list[IndexRow]:
    try:
        result = CompareResult.model_validate_json(folder.read("compare.json"))
    except (ValueError, ValidationError, BadInput) as exc:
        note = f"compare.json: {str(exc).splitlines()[0]}"
        return [IndexRow(kind="compare run", path=rel, status="unreadable", note=note)]
    report = _join(rel, "report.html")
    rows = []
    for run in result.runs:
        cont = run.continuation
        version = run.pins.cli_version if run.pins else (result.version.version if result.version else None)
        rows.append(
            IndexRow(
                kind="compare run",
                path=_join(rel, run.dir),
                trajectory=Path(result.request.trajectory).name,
                agent=result.agent,
                version=version,
                boundary=result.after_step,
                status=run.status,
                divergences=result.divergences,
                continuation=f"{cont.agent_status} (gate {cont.gate})" if cont else None,
                report=report,
                note=run.infrastructure_failure or run.error,
            )
        )
    return rows


def _outcome_rows(folder: Folder, rel: str, walk: _Walk) -> list[IndexRow]:
    """A batch's refused and failed jobs (DIR/outcomes/KEY.json): they have no result directory."""
    rows = []
    for name, is_dir in sorted(_listing(folder, walk, rel).items()):
        if is_dir or not name.endswith(".json"):
            continue
        data = _json(folder, name)
        if not isinstance(data, dict) or not isinstance(data.get("status"), str):
            continue
        rows.append(
            IndexRow(
                kind="batch job",
                path=_join(rel, name),
                trajectory=Path(str(data.get("trajectory") or "")).name or None,
                boundary=data.get("boundary") if isinstance(data.get("boundary"), int) else None,
                status=data["status"],
                note=str(data.get("error") or "") or None,
            )
        )
    return rows


def _verdict_row(folder: Folder, rel: str, name: str) -> IndexRow | None:
    data = _json(folder, name)
    keys = {"agent", "version", "passed", "checks", "probe"}
    if not isinstance(data, dict) or not keys <= data.keys():
        return None
    checks = data["checks"] if isinstance(data["checks"], list) else []
    failed = [c.get("name") for c in checks if isinstance(c, dict) and not c.get("passed")]
    return IndexRow(
        kind="verify",
        path=_join(rel, name),
        agent=str(data["agent"]),
        version=str(data["version"]),
        status="verified" if data["passed"] is True else "not verified",
        note="; ".join(str(f) for f in failed) or None,
        report=_join(rel, name),
    )


def _join(rel: str, name: str) -> str:
    return f"{rel}/{name}" if rel else name


def _walk(folder: Folder, rel: str, depth: int, walk: _Walk, rows: list[IndexRow]) -> None:
    listing = _listing(folder, walk, rel)
    if listing.get("result.json") is False:
        kind = "batch job" if rel.split("/")[-2:-1] == ["jobs"] else "replay"
        rows.append(_replay_row(folder, rel, kind))
        return  # its folders are the run's own (workspace copy, agent home): not walked
    children = [name for name, is_dir in sorted(listing.items()) if is_dir]
    if listing.get("compare.json") is False:
        rows.extend(_compare_rows(folder, rel))
        children = [c for c in children if c == "replay"]  # the runs are in compare.json
    for name, is_dir in sorted(listing.items()):
        if not is_dir and name.endswith(".json") and name not in ("batch.json", "compare.json"):
            row = _verdict_row(folder, rel, name)
            if row is not None:
                rows.append(row)
    for name in children:
        if len(rows) >= MAX_RUNS:
            walk.skipped.append(f"{rel or '.'}: more than {MAX_RUNS} runs, the rest not listed")
            return
        child = _join(rel, name)
        if depth >= MAX_DEPTH:
            walk.skipped.append(f"{child}: deeper than {MAX_DEPTH} levels, not walked")
            continue
        try:
            with folder.sub(name) as sub:
                if name == "outcomes" and "batch.json" in listing:
                    rows.extend(_outcome_rows(sub, child, walk))
                else:
                    _walk(sub, child, depth + 1, walk, rows)
        except BadInput as exc:
            walk.skipped.append(f"{child}: {str(exc).removeprefix(f'cannot read {folder.path / name}: ')}")


def collect(root: Path) -> Index:
    """Every run below `root`."""
    try:
        folder = Folder.open(root, given=True)
    except BadInput as exc:
        raise BadInput(f"{exc} (not a folder of results)") from None
    with folder:
        walk, rows = _Walk(), []  # type: ignore[var-annotated]
        _walk(folder, "", 0, walk, rows)
    return Index(root=str(root), rows=rows, skipped=walk.skipped)


def write(root: Path) -> tuple[Path, Index]:
    """DIR/index.html, and each replay's report.html beside its result.json (a run whose report cannot be
    drawn is listed with why)."""
    from replayer.verbs import view
    from replayer.verbs.report import render_index

    index = collect(root)
    if not index.rows:
        where = f" ({'; '.join(index.skipped)})" if index.skipped else ""
        raise BadInput(
            f"{root} holds no results within {MAX_DEPTH} levels: no result.json, compare.json, batch "
            f"outcome or verdict{where}"
        )
    rows = []
    for row in index.rows:
        if row.kind in ("replay", "batch job") and row.agent is not None:  # a result directory, read
            try:
                view.write(root / row.path)
            except (
                ReplayError,
                ValidationError,
                ValueError,
                TypeError,
            ) as exc:  # its files, as a sandbox left them
                why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                row = row.model_copy(update={"note": f"no report: {why}"})
            else:
                row = row.model_copy(update={"report": _join(row.path, view.PAGE)})
        rows.append(row)
    index = index.model_copy(update={"rows": rows})
    out = root / PAGE
    try:
        write_bytes_atomic(out, render_index(index.model_dump(mode="json")).encode())
    except OSError as exc:
        raise OutputError(f"cannot write {out}: {exc.strerror}") from None
    return out, index
