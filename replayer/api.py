"""The public Python API: the verbs of the `replayer` command as functions (the command is argument parsing
and printing around these). Each takes plain arguments, returns the pydantic result the command prints
with --json, raises a `replayer.floor.errors.ReplayError` subclass where the command exits non-zero, and reads
the settings (settings.py) for what the caller leaves None. `on_event` hears the progress (events.py).
docs/api.md."""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

from pydantic import BaseModel, ConfigDict

from replayer.floor import settings as user_settings
from replayer.floor.errors import NO_UPSTREAM_HELP, BadInput, NoUpstream, OptionsConflict, ReplayError
from replayer.floor.events import Building, OnEvent, ignore
from replayer.floor.io import read_input
from replayer.floor.merge import Merged, merge
from replayer.floor.options import CompareOptions as CompareOptions
from replayer.floor.options import PathLike as PathLike  # the options' types, declared once there
from replayer.floor.options import ReplayOptions as ReplayOptions
from replayer.floor.options import RunOptions as RunOptions
from replayer.floor.requests import (
    CompareRequest,
    ContinueRequest,
    GitWorkspace,
    ReplayRequest,
    Variant,
    workspace_spec,
)
from replayer.floor.results import ContinuationResult, ReplayResult
from replayer.floor.trajectory import HeldSessionSummary, InspectCall, InspectReport, InspectStep, Trajectory
from replayer.floor.versions import SetupReport
from replayer.verbs.batch_tally import BatchCounts
from replayer.verbs.gc import GcReport

if TYPE_CHECKING:
    from replayer.adapters.base import Adapter
    from replayer.floor.bundles import Bundle
    from replayer.floor.compare_results import CompareResult
    from replayer.floor.determinism import Determinism
    from replayer.floor.trajectory import HeldSession
    from replayer.floor.verdicts import Verdict
    from replayer.verbs.export import ExportSummary

logger = logging.getLogger(__name__)

Workspace = PathLike | GitWorkspace
"""A directory, or `git+URL@REV` (a string, or a GitWorkspace)."""


def inspect(
    trajectory: PathLike, *, task: str | None = None, cwd: str | None = None, session: str | None = None
) -> InspectReport:
    """The agent, version, session and steps (complete tool batches) of a trajectory, each call with how it
    would be replayed; or, for a file that holds several sessions and no `session`, the list of them."""
    from replayer.floor.pins import running_version
    from replayer.pipeline import agent_version as versions
    from replayer.pipeline import multisession
    from replayer.pipeline.engine import load

    path = Path(trajectory)
    held = multisession.held(path) if session is None else []
    if held:
        return _sessions(path, held)
    adapter, traj = load(path, task, cwd, session)
    version = versions.of_trajectory(adapter, traj, None)
    with running_version(adapter.name, version.version):  # a driven version classifies its own tools
        kinds = {c.id: adapter.classify(c, traj) for s in traj.steps for c in s.calls}
    return InspectReport(
        native_form=traj.native_form,
        **traj.reported(),
        environment_image=traj.environment_image,
        start=traj.start,
        version=version,
        subagent_of=traj.subagent_of,
        subagents=traj.subagents,
        steps=[
            InspectStep(
                index=s.index,
                complete=s.complete,
                before_compaction=s.before_compaction,
                final=s.final,
                calls=[
                    InspectCall(
                        id=c.id,
                        tool=c.tool,
                        input=c.input,
                        kind=kinds[c.id][0],
                        has_observation=c.historical is not None,
                        reason=kinds[c.id][1] if kinds[c.id][0] == "unknown" else None,
                    )
                    for c in s.calls
                ],
            )
            for s in traj.steps
        ],
    )


def _sessions(path: Path, held: list[HeldSession]) -> InspectReport:
    from replayer.pipeline.engine import load

    summaries = []
    for one in held:
        _, traj = load(path, session=one.id)
        summaries.append(
            HeldSessionSummary(
                id=one.id, agent=traj.agent, steps=len(traj.steps), first_prompt=one.first_prompt
            )
        )
    return InspectReport(
        agent=summaries[0].agent,
        agent_version=None,
        session_id=None,
        cwd=None,
        source_sha256=hashlib.sha256(read_input(path)).hexdigest(),
        steps=[],
        sessions=summaries,
    )


