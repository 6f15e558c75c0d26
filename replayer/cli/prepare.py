"""`replayer prepare`."""

from __future__ import annotations

from replayer import api
from replayer.cli.app import command
from replayer.cli.options import (
    AfterStep,
    AgentVersion,
    AllowDegraded,
    Cwd,
    Force,
    JsonOpt,
    OutDir,
    Quiet,
    RequireVerified,
    Session,
    Task,
    TrajectoryArg,
    Verbose,
    _progress,
    _report,
    given,
)
from replayer.floor.options import ReplayOptions, declared


@command()
def prepare(
    trajectory: TrajectoryArg,
    after_step: AfterStep,
    out: OutDir,
    allow_degraded: AllowDegraded = False,
    force: Force = False,
    task: Task = None,
    cwd: Cwd = None,
    session: Session = None,
    agent_version: AgentVersion = None,
    require_verified: RequireVerified = False,
    json: JsonOpt = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """Zero execution: rebuild the native prefix with the historical observations and expected_prefix.json.

    Examples:
      replayer prepare session.jsonl -n 3 -o prefix/
      replayer prepare run.jsonl -n 2 -o prefix/ --task "the first prompt" --json
    """
    with _progress(json, quiet, verbose) as progress:
        result = api.prepare(
            trajectory, after_step, out, on_event=progress, **given(locals(), declared(ReplayOptions))
        )
    _report(result, out, json)
