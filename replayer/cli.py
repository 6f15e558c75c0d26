"""The `replayer` command. Every verb has --json; exit codes are documented in docs/cli.md."""

from __future__ import annotations

import functools
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from replayer import __version__, api, divergence, docs, settings, signals
from replayer.errors import NO_UPSTREAM_HELP, BadInput, Interrupted, ReplayError
from replayer.live import LiveProgress, megabytes
from replayer.models import (
    ContinuationResult,
    GitWorkspace,
    ImageStatus,
    InspectReport,
    InstalledBundle,
    ReplayResult,
    SandboxLimits,
    StartingState,
    workspace_spec,
)

if TYPE_CHECKING:
    from replayer.verdicts import Verdict


class _NamedArgument(TyperArgument):
    def display_type_rich(self, ctx: Any) -> str | None:
        return None  # its metavar (TRAJECTORY, AGENT@VERSION) says what it is


def _plain_flags(params: list[Any]) -> list[Any]:
    """Help without typer's type placeholders: none after a flag (typer shows `--json <bool>`; a flag takes
    no value), none after an argument that has a metavar (`AGENT@VERSION <list[str]>`)."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
        elif type(param) is TyperArgument and param.metavar is not None:
            param.__class__ = _NamedArgument  # typer makes the parameter objects; only their display changes
    return params


class _Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))

    def invoke(self, ctx: Any) -> Any:
        # the one place every command reads the settings before it starts: a bad file, or a project file
        # that sets what its folder may not, refuses them all alike (`trust` reads only the user's file)
        if self.name != "trust":
            settings.load()
        return super().invoke(ctx)


class _Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))


app = typer.Typer(
    cls=_Group,
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Replay coding-agent trajectories in containers.\n\n"
    "Shell completion: replayer --install-completion (bash, zsh, fish, PowerShell).\n\n" + docs.where(),
)
command = functools.partial(app.command, cls=_Command, epilog=docs.where())
console = Console(soft_wrap=True)  # a path or a command line is never broken across lines
err_console = Console(stderr=True, soft_wrap=True)


def _print_version(wanted: bool) -> None:
    if not wanted:
        return
    from replayer.pins import load_pins

    pins = load_pins()
    lines = [f"replayer {__version__}", "pinned agents:"]
    for agent, pin in pins.agents.items():
        lines.append(f"  {agent} {pin.version} ({'npm' if pin.npm else 'PyPI'} {pin.package})")
    lines.append(f"base image: {pins.base_image.tag}")
    typer.echo("\n".join(lines))
    raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the replayer's version and the pinned agent versions, and exit.",
        ),
    ] = False,
) -> None:
    pass


TrajectoryArg = Annotated[
    Path,
    typer.Argument(
        metavar="TRAJECTORY", help="The agent's native file (or an OpenHands V1 conversation directory)."
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]
AfterStep = Annotated[
    int,
    typer.Option("--after-step", "-n", metavar="N", help="Boundary: after this many complete tool batches."),
]
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
OutDir = Annotated[
    Path, typer.Option("--out", "-o", metavar="DIR", help="Output directory (written atomically).")
]
AllowDegraded = Annotated[
    bool,
    typer.Option(
        "--allow-degraded", help="Keep historical observations where a rerun is impossible; recorded."
    ),
]
AgentVersion = Annotated[
    str | None,
    typer.Option(
        "--agent-version",
        metavar="VERSION",
        help="Run this agent version (default: the one the file records or implies, else the pinned one).",
    ),
]
RequireVerified = Annotated[
    bool,
    typer.Option("--require-verified", help="Refuse a version that is not verified instead of running it."),
]
Task = Annotated[
    str | None,
    typer.Option(
        "--task",
        metavar="TEXT",
        help="The first user prompt, for an OpenCode event log (it does not print it).",
    ),
]
Cwd = Annotated[
    str | None,
    typer.Option(
        "--cwd",
        metavar="PATH",
        help="The working directory, for a file that records none (inferred where its paths reveal it) "
        "or a relative one.",
    ),
]
Session = Annotated[
    str | None,
    typer.Option(
        "--session",
        metavar="ID",
        help="The session to replay, of a file that holds several (`inspect` lists them).",
    ),
]
Force = Annotated[bool, typer.Option("--force", help="Replace an existing output directory.")]
Image = Annotated[
    str | None,
    typer.Option(
        "--image",
        metavar="IMAGE",
        help="Sandbox image (default: the project's base image); auto: the environment image the "
        "trajectory names (SWE-bench style).",
    ),
]
WorkspaceOpt = Annotated[
    str,
    typer.Option(
        "--workspace",
        "-w",
        metavar="DIR|git+URL@REV",
        help="Initial workspace, copied and never modified: a directory, or git+URL@REV (a repository "
        "cloned once into a cache and checked out at REV: a commit, tag or branch).",
    ),
]
Upstream = Annotated[
    str | None,
    typer.Option(
        "--upstream",
        metavar="URL|mock[:FILE]",
        help="Model service base URL; `mock` is the built-in offline model (no key, a short final "
        'answer), `mock:FILE` answers from a script of turns (docs/cli.md, "The mock model").',
    ),
]
UpstreamKeyEnv = Annotated[
    str | None,
    typer.Option(
        "--upstream-key-env",
        metavar="VAR",
        help="Host variable with the upstream key (only the bridge reads it); "
        "default ANTHROPIC_API_KEY for Claude Code, OPENAI_API_KEY for chat-completions agents.",
    ),
]
BoundaryPrompt = Annotated[
    str | None,
    typer.Option(
        "--boundary-prompt", metavar="TEXT", help="A user prompt after the boundary, instead of the nonce."
    ),
]
MaxSteps = Annotated[
    int | None, typer.Option("--max-steps", metavar="K", help="Main-thread model requests allowed.")
]
MaxRequests = Annotated[
    int | None,
    typer.Option(
        "--max-requests",
        metavar="K",
        min=1,
        help="Every model request the bridge forwards, main-thread and side calls (default 500).",
    ),
]
MaxTokens = Annotated[
    int | None,
    typer.Option(
        "--max-tokens",
        metavar="T",
        min=1,
        help="Tokens (input and output) after which the bridge forwards nothing more (default 50000000).",
    ),
]
EndLeftovers = Annotated[
    bool,
    typer.Option(
        "--end-leftovers",
        help="End the processes the prefix left running (listed in the result) before the agent starts.",
    ),
]
IdleTimeout = Annotated[
    float | None,
    typer.Option(
        "--idle-timeout",
        metavar="SECONDS",
        help="Seconds without output or traffic (default 300; OpenCode 600).",
    ),
]
Model = Annotated[
    str | None,
    typer.Option("--model", metavar="MODEL", help="Model for the continuation (default: recorded)."),
]
CassetteOpt = Annotated[
    Path | None,
    typer.Option(
        "--cassette",
        metavar="DIR",
        help="Answer from this cassette, offline (no upstream), and verify the outcome (docs/cassettes.md).",
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
LimitsOpt = Annotated[
    str | None,
    typer.Option(
        "--limits",
        metavar="SPEC",
        help="Container limits, any of memory=4g,pids=1024,cpus=2,disk=8g,files=200000 (disk: the quota "
        "of the container's file system and of the workspace + agent home; recorded in result.json).",
    ),
]
AgentEnv = Annotated[
    list[str] | None,
    typer.Option(
        "--agent-env",
        metavar="KEY=VALUE",
        help="KEY=VALUE for the agent's environment, its reruns and its continuation (repeatable).",
    ),
]


Quiet = Annotated[
    bool,
    typer.Option("--quiet", "-q", help="No live progress (there is none when stdout is not a terminal)."),
]
Verbose = Annotated[bool, typer.Option("--verbose", "-v", help="Debug log of the pipeline on stderr.")]


def _progress(json: bool, quiet: bool, verbose: bool) -> LiveProgress:
    """The live progress of a long verb, on stderr; only for a person at a terminal."""
    _log_level(verbose)
    shown = not (json or quiet) and sys.stdout.isatty() and err_console.is_terminal
    return LiveProgress(err_console, enabled=shown, lines=not (json or quiet or shown))


class _Stderr(logging.Handler):
    """Log lines to the current sys.stderr: under live progress that is rich's proxy, which prints them
    above the status line instead of through it."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:
            self.handleError(record)


