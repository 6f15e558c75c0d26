"""`replayer inspect`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from replayer import api
from replayer.cli.app import command, console
from replayer.cli.options import Cwd, JsonOpt, Session, Task, TrajectoryArg, emit_json
from replayer.floor.trajectory import InspectReport, StartingState, SubagentFile, SubagentOf


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
        emit_json(report.model_dump(mode="json"))
        return
    console.print(
        f"agent [bold]{report.agent}[/] " + escape(inspect_header(report)),
        soft_wrap=True,  # the header stays one line
    )
    if report.start is not None:
        console.print(f"started from {_start_text(report.start)}", highlight=False, soft_wrap=True)
    if report.subagent_of is not None:
        console.print(subagent_text(report.subagent_of), highlight=False, soft_wrap=True, markup=False)
    for sub in report.subagents:
        console.print(subagent_file_text(sub), highlight=False, soft_wrap=True, markup=False)
    table = Table("step", "tools", "call ids", "main argument", "observed", "kind")
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
            escape("; ".join(main_argument(c.input) for c in step.calls)),
            ", ".join("yes" if c.has_observation else "NO" for c in step.calls),
            ", ".join(c.kind for c in step.calls),
        )
    console.print(table)
    reasons = sorted({c.reason for s in report.steps for c in s.calls if c.reason})
    for reason in reasons[:20]:
        console.print(f"unknown: {reason}", highlight=False, soft_wrap=True, markup=False)
    version = report.version
    if reasons and version is not None and (version.source == "default" or version.registry_date):
        console.print(
            f"the file records no version, so these are {report.agent} {version.version}'s tools; "
            "--agent-version V classifies at the version that recorded it",
            highlight=False,
            soft_wrap=True,
        )
    for note in ([version.note] if version and version.note else []) + report.parse_notes:
        console.print(f"note: {note}", markup=False, highlight=False)


MAIN_KEYS = ("command", "cmd", "pattern", "query", "file_path", "filePath", "absolute_path", "path", "url")
"""The inputs that say what a call does, in the order they are shown (an editor's `view` before its path)."""
MAIN_CHARS = 60


def main_argument(arguments: dict[str, Any]) -> str:
    """A short one-line summary of what a call acts on: its command, pattern or path (at most two of them),
    else its first text input; `-` when it has none. Enough to pick a boundary without --json."""
    found = [arguments[k] for k in MAIN_KEYS if isinstance(arguments.get(k), str | list)][:2]
    if not found:
        found = [v for v in arguments.values() if isinstance(v, str)][:1]
    words = [" ".join(str(w) for w in v) if isinstance(v, list) else v for v in found]
    text = " ".join(" ".join(words).split())  # one line
    if not text:
        return "-"
    return text if len(text) <= MAIN_CHARS else text[: MAIN_CHARS - 1] + "…"


def inspect_header(report: InspectReport) -> str:
    """The header after the agent's name: version, session, cwd (and image); what the file does not record
    is said so, with what stands in for it."""
    version = report.agent_version
    if version is None:
        ran = report.version
        would = f": {report.agent} {ran.version} would run" if ran else ""
        if ran and ran.registry_date:
            would += f", the release current on {ran.registry_date.date()}"
        version = f"(version not recorded{would})"
    session = report.session_id or "(not recorded)"
    cwd = report.cwd or "(not recorded: run needs --cwd)"
    if report.cwd and report.cwd_source not in (None, "recorded"):
        cwd = f"{report.cwd} ({report.cwd_source})"
    image = f"  image {report.environment_image}" if report.environment_image else ""
    form = f"  ({report.native_form})" if report.native_form else ""
    return f"{version}{form}  session {session}  cwd {cwd}{image}"


def subagent_text(of: SubagentOf) -> str:
    """Whose subagent the file is, and what a run can do with it."""
    who = f"subagent {of.agent_id}" if of.agent_id else "a subagent"
    where = [f"file {of.parent_file}"] if of.parent_file else ["its file not found beside this one"]
    where += [f"call {of.parent_call}"] if of.parent_call else []
    where += [f"step {of.parent_step}"] if of.parent_step else []
    return (
        f"{who} of session {of.parent_session_id} ({', '.join(where)}): a run reruns what it holds; "
        "a continuation is refused (continue the parent session)"
    )


def subagent_file_text(sub: SubagentFile) -> str:
    """A subagent's own transcript beside the session (`replayer inspect FILE` shows it)."""
    where = [f"call {sub.parent_call}"] if sub.parent_call else []
    where += [f"step {sub.parent_step}"] if sub.parent_step else []
    return f"subagent {sub.agent_id}: {sub.file}" + (f" (started by {', '.join(where)})" if where else "")


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
        emit_json(report.model_dump(mode="json"))
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