def prepare(
    trajectory: PathLike,
    after_step: int,
    out: PathLike,
    *,
    on_event: OnEvent = ignore,
    **options: Unpack[ReplayOptions],
) -> ReplayResult:
    """Zero execution: the native session prefix after `after_step` with the historical observations, and
    expected_prefix.json, written atomically into `out`."""
    from replayer.pipeline.engine import execute

    # a bad or untrusted settings file refuses a prepare as it does a run
    merged = merge(options, user_settings.load(), ReplayOptions)
    request = ReplayRequest(
        mode="prepare", trajectory=Path(trajectory), after_step=after_step, out=Path(out), **merged.fields
    )
    return execute(request, on_event=on_event)


def run(
    trajectory: PathLike,
    after_step: int,
    workspace: Workspace,
    out: PathLike,
    *,
    continue_agent: bool = False,
    on_event: OnEvent = ignore,
    repeats: int = 1,
    **options: Unpack[RunOptions],
) -> ReplayResult:
    """Rerun steps 1..after_step in a fresh container, rebuild the native session with the fresh
    observations, and with `continue_agent` continue the agent through the bridge to `upstream`.
    `repeats` > 1 reruns the prefix that many times in all, each in a fresh container, and writes how often
    each tool's calls came back exactly as recorded to `out`/determinism.json (`determinism_of(out)`).

    A continuation that was refused or failed still returns its result (the output directory is complete);
    `continuation_error(result.continuation, out)` is the error the command exits with then."""
    from replayer.pipeline.engine import execute

    merged, cont = _run_continuation(options, continue_agent)
    request = ReplayRequest(
        mode="run",
        trajectory=Path(trajectory),
        after_step=after_step,
        out=Path(out),
        workspace=_workspace(workspace),
        continuation=cont,
        **merged.fields,
    )
    if repeats == 1:
        return execute(request, on_event=on_event)
    from replayer.verbs.repeat import check_repeats, repeated, reruns_of, write_determinism

    check_repeats(repeats)
    result = execute(request, on_event=on_event)
    write_determinism(Path(out), repeated(result.request, reruns_of(Path(out)), repeats, on_event=on_event))
    return result


def determinism_of(out: PathLike) -> Determinism:
    """The determinism rate `run(..., repeats=R)` wrote into `out`."""
    from replayer.floor.determinism import DETERMINISM, Determinism

    return Determinism.model_validate_json((Path(out) / DETERMINISM).read_bytes())


CONTINUATION_ONLY = ("upstream", "boundary_prompt", "max_steps", "model")
"""Options that mean nothing without a continuation (refused then for several boundaries)."""


def check_run_options(options: RunOptions, continue_agent: bool, several: bool) -> None:
    """The continuation and cassette options of a run that do not go together, refused before anything
    starts, the same way (OptionsConflict, exit 2) from `replayer run` and from `run`/`run_boundaries`;
    `several`: a run of several boundaries. (A cassette and an upstream: `merge` refuses them, in every
    verb.)"""
    if not continue_agent and (options.get("cassette") or options.get("record_cassette")):
        raise OptionsConflict(
            "a cassette is the traffic of a continuation: continue the agent (--continue, continue_agent=True)"
        )
    if several and continue_agent and options.get("record_cassette"):
        raise OptionsConflict("--record-cassette records one continuation: give one boundary")
    if several and not continue_agent and any(options.get(name) for name in CONTINUATION_ONLY):
        raise OptionsConflict(
            "continuation options without a continuation: continue the agent (--continue, continue_agent=True)"
        )