_LOG_HANDLER = _Stderr()


def _log_level(verbose: bool) -> None:
    """Warnings of the replayer's loggers on stderr as plain lines; with --verbose, its debug log too.
    The root logger (other libraries', a test runner's) is left alone."""
    _LOG_HANDLER.setFormatter(
        logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s" if verbose else "%(message)s")
    )
    for name in ("replayer", "adapters", "bridges", "sandboxes"):
        logger = logging.getLogger(name)
        if _LOG_HANDLER not in logger.handlers:
            logger.addHandler(_LOG_HANDLER)
        logger.setLevel(logging.DEBUG if verbose else logging.WARNING)


def _agent_env(items: list[str] | None) -> dict[str, str]:
    pairs = [item.partition("=") for item in items or []]
    if any(not sep or not key for key, sep, _ in pairs):
        raise typer.BadParameter("expected KEY=VALUE", param_hint="--agent-env")
    return {key: value for key, _, value in pairs}


def _workspace(spec: str) -> Path | GitWorkspace:
    try:
        parsed = workspace_spec(spec)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--workspace") from None
    return parsed if isinstance(parsed, GitWorkspace) else Path(spec)


def _limits(spec: str | None) -> SandboxLimits:
    """--limits over the limits of the settings (replayer.toml, REPLAYER_LIMITS)."""
    found = settings.load()
    try:
        SandboxLimits.parse(spec or "")
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--limits") from None
    return found.sandbox_limits(spec)


