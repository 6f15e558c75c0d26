"""The options and arguments more than one command takes, and the helpers they share."""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.markup import escape

from replayer import api
from replayer.cli.app import console, err_console
from replayer.cli.live import LiveProgress, megabytes
from replayer.floor import divergence, settings
from replayer.floor.models import (
    ContinuationResult,
    GitWorkspace,
    InstalledBundle,
    ReplayResult,
    SandboxLimits,
    workspace_spec,
)

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


def replay_options(
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


def run_options(
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


def emit_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def _report(result: ReplayResult, out: Path, json: bool) -> None:
    if json:
        emit_json({"out": str(out.absolute()), **result.model_dump(mode="json")})
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


_MESSAGE_CHARS = 500


def one_line(message: str) -> str:
    """An error message as one bounded line: a refusal never echoes a huge input back."""
    line = " ".join(message.split())
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 1] + "…"


Repeat = Annotated[
    int,
    typer.Option(
        "--repeat",
        metavar="R",
        min=1,
        max=100,
        help="Rerun the prefix R times, each in a fresh container, and report how often each tool's calls "
        "come back exactly as recorded and what varies (determinism.json).",
    ),
]
