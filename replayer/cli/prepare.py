"""`replayer prepare`."""

from __future__ import annotations

from typing import Annotated

import typer

from replayer import api
from replayer.cli import options as opts
from replayer.cli.app import command
from replayer.floor.options import ReplayOptions, declared

PrepareAfterStep = Annotated[
    str,
    typer.Option(
        "--after-step",
        "-n",
        metavar="N",
        help="Boundary: after this many complete tool batches; or several, from one parse, each into "
        "OUT/after-K/: 3,7,10-12, all, sample:K[:SEED].",
    ),
]


@command()
def prepare(
    trajectory: opts.TrajectoryArg,
    after_step: PrepareAfterStep,
    out: opts.OutDir,
    allow_degraded: opts.AllowDegraded = False,
    force: opts.Force = False,
    task: opts.Task = None,
    cwd: opts.Cwd = None,
    session: opts.Session = None,
    agent_version: opts.AgentVersion = None,
    require_verified: opts.RequireVerified = False,
    json: opts.JsonOpt = False,
    quiet: opts.Quiet = False,
    verbose: opts.Verbose = False,
) -> None:
    """Zero execution: rebuild the native prefix with the historical observations and expected_prefix.json.

    Examples:
      replayer prepare session.jsonl -n 3 -o prefix/
      replayer prepare run.jsonl -n 2 -o prefix/ --task "the first prompt" --json
      replayer prepare session.jsonl -n all -o prefixes/   # one parse, prefixes/after-K/ each
    """
    options = opts.given(locals(), declared(ReplayOptions))
    one = opts.one_boundary(after_step)
    with opts._progress(json, quiet, verbose) as progress:
        if one is None:
            outcomes = api.prepare_boundaries(trajectory, after_step, out, on_event=progress, **options)
        else:
            result = api.prepare(trajectory, one, out, on_event=progress, **options)
    if one is None:
        opts.report_boundaries(out, outcomes, json)
    else:
        opts._report(result, out, json)