def _replay_options(
    allow_degraded: bool,
    force: bool,
    task: str | None,
    cwd: str | None,
    session: str | None,
    agent_version: str | None,
    require_verified: bool,
) -> api.ReplayOptions:
    return api.ReplayOptions(
        allow_degraded=allow_degraded,
        force=force,
        task=task,
        cwd=cwd,
        session=session,
        agent_version=agent_version,
        require_verified=require_verified,
    )


def _run_options(
    shared: api.ReplayOptions,
    image: str | None,
    limits: str | None,
    continuation: tuple[
        str | None, str | None, str | None, int | None, float | None, str | None, list[str] | None
    ],
    cassette: Path | None = None,
    record_cassette: Path | None = None,
    budget: tuple[int | None, int | None, bool] = (None, None, False),
) -> api.RunOptions:
    """`run` and `compare`'s options for the API; `continuation`: the --continue options, in their order."""
    upstream, upstream_key_env, boundary_prompt, max_steps, idle_timeout, model, agent_env = continuation
    max_requests, max_tokens, end_leftovers = budget
    return api.RunOptions(
        **shared,
        image=image,
        limits=_limits(limits),
        upstream=upstream,
        upstream_key_env=upstream_key_env,
        boundary_prompt=boundary_prompt,
        max_steps=max_steps,
        max_requests=max_requests,
        max_tokens=max_tokens,
        end_leftovers=end_leftovers or None,
        idle_timeout=idle_timeout,
        model=model,
        agent_env=_agent_env(agent_env),
        cassette=cassette,
        record_cassette=record_cassette,
    )


def _emit_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