def _run_continuation(
    options: RunOptions, continue_agent: bool, several: bool = False
) -> tuple[Merged, ContinueRequest | None]:
    """The options over the settings, and the continuation a run asks for (None without `continue_agent`),
    its options checked (`check_run_options`) and its upstream found."""
    check_run_options(options, continue_agent, several)
    merged = merge(options, user_settings.load(), RunOptions)
    if not continue_agent:
        return merged, None
    cont = merged.continuation.request()
    if not cont.upstream and not cont.cassette:
        raise NoUpstream(
            f"continuing needs an upstream: {NO_UPSTREAM_HELP} (or REPLAYER_UPSTREAM, or upstream in "
            "replayer.toml)"
        )
    return merged, cont


def run_boundaries(
    trajectory: PathLike,
    boundaries: str | Sequence[int],
    workspace: Workspace,
    out: PathLike,
    *,
    continue_agent: bool = False,
    on_event: OnEvent = ignore,
    **options: Unpack[RunOptions],
) -> dict[int, ReplayResult | ReplayError]:
    """Run mode at several boundaries in one replay: the steps rerun once, in one container, and each
    boundary K gets its own complete result directory `out`/after-K/, equal to what `run(..., K, ...)`
    writes. `boundaries`: a list, or `-n`'s text forms (`3,7,10-12`, `all`, `sample:K[:SEED]`). Returns
    each boundary's result, or the error it was refused or failed with (the others go on).

    With `continue_agent`, each boundary's continuation forks from the boundary's snapshot once the
    replay is done, in a container of its own (`run(..., K, continue_agent=True)` for each K, at the cost
    of one replay); a continuation that was refused or failed still returns its result, as `run` does."""
    from replayer.pipeline.engine import execute_many

    merged, cont = _run_continuation(options, continue_agent, several=True)
    adapter, traj, outs = _boundary_dirs(trajectory, boundaries, Path(out), options)
    request = ReplayRequest(
        mode="run",
        trajectory=Path(trajectory),
        after_step=max(outs),
        out=Path(out),
        workspace=_workspace(workspace),
        continuation=cont,
        **merged.fields,
    )
    with _no_empty_out(Path(out)):
        return execute_many(request, outs, adapter, traj, on_event=on_event)


def prepare_boundaries(
    trajectory: PathLike,
    boundaries: str | Sequence[int],
    out: PathLike,
    *,
    on_event: OnEvent = ignore,
    **options: Unpack[ReplayOptions],
) -> dict[int, ReplayResult | ReplayError]:
    """`prepare` at several boundaries from one parse: each boundary K gets its own complete directory
    `out`/after-K/, equal to what `prepare(..., K, ...)` writes (training prefixes of a whole file in one
    go). `boundaries` as `run_boundaries` takes them. Returns each boundary's result, or the error it was
    refused or failed with (the others go on)."""
    from replayer.pipeline.engine import prepare_many

    merged = merge(options, user_settings.load(), ReplayOptions)
    adapter, traj, outs = _boundary_dirs(trajectory, boundaries, Path(out), options)
    request = ReplayRequest(
        mode="prepare", trajectory=Path(trajectory), after_step=max(outs), out=Path(out), **merged.fields
    )
    with _no_empty_out(Path(out)):
        return prepare_many(request, outs, adapter, traj, on_event=on_event)


def _boundary_dirs(
    trajectory: PathLike, boundaries: str | Sequence[int], out: Path, options: Mapping[str, Any]
) -> tuple[Adapter, Trajectory, dict[int, Path]]:
    """The one parse of a several-boundary command, and each boundary's directory OUT/after-K/."""
    from replayer.pipeline.engine import load
    from replayer.pipeline.multiboundary import boundary_dir
    from replayer.verbs.boundaries import parse_boundaries, pick_boundaries

    spec = parse_boundaries(boundaries) if isinstance(boundaries, str) else list(boundaries)
    path = Path(trajectory)
    adapter, traj = load(path, options.get("task"), options.get("cwd"), options.get("session"))
    picked = pick_boundaries(spec, traj)
    if not picked:
        raise BadInput(f"{path} has no boundary to replay")
    return adapter, traj, {k: boundary_dir(out, k) for k in picked}


