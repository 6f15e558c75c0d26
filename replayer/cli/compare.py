"""`replayer compare`."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from replayer import api
from replayer.cli.app import command, console
from replayer.cli.options import (
    AfterStep,
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
    RequireVerified,
    Session,
    Task,
    TrajectoryArg,
    Upstream,
    UpstreamKeyEnv,
    Verbose,
    Workers,
    WorkspaceOpt,
    _progress,
    _workspace,
    emit_json,
    given,
    one_line,
)
from replayer.floor.options import RunOptions, declared


@command()
def compare(
    trajectory: TrajectoryArg,
    after_step: AfterStep,
    workspace: WorkspaceOpt,
    out: OutDir,
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
    repeat: Annotated[int, typer.Option("--repeat", "-r", metavar="R", min=1, help="Runs per variant.")] = 1,
    workers: Workers = None,
    parallel: Annotated[
        int | None, typer.Option("--parallel", min=1, hidden=True, help="The old name of --workers.")
    ] = None,
    check: Annotated[
        str | None,
        typer.Option(
            "--check", metavar="COMMAND", help="Shell command run in each run's container afterwards."
        ),
    ] = None,
    check_timeout: Annotated[
        float, typer.Option("--check-timeout", metavar="SECONDS", help="Seconds for the check.")
    ] = 600.0,
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
    image: Image = None,
    allow_degraded: AllowDegraded = False,
    force: Force = False,
    task: Task = None,
    cwd: Cwd = None,
    session: Session = None,
    keep_snapshot: Annotated[
        bool, typer.Option("--keep-snapshot", help="Leave the boundary image (replayer gc removes it).")
    ] = False,
    limits: LimitsOpt = None,
    agent_version: AgentVersion = None,
    require_verified: RequireVerified = False,
    json: JsonOpt = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
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
    if parallel is not None:  # the old name of --workers
        if workers not in (None, parallel):
            raise typer.BadParameter("give --workers (-j) only; --parallel is its old name", param_hint="-j")
        workers = parallel
    with _progress(json, quiet, verbose) as progress:
        result = api.compare(
            trajectory,
            after_step,
            _workspace(workspace),
            out,
            variants,
            repeat=repeat,
            workers=workers,
            check=check,
            check_timeout=check_timeout,
            keep_snapshot=keep_snapshot,
            on_event=progress,
            **given(locals(), declared(RunOptions)),
        )
    if json:
        emit_json({"out": str(out.absolute()), **result.model_dump(mode="json")})
        return
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
                f"run {record.variant}/{record.repeat}: {one_line(why)}",
                highlight=False,
                soft_wrap=True,
                markup=False,
            )
    console.print(f"report: {out.absolute() / 'report.html'}")
