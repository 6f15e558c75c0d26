"""`replayer run`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from replayer import api
from replayer.cli import options as opts
from replayer.cli.app import command, console
from replayer.floor.determinism import DETERMINISM, summary
from replayer.floor.options import RunOptions, declared

RunAfterStep = Annotated[
    str,
    typer.Option(
        "--after-step",
        "-n",
        metavar="N",
        help="Boundary: after this many complete tool batches; or several, replayed once, each into "
        "OUT/after-K/: 3,7,10-12, all, sample:K[:SEED] (with --continue, each continues in a container "
        "forked from its boundary).",
    ),
]


@command()
def run(
    trajectory: opts.TrajectoryArg,
    after_step: RunAfterStep,
    workspace: opts.WorkspaceOpt,
    out: opts.OutDir,
    image: opts.Image = None,
    allow_degraded: opts.AllowDegraded = False,
    force: opts.Force = False,
    task: opts.Task = None,
    cwd: opts.Cwd = None,
    session: opts.Session = None,
    continue_: Annotated[
        bool,
        typer.Option("--continue", help="Continue the pinned agent from the boundary through the bridge."),
    ] = False,
    upstream: opts.Upstream = None,
    upstream_key_env: opts.UpstreamKeyEnv = None,
    boundary_prompt: opts.BoundaryPrompt = None,
    max_steps: opts.MaxSteps = None,
    max_requests: opts.MaxRequests = None,
    max_tokens: opts.MaxTokens = None,
    loop_limit: opts.LoopLimit = None,
    end_leftovers: opts.EndLeftovers = None,
    idle_timeout: opts.IdleTimeout = None,
    model: opts.Model = None,
    agent_env: opts.AgentEnv = None,
    cassette: opts.CassetteOpt = None,
    record_cassette: opts.RecordCassette = None,
    limits: opts.LimitsOpt = None,
    agent_version: opts.AgentVersion = None,
    require_verified: opts.RequireVerified = False,
    repeat: opts.Repeat = 1,
    json: opts.JsonOpt = False,
    quiet: opts.Quiet = False,
    verbose: opts.Verbose = False,
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
    options = opts.given(locals(), declared(RunOptions))
    one = opts.one_boundary(after_step)  # options that do not go together: api.check_run_options refuses
    if one is None:
        if repeat > 1:
            raise typer.BadParameter("--repeat takes one boundary", param_hint="--repeat")
        _run_boundaries(trajectory, after_step, workspace, out, continue_, json, quiet, verbose, options)
        return
    with opts._progress(json, quiet, verbose) as progress:
        result = api.run(
            trajectory,
            one,
            opts._workspace(workspace),
            out,
            continue_agent=continue_,
            on_event=progress,
            repeats=repeat,
            **options,
        )
    rate = api.determinism_of(out) if repeat > 1 else None
    if json and rate is not None:
        opts.emit_json(
            {
                "out": str(out.absolute()),
                **result.model_dump(mode="json"),
                "determinism": rate.model_dump(mode="json"),
            }
        )
    else:
        opts._report(result, out, json)
    if rate is not None and not json:
        console.print(f"determinism: {summary(rate)} ({out / DETERMINISM})", highlight=False, markup=False)
    failure = api.continuation_error(result.continuation, out)
    if failure is not None:
        raise failure


def _run_boundaries(
    trajectory: Path,
    spec: str,
    workspace: str,
    out: Path,
    continue_: bool,
    json: bool,
    quiet: bool,
    verbose: bool,
    options: dict[str, Any],
) -> None:
    """`run -n 3,7,12` (several boundaries, one replay; with --continue, a continuation forked from each
    boundary): a line a boundary, the first error's exit code (a refused or failed continuation's too)."""
    with opts._progress(json, quiet, verbose) as progress:
        outcomes = api.run_boundaries(
            trajectory,
            spec,
            opts._workspace(workspace),
            out,
            continue_agent=continue_,
            on_event=progress,
            **options,
        )
    opts.report_boundaries(out, outcomes, json)