@contextlib.contextmanager
def _no_empty_out(out: Path) -> Iterator[None]:
    """An interrupted several-boundary command leaves no empty OUT/ behind (a boundary written keeps it)."""
    made = not out.exists()
    try:
        yield
    except BaseException:
        if made:
            with contextlib.suppress(OSError):
                out.rmdir()
        raise


def compare(
    trajectory: PathLike,
    after_step: int,
    workspace: Workspace,
    out: PathLike,
    variants: Sequence[str | Variant],
    *,
    on_event: OnEvent = ignore,
    **options: Unpack[CompareOptions],
) -> CompareResult:
    """Replay the prefix once, snapshot the boundary, run every variant (`NAME=SPEC` as `--variant` takes
    it, or a Variant) `repeat` times from the snapshot, `workers` at once, `check` (a shell command) in
    each run's container afterwards; compare.json and report.html in `out`."""
    from replayer.verbs.compare_boundaries import compare as run_compare

    request = _compare_request(trajectory, after_step, workspace, out, variants, options)
    return run_compare(request, on_event=on_event)


def compare_boundaries(
    trajectory: PathLike,
    boundaries: str | Sequence[int],
    workspace: Workspace,
    out: PathLike,
    variants: Sequence[str | Variant],
    *,
    on_event: OnEvent = ignore,
    **options: Unpack[CompareOptions],
) -> dict[int, CompareResult | ReplayError]:
    """`compare` at several boundaries from one replay: the prefix replayed once, each boundary
    snapshotted as the replay passes it, every variant forked from every boundary. `out`/after-K/ holds
    what `compare(..., K, ...)` writes, `out`/summary.json the tally of every boundary. `boundaries`: a
    list, or `-n`'s text forms (`3,7,10-12`, `all`, `sample:K[:SEED]`). Returns each boundary's
    comparison, or the error it was refused or failed with (the others go on)."""
    from replayer.verbs.compare_boundaries import compare_boundaries as run_compares

    adapter, traj, outs = _boundary_dirs(trajectory, boundaries, Path(out), options)
    picked = sorted(outs)
    request = _compare_request(trajectory, picked[-1], workspace, out, variants, options)
    return run_compares(request, picked, on_event=on_event, parsed=(adapter, traj))


def _compare_request(
    trajectory: PathLike,
    after_step: int,
    workspace: Workspace,
    out: PathLike,
    variants: Sequence[str | Variant],
    options: CompareOptions,
) -> CompareRequest:
    from replayer.verbs.variants import parse_variant

    found = user_settings.load()
    try:
        parsed = [v if isinstance(v, Variant) else parse_variant(v) for v in variants]
    except ValueError as exc:
        raise BadInput(str(exc)) from None
    merged = merge(options, found, CompareOptions)
    return CompareRequest(
        trajectory=Path(trajectory),
        after_step=after_step,
        workspace=_workspace(workspace),
        out=Path(out),
        variants=parsed,
        defaults=merged.continuation.request(),
        **merged.fields_of(CompareRequest),
    )


def batch(
    manifest: PathLike,
    out: PathLike,
    *,
    workers: int | None = None,
    ray: str | None = None,
    retry_failed: bool = False,
    trust_manifest: bool = False,
    on_event: OnEvent = ignore,
    containers_ahead: bool = True,
    max_output: int | None = None,
    max_tokens: int | None = None,
) -> BatchCounts:
    """Every job of a JSONL manifest into `out` (resumable: finished jobs are never recomputed); `ray`: an
    address, 'auto' or 'local'. The counts are also in out/batch.json, with every job's outcome.
    `containers_ahead`: each worker (a local pool's process, a Ray actor) starts the next job's container
    while a job runs. `trust_manifest`: the manifest is the caller's own, and may choose the upstream, key
    variable, image and git workspaces of its jobs (else only a manifest trusted with `replayer trust` may).
    `max_output`: the bytes every job together may write (default: the `[limits] output`
    setting, else 4 times `disk`; replayer/verbs/batch_output.py). `max_tokens`: the tokens every job's
    continuation together may be billed (default: the `max_tokens` setting; one ledger, DIR/token-ledger.json);
    a job it ends is `cut`."""
    from replayer.verbs.run_batch import run_batch

    return run_batch(
        Path(manifest),
        Path(out),
        workers=workers,
        ray=ray,
        retry_failed=retry_failed,
        trust_manifest=trust_manifest,
        on_event=on_event,
        containers_ahead=containers_ahead,
        max_output=max_output,
        max_tokens=max_tokens,
    )


