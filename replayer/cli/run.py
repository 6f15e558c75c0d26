"""`replayer run`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from replayer import api
from replayer.cli.app import command, console
from replayer.cli.options import (
    AgentEnv,
    AgentVersion,
    AllowDegraded,
    BoundaryPrompt,
    CassetteOpt,
    Cwd,
    EndLeftovers,
    Force,
    IdleTimeout,
    Image,
    JsonOpt,
    LimitsOpt,
    MaxRequests,
    MaxSteps,
    MaxTokens,
    Model,
    OutDir,
    Quiet,
    Repeat,
    RequireVerified,
    Session,
    Task,
    TrajectoryArg,
    Upstream,
    UpstreamKeyEnv,
    Verbose,
    WorkspaceOpt,
    _limits,
    _progress,
    _report,
    _workspace,
    emit_json,
    replay_options,
    run_options,
)
from replayer.floor import settings
from replayer.floor.determinism import DETERMINISM, summary
from replayer.floor.errors import NO_UPSTREAM_HELP, BadInput
from replayer.floor.models import (
    ReplayResult,
)

RunAfterStep = Annotated[
    str,
    typer.Option(
        "--after-step",
        "-n",
        metavar="N",
        help="Boundary: after this many complete tool batches; or several, replayed once, each into "
        "OUT/after-K/: 3,7,10-12, all, sample:K[:SEED].",
    ),
]


RecordCassette = Annotated[
    Path | None,
    typer.Option(
        "--record-cassette",
        metavar="DIR",
        help="Record the continuation's model traffic and outcome into a new cassette (docs/cassettes.md).",
    ),
]


@command()
def run(
    trajectory: TrajectoryArg,
    after_step: RunAfterStep,
    workspace: WorkspaceOpt,
    out: OutDir,
    image: Image = None,
    allow_degraded: AllowDegraded = False,
    force: Force = False,
    task: Task = None,
    cwd: Cwd = None,
    session: Session = None,
    continue_: Annotated[
        bool,
        typer.Option("--continue", help="Continue the pinned agent from the boundary through the bridge."),
    ] = False,
    upstream: Upstream = None,
    upstream_key_env: UpstreamKeyEnv = None,
    boundary_prompt: BoundaryPrompt = None,
    max_steps: MaxSteps = None,
    max_requests: MaxRequests = None,
    max_tokens: MaxTokens = None,
    end_leftovers: EndLeftovers = False,
    idle_timeout: IdleTimeout = None,
    model: Model = None,
    agent_env: AgentEnv = None,
    cassette: CassetteOpt = None,
    record_cassette: RecordCassette = None,
    limits: LimitsOpt = None,
    agent_version: AgentVersion = None,
    require_verified: RequireVerified = False,
    repeat: Repeat = 1,
    json: JsonOpt = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """Rerun steps 1..N in a fresh container, rebuild the native session, and optionally continue the agent.

    Examples:
      replayer run session.jsonl -n 3 -w repo/ -o replay/
      replayer run session.jsonl -n 3 -w git+https://github.com/OWNER/REPO@abc1234 -o replay/ \\
        --continue --upstream https://api.anthropic.com --max-steps 20
      replayer run session.jsonl -n 3 -w repo/ -o replay/ --continue --upstream URL --record-cassette tape/
      replayer run session.jsonl -n 3 -w repo/ -o again/ --continue --cassette tape/
      replayer run session.jsonl -n all -w repo/ -o prefixes/   # one replay, prefixes/after-K/ each
      replayer run session.jsonl -n 5 -w repo/ -o replay/ --repeat 3   # + replay/determinism.json
    """
    if _one_boundary(after_step) is None:
        if repeat > 1:
            raise typer.BadParameter("--repeat takes one boundary", param_hint="--repeat")
        _run_boundaries(
            trajectory,
            after_step,
            workspace,
            out,
            continue_,
            json,
            quiet,
            verbose,
            options={
                **replay_options(allow_degraded, force, task, cwd, session, agent_version, require_verified),
                "image": image,
                "limits": _limits(limits),
            },
        )
        return
    if (cassette or record_cassette) and not continue_:
        raise typer.BadParameter(
            "a cassette is the traffic of a continuation: add --continue", param_hint="--continue"
        )
    if continue_ and cassette and upstream:
        raise typer.BadParameter("--cassette answers offline: give no --upstream", param_hint="--upstream")
    if continue_ and not cassette and not (upstream or settings.load().upstream):
        raise typer.BadParameter(
            f"--continue needs an upstream: {NO_UPSTREAM_HELP} (or REPLAYER_UPSTREAM, or upstream in "
            "replayer.toml)",
            param_hint="--upstream",
        )
    with _progress(json, quiet, verbose) as progress:
        result = api.run(
            trajectory,
            _one_boundary(after_step) or 0,
            _workspace(workspace),
            out,
            continue_agent=continue_,
            on_event=progress,
            repeats=repeat,
            **run_options(
                replay_options(allow_degraded, force, task, cwd, session, agent_version, require_verified),
                image,
                limits,
                (upstream, upstream_key_env, boundary_prompt, max_steps, idle_timeout, model, agent_env),
                cassette=cassette,
                record_cassette=record_cassette,
                budget=(max_requests, max_tokens, end_leftovers),
            ),
        )
    rate = api.determinism_of(out) if repeat > 1 else None
    if json and rate is not None:
        emit_json(
            {
                "out": str(out.absolute()),
                **result.model_dump(mode="json"),
                "determinism": rate.model_dump(mode="json"),
            }
        )
    else:
        _report(result, out, json)
    if rate is not None and not json:
        console.print(f"determinism: {summary(rate)} ({out / DETERMINISM})", highlight=False, markup=False)
    failure = api.continuation_error(result.continuation, out)
    if failure is not None:
        raise failure


def _one_boundary(spec: str) -> int | None:
    """`-n`'s one number (a negative one too: the plan refuses it), or None for the several-boundary forms."""
    try:
        return int(spec)
    except ValueError:
        return None


