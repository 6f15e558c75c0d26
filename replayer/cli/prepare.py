"""`replayer prepare`."""

from __future__ import annotations

from replayer import api
from replayer.cli import options as opts
from replayer.cli.app import command
from replayer.floor.options import ReplayOptions, declared


@command()
def prepare(
    trajectory: opts.TrajectoryArg,
    after_step: opts.AfterStep,
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
    """
    with opts._progress(json, quiet, verbose) as progress:
        result = api.prepare(
            trajectory, after_step, out, on_event=progress, **opts.given(locals(), declared(ReplayOptions))
        )
    opts._report(result, out, json)