@command()
def inspect(
    trajectory: TrajectoryArg,
    task: Task = None,
    cwd: Cwd = None,
    session: Session = None,
    json: JsonOpt = False,
) -> None:
    """Detect the agent and list a trajectory's steps (complete tool batches), or a file's sessions.

    Examples:
      replayer inspect ~/.claude/projects/-repo/0b6c5f3e.jsonl
      replayer inspect output.jsonl --session django__django-11099 --json
    """
    report = api.inspect(trajectory, task=task, cwd=cwd, session=session)
    if report.sessions:
        _inspect_sessions(trajectory, report, json)
        return
    if json:
        _emit_json(report.model_dump(mode="json"))
        return
    console.print(
        f"agent [bold]{report.agent}[/] " + escape(inspect_header(report)),
        soft_wrap=True,  # the header stays one line
    )
    if report.start is not None:
        console.print(f"started from {_start_text(report.start)}", highlight=False, soft_wrap=True)
    table = Table("step", "tools", "call ids", "observed", "kind")
    for step in report.steps:
        notes = (
            ("" if step.complete else " (incomplete)")
            + (" (pre-compaction)" if step.before_compaction else "")
            + (" (run ended)" if step.final else "")
        )
        table.add_row(
            f"{step.index}{notes}",
            escape(", ".join(c.tool for c in step.calls)),
            escape(", ".join(c.id for c in step.calls)),
            ", ".join("yes" if c.has_observation else "NO" for c in step.calls),
            ", ".join(c.kind for c in step.calls),
        )
    console.print(table)
    reasons = sorted({c.reason for s in report.steps for c in s.calls if c.reason})
    for reason in reasons[:20]:
        console.print(f"unknown: {reason}", highlight=False, soft_wrap=True, markup=False)
    version = report.version
    if reasons and version is not None and version.source == "default":
        console.print(
            f"the file records no version, so these are {report.agent} {version.version}'s tools; "
            "--agent-version V classifies at the version that recorded it",
            highlight=False,
            soft_wrap=True,
        )
    for note in report.parse_notes:
        console.print(f"note: {note}", markup=False, highlight=False)


def inspect_header(report: InspectReport) -> str:
    """The header after the agent's name: version, session, cwd (and image); what the file does not record
    is said so, with what stands in for it."""
    version = report.agent_version
    if version is None:
        would = f": {report.agent} {report.version.version} would run" if report.version else ""
        version = f"(version not recorded{would})"
    session = report.session_id or "(not recorded)"
    cwd = report.cwd or "(not recorded: run needs --cwd)"
    if report.cwd and report.cwd_source not in (None, "recorded"):
        cwd = f"{report.cwd} ({report.cwd_source})"
    image = f"  image {report.environment_image}" if report.environment_image else ""
    return f"{version}  session {session}  cwd {cwd}{image}"


def _start_text(start: StartingState) -> str:
    where = start.repository_url or "a repository"
    at = f" at {start.commit}" if start.commit else ""
    branch = f" (branch {start.branch})" if start.branch not in (None, "HEAD") else ""
    branch = " (detached HEAD)" if start.branch == "HEAD" else branch
    again = (
        f": --workspace git+{start.repository_url}@{start.commit} starts from it"
        if start.repository_url and start.commit
        else ""
    )
    return f"{where}{at}{branch}{again}"


def _inspect_sessions(path: Path, report: InspectReport, json: bool) -> None:
    summaries = report.sessions
    if json:
        _emit_json(report.model_dump(mode="json"))
        return
    console.print(
        f"{path} holds {len(summaries)} sessions; choose one with --session ID",
        highlight=False,
        soft_wrap=True,
    )
    table = Table("session", "agent", "steps", "first prompt")
    for s in summaries:
        prompt = " ".join((s.first_prompt or "").split())[:80]
        table.add_row(escape(s.id), s.agent, str(s.steps), escape(prompt))
    console.print(table)


