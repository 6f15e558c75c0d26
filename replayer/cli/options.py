"""The options and arguments more than one command takes, and the helpers they share. An option that reaches
a request is declared once, in floor/options.py: its flag here is made from that declaration (`flag`), and
`given` hands a command's values to the API, which merges them over the settings (floor/merge.py)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from pydantic import BaseModel
from rich.markup import escape

from replayer import api
from replayer.cli.app import console, err_console
from replayer.cli.app import one_line as one_line
from replayer.cli.live import LiveProgress, megabytes
from replayer.floor import divergence, settings
from replayer.floor.errors import BadInput, ReplayError
from replayer.floor.limits import SandboxLimits
from replayer.floor.options import OPTIONS
from replayer.floor.requests import GitWorkspace, workspace_spec
from replayer.floor.results import ContinuationResult, ReplayResult
from replayer.floor.versions import InstalledBundle, VersionRecord

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


def one_boundary(spec: str) -> int | None:
    """`-n`'s one number (a negative one too: the plan refuses it), or None for the several-boundary forms
    (checked: a usage error if `spec` is neither)."""
    try:
        return int(spec)
    except ValueError:
        pass
    try:
        api.parse_boundaries(spec)
    except BadInput as exc:
        raise typer.BadParameter(str(exc), param_hint="--after-step") from None
    return None


def report_boundaries(out: Path, outcomes: Mapping[int, ReplayResult | ReplayError], json: bool) -> None:
    """What a command at several boundaries prints (`--json`: `emit_boundaries`), then the first error's
    exit: a line a boundary, a refused boundary's or a refused or failed continuation's error."""
    if json:
        emit_boundaries(out, outcomes)
    for k, r in sorted(outcomes.items()):
        if json:
            break
        if isinstance(r, ReplayResult):
            counts: dict[str, int] = {}
            for d in r.divergences:
                counts[d.status] = counts.get(d.status, 0) + 1
            summary = ", ".join(f"{v} {s}" for s, v in sorted(counts.items())) or "no calls"
            ended = f", agent {r.continuation.agent_status}" if r.continuation else ""
            console.print(
                f"after {k}: {summary}{ended}; {api.boundary_dir(out.absolute(), k)}", highlight=False
            )
        else:
            console.print(f"after {k}: {r.kind}: {r}", highlight=False, markup=False)
    failed = [
        r
        if not isinstance(r, ReplayResult)
        else api.continuation_error(r.continuation, api.boundary_dir(out, k))
        for k, r in sorted(outcomes.items())
    ]
    first = next((f for f in failed if f is not None), None)
    if first is not None:
        raise first


def emit_boundaries(out: Path, outcomes: Mapping[int, BaseModel | ReplayError]) -> None:
    """`--json` of a command at several boundaries: `{"out", "boundaries": {"K": its result and "out", or
    {"error_kind", "error"}}}`."""
    emit_json(
        {
            "out": str(out.absolute()),
            "boundaries": {
                str(k): {"error_kind": r.kind, "error": str(r)}
                if isinstance(r, ReplayError)
                else {"out": str(api.boundary_dir(out.absolute(), k)), **r.model_dump(mode="json")}
                for k, r in sorted(outcomes.items())
            },
        }
    )


OutDir = Annotated[
    Path, typer.Option("--out", "-o", metavar="DIR", help="Output directory (written atomically).")
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


def flag(name: str, **otherwise: Any) -> Any:
    """The typer option of a declared option (floor/options.py); `otherwise`: what one command says instead."""
    o = OPTIONS[name]
    shown = {
        "metavar": o.metavar,
        "help": o.help,
        "min": o.min,
        "hidden": o.hidden,
        "show_default": o.show_default,
    }
    return typer.Option(*o.flags, **(shown | otherwise))


# The flags' types are what typer parses (a declared option's `flag_type` where it is not the API's type);
# `given` turns their values into the API's.
AllowDegraded = Annotated[bool, flag("allow_degraded")]
AgentVersion = Annotated[str | None, flag("agent_version")]
RequireVerified = Annotated[bool, flag("require_verified")]
Task = Annotated[str | None, flag("task")]
Cwd = Annotated[str | None, flag("cwd")]
Session = Annotated[str | None, flag("session")]
Force = Annotated[bool, flag("force")]
Image = Annotated[str | None, flag("image")]
LimitsOpt = Annotated[str | None, flag("limits")]
Upstream = Annotated[str | None, flag("upstream")]
UpstreamKeyEnv = Annotated[str | None, flag("upstream_key_env")]
BoundaryPrompt = Annotated[str | None, flag("boundary_prompt")]
MaxSteps = Annotated[int | None, flag("max_steps")]
MaxRequests = Annotated[int | None, flag("max_requests")]
MaxTokens = Annotated[int | None, flag("max_tokens")]
LoopLimit = Annotated[int | None, flag("loop_limit")]
EndLeftovers = Annotated[bool | None, flag("end_leftovers")]
IdleTimeout = Annotated[float | None, flag("idle_timeout")]
Model = Annotated[str | None, flag("model")]
AgentEnv = Annotated[list[str] | None, flag("agent_env")]
CassetteOpt = Annotated[Path | None, flag("cassette")]
RecordCassette = Annotated[Path | None, flag("record_cassette")]
Workers = Annotated[int | None, flag("workers")]
Runs = Annotated[int, flag("repeat")]
Check = Annotated[str | None, flag("check")]
CheckTimeout = Annotated[float, flag("check_timeout")]
KeepSnapshot = Annotated[bool, flag("keep_snapshot")]


Quiet = Annotated[
    bool,
    typer.Option("--quiet", "-q", help="No live progress (there is none when stdout is not a terminal)."),
]


Verbose = Annotated[
    bool,
    typer.Option(
        "--verbose", "-v", help="Debug log of the pipeline on stderr (and a failed CLI's whole output)."
    ),
]


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


def _limits(spec: str | None) -> str | None:
    """--limits, checked (its keys go over the settings' in the API)."""
    settings.load()  # a bad settings file is refused before a bad flag, as ever
    try:
        SandboxLimits.parse(spec or "")
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--limits") from None
    return spec


_FROM_FLAG: dict[str, Callable[[Any], Any]] = {
    "limits": _limits,
    "agent_env": _agent_env,
}
"""A flag's value -> the API's, where they differ."""


def given(values: Mapping[str, Any], takes: Iterable[str]) -> dict[str, Any]:
    """The declared options `takes` among a command's parameters (`values`: its `locals()`, whose names are
    the options'), as the API takes them; a flag left unset is left out: the settings, then the default,
    fill it in (floor/merge.py)."""
    found = {}
    for name in takes:
        if name in values:
            value = _FROM_FLAG.get(name, _same)(values[name])
            if value is not None:
                found[name] = value
    return found


def _same(value: Any) -> Any:
    return value


def emit_json(value: Any) -> None:
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def source_text(version: VersionRecord) -> str:
    """Where the version came from, with the day whose current release it is when the registry said so."""
    dated = version.registry_date
    return f"{version.source} as of {dated.date()}" if dated else version.source


def _report(result: ReplayResult, out: Path, json: bool) -> None:
    if json:
        emit_json({"out": str(out.absolute()), **result.model_dump(mode="json")})
        return
    counts: dict[str, int] = {}
    for d in result.divergences:
        counts[d.status] = counts.get(d.status, 0) + 1
    summary = ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) or "no calls"
    ran = result.version
    version = f"{ran.version} ({source_text(ran)}, {ran.status})" if ran else result.agent_version
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
    if cont.agent_status == "loop":
        line += "; " + next((r.detail for r in cont.refusals if r.reason == "loop"), "a loop")
    for name, error in sorted(cont.files.items()):
        if name.endswith("_error"):
            line += f"; {name.removesuffix('_error').replace('_', ' ')} not read back: {error}"
        elif name.endswith("_cut"):
            line += f"; {error}"
    if cont.mock:
        line += "; answers from the mock model"
    check = cont.cassette
    if check is not None:
        line += f"; cassette {check.verdict}"
        if check.where is not None:
            line += f" (the {check.where} differs)"
    return line


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
