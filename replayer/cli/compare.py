"""`replayer compare`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from replayer import api
from replayer.cli import options as opts
from replayer.cli.app import command, console
from replayer.floor.compare_results import CompareResult
from replayer.floor.errors import ReplayError
from replayer.floor.options import CompareOptions, declared

CompareAfterStep = Annotated[
    str,
    typer.Option(
        "--after-step",
        "-n",
        metavar="N",
        help="Boundary: after this many complete tool batches; or several, replayed once, every variant "
        "forked from each, each compare into OUT/after-K/ (OUT/summary.json): 3,7,10-12, all, "
        "sample:K[:SEED].",
    ),
]


@command()
def compare(
    trajectory: opts.TrajectoryArg,
    after_step: CompareAfterStep,
    workspace: opts.WorkspaceOpt,
    out: opts.OutDir,
    variant: Annotated[
        list[str],
        typer.Option(
            "--variant",
            metavar="NAME=SPEC",
            help="Repeatable. SPEC: key=value,... (agent_version, model, boundary_prompt, upstream, "
            "upstream_key_env, patch, max_steps, idle_timeout, agent_env.KEY; docs/cli.md) or a JSON "
            "object; empty: the shared settings.",
        ),
    ],
    repeat: opts.Runs = 1,
    workers: opts.Workers = None,
    check: opts.Check = None,
    check_timeout: opts.CheckTimeout = 600.0,
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
    image: opts.Image = None,
    allow_degraded: opts.AllowDegraded = False,
    force: opts.Force = False,
    task: opts.Task = None,
    cwd: opts.Cwd = None,
    session: opts.Session = None,
    keep_snapshot: opts.KeepSnapshot = False,
    limits: opts.LimitsOpt = None,
    agent_version: opts.AgentVersion = None,
    require_verified: opts.RequireVerified = False,
    json: opts.JsonOpt = False,
    quiet: opts.Quiet = False,
    verbose: opts.Verbose = False,
) -> None:
    """Replay the prefix once, then run every variant from a snapshot of the boundary; one report.

    Examples:
      replayer compare session.jsonl -n 13 -w repo/ -o cmp/ --upstream https://api.anthropic.com \\
        --variant base= --variant opus=model=claude-opus-5 --variant fix=patch=fix.diff -r 3 -j 4
      replayer compare session.jsonl -n 13 -w repo/ -o cmp/ --upstream URL \\
        --variant hint=boundary_prompt="Run the tests first." --check "pytest -x"
    """
    try:
        variants = [api.parse_variant(v) for v in variant]
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--variant") from None
    one = opts.one_boundary(after_step)
    with opts._progress(json, quiet, verbose) as progress:
        shared: dict[str, Any] = {"on_event": progress, **opts.given(locals(), declared(CompareOptions))}
        space = opts._workspace(workspace)
        if one is None:
            outcomes = api.compare_boundaries(trajectory, after_step, space, out, variants, **shared)
        else:
            result = api.compare(trajectory, one, space, out, variants, **shared)
    if one is None:
        _report_boundaries(outcomes, out, json)
        return
    if json:
        opts.emit_json({"out": str(out.absolute()), **result.model_dump(mode="json")})
        return
    _report(result, out)


def _report(result: CompareResult, out: Path) -> None:
    table = Table("variant", "runs", "failed (infra)", "agent status", "check passed", "tokens in/out")
    for v in result.variants:
        statuses = ", ".join(f"{k} x{n}" for k, n in sorted(v.agent_status.items())) or "-"
        passed = (
            "-" if v.check_pass_rate is None else f"{v.check_passed}/{v.runs - v.infrastructure_failures}"
        )
        tokens = (
            "-"
            if v.input_tokens is None and v.output_tokens is None
            else f"{v.input_tokens}/{v.output_tokens}"
        )
        failed = f"{v.failed_runs} ({v.infrastructure_failures})"
        table.add_row(v.name, str(v.runs), failed, statuses, passed, tokens)
    console.print(table)
    for record in result.runs:  # why each run failed, or its continuation was refused or failed (as `run`)
        failure = api.continuation_error(record.continuation, out / record.dir)
        why = f"{failure.kind}: {failure}" if failure else None
        if record.status == "failed":
            why = f"{record.error_kind or 'failed'}: {record.error}"
        if why is not None:
            console.print(
                f"run {record.variant}/{record.repeat}: {opts.one_line(why)}",
                highlight=False,
                soft_wrap=True,
                markup=False,
            )
    console.print(f"report: {out.absolute() / 'report.html'}")


def _report_boundaries(outcomes: dict[int, CompareResult | ReplayError], out: Path, json: bool) -> None:
    """`compare -n a,b,...`: each boundary's compare as `compare -n K` prints it (a line for a boundary
    without one), then the first refused boundary's exit code."""
    if json:
        opts.emit_boundaries(out, outcomes)
    for k, r in outcomes.items():
        if json:
            break
        console.print(f"after {k}:", highlight=False)
        if isinstance(r, CompareResult):
            _report(r, api.boundary_dir(out, k))
        else:
            console.print(f"{r.kind}: {opts.one_line(str(r))}", highlight=False, markup=False)
    if not json:
        console.print(f"summary: {out.absolute() / 'summary.json'}", highlight=False)
    refused = next((r for r in outcomes.values() if isinstance(r, ReplayError)), None)
    if refused is not None:
        raise refused