def _run_boundaries(
    trajectory: Path,
    spec: str,
    workspace: str,
    out: Path,
    continue_: bool,
    json: bool,
    quiet: bool,
    verbose: bool,
    options: Any,
) -> None:
    """`run -n 3,7,12` (several boundaries, one replay): a line a boundary, the first error's exit code."""
    if continue_:
        raise typer.BadParameter("--continue takes one boundary", param_hint="--after-step")
    try:
        api.parse_boundaries(spec)
    except BadInput as exc:
        raise typer.BadParameter(str(exc), param_hint="--after-step") from None
    with _progress(json, quiet, verbose) as progress:
        outcomes = api.run_boundaries(
            trajectory, spec, _workspace(workspace), out, on_event=progress, **options
        )
    if json:
        emit_json(
            {
                "out": str(out.absolute()),
                "boundaries": {
                    str(k): {"out": str(api.boundary_dir(out.absolute(), k)), **r.model_dump(mode="json")}
                    if isinstance(r, ReplayResult)
                    else {"error_kind": r.kind, "error": str(r)}
                    for k, r in sorted(outcomes.items())
                },
            }
        )
    for k, r in sorted(outcomes.items()):
        if json:
            break
        if isinstance(r, ReplayResult):
            counts: dict[str, int] = {}
            for d in r.divergences:
                counts[d.status] = counts.get(d.status, 0) + 1
            summary = ", ".join(f"{v} {s}" for s, v in sorted(counts.items())) or "no calls"
            console.print(f"after {k}: {summary}; {api.boundary_dir(out.absolute(), k)}", highlight=False)
        else:
            console.print(f"after {k}: {r.kind}: {r}", highlight=False, markup=False)
    failed = [r for r in outcomes.values() if not isinstance(r, ReplayResult)]
    if failed:
        raise failed[0]