def _report(result: ReplayResult, out: Path, json: bool) -> None:
    if json:
        _emit_json({"out": str(out.absolute()), **result.model_dump(mode="json")})
        return
    counts: dict[str, int] = {}
    for d in result.divergences:
        counts[d.status] = counts.get(d.status, 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "no calls"
    ran = result.version
    version = f"{ran.version} ({ran.source}, {ran.status})" if ran else result.agent_version
    console.print(f"{result.agent} {version}: boundary after step {result.after_step}; {summary}")
    if ran and ran.note:
        console.print(f"  note: {ran.note}", markup=False, highlight=False)
    for each in result.installed:
        console.print(installed_line(each), markup=False, highlight=False)
    for note in result.parse_notes:
        console.print(f"  note: {note}", markup=False, highlight=False)
    for d in result.divergences:
        if d.status == "different":
            console.print(
                f"  [yellow]different[/] step {d.step} "
                + escape(f"{d.tool} {d.call_id} {divergence.position(d)}")
            )
    for g in result.degradations:
        console.print(f"  [red]degraded[/] {escape(g.reason)} ({g.action})")
    for hint in result.hints:
        console.print(f"  hint: {hint}", highlight=False, markup=False)
    if result.continuation is not None:
        console.print(continuation_line(result.continuation), highlight=False, markup=False)
        for note in result.continuation.cassette.notes if result.continuation.cassette else []:
            console.print(
                f"  cassette note: {note}", markup=False, highlight=False
            )  # e.g. a bound that cut the oracle's read
        left = result.continuation.leftovers
        if left.count:
            what = "ended" if left.ended else "left running (--end-leftovers ends them)"
            console.print(
                f"  {left.count} process(es) the prefix left running: {what} (continuation.leftovers)"
            )
        if result.continuation.refusals:
            reasons = ", ".join(sorted({r.reason for r in result.continuation.refusals}))
            console.print(
                f"  {result.continuation.counters.refused_requests} request(s) refused by the bridge: {reasons} "
                "(continuation.refusals)"
            )
    console.print(f"result: {out.absolute() / 'result.json'}")


def installed_line(each: InstalledBundle) -> str:
    """The summary's line for a bundle this run installed first."""
    return (
        f"  installed {each.agent} {each.version} from {each.source} first ({megabytes(each.bytes)}, "
        f"{each.seconds:.1f}s; later runs reuse it)"
    )


def continuation_line(cont: ContinuationResult) -> str:
    """The summary's continuation line: how it went and where its answers came from."""
    line = (
        f"continuation: input condition {cont.input_condition}; gate {cont.gate}; "
        f"agent_status {cont.agent_status}; {cont.steps_used} step(s) through the bridge"
    )
    if cont.mock:
        line += "; answers from the mock model"
    check = cont.cassette
    if check is not None:
        line += f"; cassette {check.verdict}"
        if check.where is not None:
            line += f" (the {check.where} differs)"
    return line


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
        shared = _replay_options(allow_degraded, force, task, cwd, session, agent_version, require_verified)
        result = api.prepare(trajectory, after_step, out, on_event=progress, **shared)
    _report(result, out, json)


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
    """
    if _one_boundary(after_step) is None:
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
                **_replay_options(allow_degraded, force, task, cwd, session, agent_version, require_verified),
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
            **_run_options(
                _replay_options(allow_degraded, force, task, cwd, session, agent_version, require_verified),
                image,
                limits,
                (upstream, upstream_key_env, boundary_prompt, max_steps, idle_timeout, model, agent_env),
                cassette=cassette,
                record_cassette=record_cassette,
                budget=(max_requests, max_tokens, end_leftovers),
            ),
        )
    _report(result, out, json)
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
        _emit_json(
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


@command()
def batch(
    manifest: Annotated[
        Path, typer.Argument(metavar="MANIFEST", help="JSONL, one job source per line (docs/batch.md).")
    ],
    out: Annotated[
        Path,
        typer.Option("--out", "-o", metavar="DIR", help="Batch directory (resumable: reuse it to resume)."),
    ],
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            "-j",
            metavar="N",
            help="Jobs at once (default: the workers setting, else the core count).",
            show_default=False,  # 0 stands for that default
        ),
    ] = 0,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray", metavar="ADDRESS", help="Run on Ray: an address, 'auto', or 'local' (a local cluster)."
        ),
    ] = None,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="Rerun jobs that were refused or failed before.")
    ] = False,
    json: JsonOpt = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """Run every job of a JSONL manifest with the ordinary engine; finished jobs are never recomputed.

    Examples:
      replayer batch manifest.jsonl -o batch/ -j 8
      replayer batch manifest.jsonl -o batch/ --ray auto --retry-failed
    """
    with _progress(json, quiet, verbose) as progress:
        summary = api.batch(
            manifest, out, workers=workers or None, ray=ray, retry_failed=retry_failed, on_event=progress
        )
    if json:
        _emit_json({"out": str(out.absolute()), **summary.model_dump(mode="json")})
        return
    refused = sum(summary.refused.values())
    console.print(
        f"{summary.jobs} job(s): {summary.done} done, {summary.skipped} skipped, {refused} refused, "
        f"{summary.failed} failed; summary: {out / 'batch.json'}"
    )
    for reason, count in sorted(summary.refused.items()):
        console.print(f"  refused x{count}: {reason}", highlight=False, markup=False)


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
    workers: Annotated[
        int | None,
        typer.Option(
            "--workers", "-j", metavar="N", min=1, help="Runs at once (default: the workers setting, else 2)."
        ),
    ] = None,
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
            **_run_options(
                _replay_options(allow_degraded, force, task, cwd, session, agent_version, require_verified),
                image,
                limits,
                (upstream, upstream_key_env, boundary_prompt, max_steps, idle_timeout, model, agent_env),
                cassette=cassette,
                budget=(max_requests, max_tokens, end_leftovers),
            ),
        )
    if json:
        _emit_json({"out": str(out.absolute()), **result.model_dump(mode="json")})
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
                f"run {record.variant}/{record.repeat}: {_one_line(why)}",
                highlight=False,
                soft_wrap=True,
                markup=False,
            )
    console.print(f"report: {out.absolute() / 'report.html'}")


@command()
def export(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="A batch directory, or one result directory.")
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", metavar="FILE", help="The JSONL file to write (atomically).")
    ],
    format: Annotated[
        str, typer.Option("--format", metavar="chat|atif", help="Record format: chat or atif (ATIF v1.7).")
    ] = "chat",
    force: Annotated[bool, typer.Option("--force", help="Replace an existing output file.")] = False,
    json: JsonOpt = False,
) -> None:
    """Export the prefixes of a batch (or one result directory) as training records.

    Examples:
      replayer export batch/ -o prefixes.jsonl
      replayer export batch/ --format atif -o trajectories.jsonl --force
    """
    if format not in ("chat", "atif"):
        raise typer.BadParameter(f"unknown format {format!r} (supported: chat, atif)", param_hint="--format")
    summary = api.export(directory, out, format, force=force)
    if json:
        _emit_json(summary.model_dump())
    else:
        console.print(f"{summary.records} record(s), {summary.redactions} redaction(s): {summary.out}")
        if summary.pinned_tools:
            console.print(
                f"  note: {summary.pinned_tools} record(s) carry the pinned version's tool definitions: the "
                "recording version's could not be had (metadata.tools.note says why)",
                highlight=False,
            )


@command()
def view(
    directory: Annotated[
        Path,
        typer.Argument(
            metavar="DIR", help="A replay's output directory (run, prepare), or any folder of results."
        ),
    ],
    json: JsonOpt = False,
) -> None:
    """Write DIR/report.html: the prefix, each rerun's historical and fresh observation side by side, the
    continuation, versions and degradations. On a folder of results (batch, compare, verify outputs, or
    several runs), write DIR/index.html: every run found, filterable, each with its report.

    Examples:
      replayer view out/
      replayer view batch-out/
    """
    shown = api.view(directory)
    if json:
        _emit_json(shown.model_dump(exclude_none=True, exclude={"skipped"} if shown.report else set()))
    elif shown.report:
        console.print(f"report: {shown.report}", highlight=False)
    else:
        console.print(f"{shown.runs} run(s): {shown.index}", highlight=False)
        for note in shown.skipped:
            console.print(f"  note: {note}", markup=False, highlight=False)


@command()
def gc(json: JsonOpt = False) -> None:
    """Remove every container and snapshot image the replayer left behind.

    Examples:
      replayer gc
      replayer gc --json
    """
    report = api.gc()
    removed, images, states = report.removed, report.removed_images, report.removed_states
    if json:
        _emit_json(report.model_dump())
    else:
        console.print(f"removed {len(removed)} container(s)" + (": " + ", ".join(removed) if removed else ""))
        console.print(
            f"removed {len(images)} snapshot image(s)" + (": " + ", ".join(images) if images else "")
        )
        console.print(f"removed {len(states)} state folder(s) of dead runs")
        if report.unmounted_slot_root:
            console.print("unmounted the fork slots' root (no slot left)")


_MESSAGE_CHARS = 500


@command()
def verify(
    specs: Annotated[
        list[str],
        typer.Argument(metavar="AGENT@VERSION", help="e.g. claude_code@2.0.64 (repeatable)."),
    ],
    verdicts: Annotated[
        Path | None,
        typer.Option(
            "--verdicts",
            metavar="DIR",
            help="Store verdicts here (default: REPLAYER_VERDICTS, else beside the bundles).",
        ),
    ] = None,
    json: JsonOpt = False,
) -> None:
    """Probe a version: record, replay at every boundary and continue a session; store the verdict.

    The probe session is recorded with that version's real CLI against a scripted model; a passing
    verdict makes the version verified.

    Examples:
      replayer verify claude_code@2.0.64 codex@0.125.0
      replayer verify codex@0.140.0 --verdicts verdicts/ --json
    """

    def told(verdict: Verdict, path: Path) -> None:
        if json:
            return
        mark = "verified" if verdict.passed else "NOT verified"
        console.print(f"{verdict.agent}@{verdict.version}: {mark} ({path})", highlight=False)
        for c in verdict.checks:
            console.print(f"  {'ok ' if c.passed else 'BAD'} {c.name}: {c.detail}", highlight=False)

    found = api.verify(specs, verdicts, on_verdict=told)
    if json:
        _emit_json([v.model_dump(mode="json") for v in found])
    failed = api.not_verified(found)
    if failed is not None:
        raise failed


@command()
def setup(
    agents: Annotated[
        list[str] | None,
        typer.Option(
            "--agents", metavar="AGENT", help="Only these agents' bundles (repeatable, or comma-separated)."
        ),
    ] = None,
    no_bundles: Annotated[bool, typer.Option("--no-bundles", help="No agent bundles.")] = False,
    no_image: Annotated[bool, typer.Option("--no-image", help="No base image.")] = False,
    json: JsonOpt = False,
) -> None:
    """Make this machine ready to run: the Docker engine, the base image, the pinned agent bundles.

    Each part already there is reused, so running it again is quick. Starting the engine and building
    the image need root (sudo) and apt-get for what is missing; bundles come from npm / PyPI.

    Examples:
      replayer setup
      replayer setup --agents claude_code,codex
      replayer setup --no-bundles --json
    """
    if agents is not None and no_bundles:
        raise typer.BadParameter("give --agents or --no-bundles, not both", param_hint="--agents")
    chosen = [a.strip() for s in agents for a in s.split(",")] if agents is not None else None
    with _progress(json, False, False) as progress:
        report = api.setup(chosen, bundles=not no_bundles, image=not no_image, on_event=progress)
    if json:
        _emit_json(report.model_dump(mode="json"))
        return
    console.print(f"engine: {report.engine}", highlight=False)
    for note in report.notes:  # e.g. no disk quotas for runs (no loop devices here)
        err_console.print(f"note: {note}", highlight=False, markup=False)
    if report.image:
        console.print(f"base image {report.image.tag}: {image_line(report.image)}", highlight=False)
    for each in report.bundles:
        console.print(
            f"{each.agent}@{each.version}: {each.status} ({each.path})", highlight=False, soft_wrap=True
        )


def image_line(image: ImageStatus) -> str:
    """`present (123.4 MB)`, `built (123.4 MB, 95.0s)`."""
    facts = [megabytes(image.bytes)] if image.bytes is not None else []
    if image.seconds is not None:
        facts.append(f"{image.seconds:.1f}s")
    return image.status + (f" ({', '.join(facts)})" if facts else "")


bundles_app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    help="The versioned agent bundle cache (any released version, for offline use).",
)
app.add_typer(bundles_app, name="bundles")


@bundles_app.command("list", cls=_Command)
def bundles_list(json: JsonOpt = False) -> None:
    """The installed bundles: agent, version, whether it is the pinned (verified) one, size, folder.

    Examples:
      replayer bundles list
      replayer bundles list --json
    """
    found = api.bundles_list()
    if json:
        _emit_json([b.model_dump(mode="json") for b in found])
        return
    table = Table("agent", "version", "pinned", "size", "folder")
    for b in found:
        table.add_row(
            b.agent, b.version, "yes" if b.pinned else "", f"{b.size_bytes / 2**20:.0f} MiB", str(b.path)
        )
    console.print(table)


@bundles_app.command("add", cls=_Command)
def bundles_add(
    specs: Annotated[
        list[str] | None,
        typer.Argument(metavar="AGENT@VERSION", help="e.g. claude_code@2.0.64 (repeatable)."),
    ] = None,
    pinned: Annotated[
        bool, typer.Option("--pinned", help="Also every pinned version (and the pin file's `also`).")
    ] = False,
) -> None:
    """Install bundles from npm / PyPI at exact versions (nothing happens for one already installed; one an
    earlier replayer installed without a digest manifest gets one, if nothing in it is someone else's).

    Examples:
      replayer bundles add claude_code@2.0.64 codex@0.125.0
      replayer bundles add --pinned
    """
    if not specs and not pinned:
        raise typer.BadParameter("name AGENT@VERSION or give --pinned", param_hint="SPECS")
    with _progress(False, False, False) as progress:
        added = api.bundles_add(specs or [], pinned, on_event=progress)
    for spec, path in added:
        console.print(f"{spec}: {path}", highlight=False)


@bundles_app.command("rm", cls=_Command)
def bundles_rm(
    specs: Annotated[list[str], typer.Argument(metavar="AGENT@VERSION", help="Repeatable.")],
) -> None:
    """Remove bundles from the cache (a run needing one installs it again).

    Examples:
      replayer bundles rm claude_code@2.0.64
    """
    for spec, gone in api.bundles_rm(specs):
        console.print(f"{spec}: {'removed' if gone else 'not installed'}", highlight=False)


@command()
def trust(
    folder: Annotated[
        Path | None,
        typer.Argument(metavar="DIR", help="The folder whose replayer.toml may set every setting."),
    ] = None,
    remove: Annotated[bool, typer.Option("--remove", help="Trust DIR no more.")] = False,
    list_: Annotated[bool, typer.Option("--list", help="The folders trusted now.")] = False,
    json: JsonOpt = False,
) -> None:
    """Trust a folder's replayer.toml: kept in your own settings file (`trusted`). Until then a project file
    may set only `workers` and tighter `[limits]` (docs/cli.md, "Settings").

    Examples:
      replayer trust ~/work/my-repo
      replayer trust --list
      replayer trust --remove ~/work/my-repo
    """
    from replayer import trust as trusting

    if list_ == (folder is not None) or (remove and folder is None):
        raise typer.BadParameter("name DIR (with or without --remove), or give --list", param_hint="DIR")
    if folder is None:
        found = settings.trusted_folders()
    else:
        found = trusting.remove(folder) if remove else trusting.add(folder)
    if json:
        _emit_json({"user_file": str(settings.user_file()), "trusted": [str(f) for f in found]})
        return
    for each in found:
        console.print(str(each), highlight=False, markup=False)
    if folder is not None:
        err_console.print(f"({settings.user_file()})", highlight=False, markup=False)


def _one_line(message: str) -> str:
    """An error message as one bounded line: a refusal never echoes a huge input back."""
    line = " ".join(message.split())
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 1] + "…"


def main() -> None:
    # Interrupted, not KeyboardInterrupt: typer would turn that into a silent exit; the `finally`
    # blocks on the way up remove containers and partial outputs, and the live-sandbox sweep below
    # removes one that an interruption caught between its creation and its owner's `try`.
    signals.install()
    # aiohttp logs a handler's failure with its traceback (a client gone while the bridge answered, at an
    # interruption); the bridge records what matters, and stderr keeps its one line per error
    logging.getLogger("aiohttp").addHandler(logging.NullHandler())
    logging.getLogger("aiohttp").propagate = False
    try:
        app(
            prog_name="replayer"
        )  # standalone: usage errors exit 2 with click's message; our errors propagate to here
    except Interrupted:
        with signals.deferred():
            api.stop_sandboxes()
        err_console.print("replayer: interrupted", highlight=False)
        sys.exit(Interrupted.exit_code)
    except ReplayError as exc:
        # markup=False: the reason quotes input and agent output, where "[/x]" is text, not a style
        err_console.print(
            f"replayer: {exc.kind}: {_one_line(str(exc))}", highlight=False, soft_wrap=True, markup=False
        )
        sys.exit(exc.exit_code)
    except Exception as exc:
        err_console.print(
            f"replayer: internal error: {type(exc).__name__}: {_one_line(str(exc))}",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )
        sys.exit(1)


if __name__ == "__main__":
    main()