def _workspace(spec: Workspace) -> Path | GitWorkspace:
    if isinstance(spec, GitWorkspace):
        return spec
    try:
        parsed = workspace_spec(str(spec))
    except ValueError as exc:
        raise BadInput(f"workspace: {exc}") from None
    return parsed if isinstance(parsed, GitWorkspace) else Path(spec)


# ---------------------------------------------------------------------------------------------------------
# The verbs around the runs: their results, views and the machine they run on.


class ViewReport(BaseModel):
    """`replayer view --json`: one replay's report, or a folder's index of runs."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    report: str | None = None
    index: str | None = None
    runs: int | None = None
    skipped: list[str] = []


def export(directory: PathLike, out: PathLike, format: str = "chat", force: bool = False) -> ExportSummary:
    """One training record per prefix of a batch (or of one result directory), as `chat` or `atif`."""
    from replayer.verbs.export import export_atif, export_chat

    exporters = {"chat": export_chat, "atif": export_atif}
    if format not in exporters:
        raise ValueError(f"unknown format {format!r} (supported: chat, atif)")
    return exporters[format](Path(directory), Path(out), force=force)


def view(directory: PathLike) -> ViewReport:
    """DIR/report.html for a replay's output directory; DIR/index.html for any other folder of results."""
    from replayer.verbs import index, view

    directory = Path(directory)
    if (directory / "result.json").is_file() or not directory.is_dir():
        return ViewReport(report=str(view.write(directory).absolute()))
    page, found = index.write(directory)
    return ViewReport(index=str(page.absolute()), runs=len(found.rows), skipped=found.skipped)


VIEW_PORT = 7575
"""`view --serve`'s port unless --port says."""


def serve_view(directory: PathLike, port: int = VIEW_PORT, started: Callable[[str], None] = print) -> None:
    """`view` DIR, then serve it read-only on 127.0.0.1:`port` (0: a free one) until Ctrl-C; `started` is
    told the URL once it answers."""
    from replayer.verbs.serve import serve

    shown = view(directory)
    serve(Path(directory), Path(shown.report or shown.index or "").name, port, started)


def gc() -> GcReport:
    """Remove every container and snapshot image the replayer left behind, the state folders and fork
    slots of dead runs, and the slots' root once no slot is left; kill the port forwarders that removed
    containers left on the host."""
    from replayer.verbs.gc import collect

    return collect()


def verify(
    specs: Sequence[str],
    verdicts: PathLike | None = None,
    on_verdict: Callable[[Verdict, Path], None] = lambda verdict, stored: None,
    repeats: int = 1,
) -> list[Verdict]:
    """Probe each AGENT@VERSION at every boundary and store its verdict (in `verdicts`, default the
    setting's); every spec is checked before the first probe starts. `on_verdict` hears each verdict and
    where it is stored, as it comes. `repeats` > 1 reruns each probe session that many times in fresh
    containers and stores its determinism rate in the verdict."""
    from replayer.floor import bundles
    from replayer.floor import verdicts as store
    from replayer.verbs.repeat import check_repeats
    from replayer.verbs.verify import verify as run_probe

    check_repeats(repeats)
    found = []
    for agent, version in [bundles.parse_spec(spec) for spec in specs]:
        verdict = run_probe(agent, version, repeats=repeats)
        on_verdict(verdict, store.store(verdict, Path(verdicts) if verdicts is not None else None))
        found.append(verdict)
    return found


def not_verified(found: list[Verdict]) -> ReplayError | None:
    """The error a verify of these verdicts exits with (None: all passed)."""
    from replayer.verbs.verify import not_verified as failed

    return failed(found)


def bundles_list() -> list[Bundle]:
    """The bundles in the cache, pinned or not."""
    from replayer.floor import bundles

    return bundles.list_bundles()


def bundles_add(
    specs: Sequence[str], pinned: bool = False, on_event: OnEvent = ignore
) -> list[tuple[str, Path]]:
    """Install AGENT@VERSION bundles (and, with `pinned`, every pinned one) the cache lacks; a bundle an
    earlier replayer installed without a digest manifest gets one, if nothing in it is someone else's."""
    from replayer import installer
    from replayer.floor import bundles

    wanted = [bundles.parse_spec(spec) for spec in specs]
    if pinned:
        wanted += bundles.pinned_specs()
    if not wanted:
        raise ValueError("name AGENT@VERSION or give pinned=True")
    return [
        (f"{agent}@{version}", installer.ensure(agent, version, adopt=True, on_event=on_event))
        for agent, version in wanted
    ]


def bundles_rm(specs: Sequence[str]) -> list[tuple[str, bool]]:
    """Remove these bundles from the cache: (AGENT@VERSION, whether it was installed)."""
    from replayer.floor import bundles

    parsed = [bundles.parse_spec(spec) for spec in specs]
    return [(f"{agent}@{version}", bundles.remove(agent, version)) for agent, version in parsed]


def setup(
    agents: Sequence[str] | None = None, bundles: bool = True, image: bool = True, on_event: OnEvent = ignore
) -> SetupReport:
    """Make this machine ready to run, reusing every part already there: the container engine in use
    (`use_engine`), the pinned base image in it (`image`), the pinned agent bundles (`bundles`; `agents`:
    only theirs). `on_event` hears the image build (`Building`) and each install (`Installing`)."""
    from concurrent.futures import ThreadPoolExecutor

    from replayer.sandboxes import engines
    from replayer.verbs import setup as machine

    wanted = machine.pinned_bundles(list(agents) if agents is not None else None) if bundles else []
    container_engine = engines.chosen()
    engine, notes = machine.engine(container_engine)
    with ThreadPoolExecutor(1) as beside:  # the image builds while the bundles install
        building = (
            beside.submit(machine.base_image, container_engine, lambda what: on_event(Building(what)))
            if image
            else None
        )
        found = machine.install_bundles(wanted, on_event=on_event)
        built = building.result() if building else None
    return SetupReport(engine=engine, image=built, bundles=found, notes=notes)


def use_engine(name: str) -> None:
    """Run every sandbox of this process, and of the workers it starts, on the engine `name` (`docker`,
    `podman`), over the `engine` setting (BadInput for an unknown name)."""
    from replayer.sandboxes.engines import select

    select(name)


def parse_variant(spec: str) -> Variant:
    """`NAME=SPEC` as `--variant` takes it (ValueError when it is not one)."""
    from replayer.verbs.variants import parse_variant as parsed

    return parsed(spec)


def stop_sandboxes() -> None:
    """Stop every sandbox this process started (at an interruption: the `finally` blocks on the way up may
    not have run for a sandbox caught between its creation and its owner's `try`)."""
    from replayer.sandboxes import engines

    engines.stop_live()


def continuation_error(cont: ContinuationResult | None, out: PathLike) -> ReplayError | None:
    """The error a refused or failed continuation exits with, its cause in one line; None otherwise."""
    from replayer.pipeline.continue_run import continuation_error as error

    return error(cont, out)


def parse_boundaries(spec: str) -> Any:
    """`-n`'s several-boundary forms (`3,7,10-12`, `all`, `sample:K[:SEED]`), checked (BadInput if not one)."""
    from replayer.verbs.boundaries import parse_boundaries as parsed

    return parsed(spec)


def boundary_dir(out: PathLike, boundary: int) -> Path:
    """Where `run_boundaries(..., out)` writes boundary `boundary`'s result directory."""
    from replayer.pipeline.multiboundary import boundary_dir as where

    return where(Path(out), boundary)
