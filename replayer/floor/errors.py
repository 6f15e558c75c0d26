"""One exception hierarchy; the CLI maps each class to a one-line message and an exit code."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from replayer.floor.results import ContinuationResult, GateMismatch

EXCERPT_CHARS = 80
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_BOILERPLATE = re.compile(
    r"^\s*(hint:|help:|npm (error|ERR!|warn|WARN)\s*$)"
    r"|^(npm (error|ERR!))?\s*[{}]\s*$"  # an error object printed after its message ...
    r"|^(npm (error|ERR!))?\s+at \S"  # ... its stack ...
    r"|^npm (error|ERR!)\s{2,}\w+: "  # ... and its fields
    r"|^Please make sure you have the correct access rights"
    r"|^and the repository exists\.$"
    r"|^fatal: Could not read from remote repository\.$"
    r"|^fatal: fetch-pack: invalid index-pack output$"  # after index-pack's own reason
    r"|A complete log of this run can be found in"
    r"|^npm (error|ERR!) (This is a problem related to network connectivity|In most cases you are behind a proxy"
    r"|If you are behind a proxy|'proxy' config is set properly|404 Note that you can also install"
    r"|404 tarball, folder, http url|404\s*$)"
)


class ReplayError(Exception):
    """Base class. `exit_code` is documented in docs/cli.md."""

    exit_code = 1
    kind = "error"


class BadInput(ReplayError):
    """Not a trajectory, unknown format, unreadable or damaged file."""

    exit_code = 3
    kind = "bad_input"


class PlanRefused(ReplayError):
    """The boundary or the prefix cannot be replayed as asked (batch split, unknown tool, version...)."""

    exit_code = 4
    kind = "plan_refused"


class WorkspaceError(ReplayError):
    """The workspace is missing or not a directory."""

    exit_code = 5
    kind = "workspace"


class SandboxError(ReplayError):
    """Docker is not reachable, the image is missing, or the container failed."""

    exit_code = 6
    kind = "sandbox"


class OutputError(ReplayError):
    """The output directory exists already or cannot be written."""

    exit_code = 7
    kind = "output"


class BridgeRefused(ReplayError):
    """The first continuation request did not carry the rebuilt prefix."""

    exit_code = 8
    kind = "bridge_refused"


class AgentError(ReplayError):
    """The continued agent failed."""

    exit_code = 9
    kind = "agent_error"


class ConfinementError(ReplayError):
    """A file tool tried to leave the workspace or touch something that is not a regular file."""

    exit_code = 4
    kind = "confinement"


class OptionsConflict(ReplayError):
    """Options of a run that do not go together (a cassette without a continuation, a cassette and an
    upstream, one recording for several boundaries): a usage error, the same from the command and the API."""

    exit_code = 2
    kind = "usage"


class NoUpstream(ReplayError):
    """A continuation with nowhere to take its answers from: no upstream and no cassette (a usage error)."""

    exit_code = 2
    kind = "usage"


class UnknownAgent(ReplayError):
    """An agent name no adapter has (`setup --agents`, `bundles`, `verify`): a usage error, the same in every
    verb."""

    exit_code = 2
    kind = "usage"


def unknown_agent(names: list[str], known: list[str]) -> UnknownAgent:
    return UnknownAgent(
        f"no agent {', '.join(excerpt(n) for n in names)} (known: {', '.join(sorted(known))})"
    )


NO_UPSTREAM_HELP = (
    "give --upstream URL (a model service), --upstream mock (the built-in offline model, no key) "
    "or --cassette DIR"
)


class PatchFailed(ReplayError):
    """A compare variant's patch does not apply at the boundary (recorded in that run; compare goes on)."""

    exit_code = 4
    kind = "patch_failed"


class SettingsError(ReplayError):
    """A settings file or REPLAYER_* variable holds an unknown setting or a bad value."""

    exit_code = 13
    kind = "settings"


class CassetteError(ReplayError):
    """A cassette is refused before the run (tampered, an unknown or missing file, another trajectory or
    boundary), or a recording cannot be written as one (docs/cassettes.md)."""

    exit_code = 14
    kind = "cassette"


class NotVerified(ReplayError):
    """A continuation replayed from a cassette did not reproduce the recording (the result directory is
    complete; the first differing path is in continuation.cassette)."""

    exit_code = 15
    kind = "not_verified"


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM: everything started was cleaned up, nothing partial was left. Not an Exception,
    so that no `except Exception` on the way up (a Docker call's, a worker's) can swallow it."""

    exit_code = 130
    kind = "interrupted"


def excerpt(value: Any, limit: int = EXCERPT_CHARS) -> str:
    """A short one-line rendering of a (possibly huge or binary) input value for a refusal."""
    text = repr(value) if not isinstance(value, str) else repr(value)
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def bad_record(source: str, where: str, problem: str, value: Any = None) -> BadInput:
    """A refusal naming the record (`where`: "line 12, field message.content[0].text") and the problem."""
    got = "" if value is None else f" (got {excerpt(value)})"
    return BadInput(f"{source}: {where}: {problem}{got}")


def last_line(output: bytes | str) -> str | None:
    """The last meaningful line of a tool's output (bytes as written, any encoding), stripped of terminal
    colours: the one helper for "why did git / npm / uv / docker fail". Empty lines, hints and the
    advice tools print after their reason (git's "Please make sure you have the correct access rights /
    and the repository exists.", npm's "A complete log of this run can be found in", ...) are passed
    over, so the reason itself is what is kept (git's "Could not resolve hostname")."""
    text = output.decode(errors="replace") if isinstance(output, bytes) else output
    for line in reversed(_ANSI.sub("", text).splitlines()):
        if line.strip() and not _BOILERPLATE.search(line):
            return line.strip()
    return None


_LOGGED_ERROR = re.compile(r'\blevel=ERROR\b.*?\berror="((?:[^"\\]|\\.)*)"')
"""A logfmt line's error (OpenCode's `--print-logs`: `timestamp=... level=ERROR ... error="..."`)."""


def logged_error(text: str) -> str | None:
    """The last error a logfmt log in `text` holds (`level=ERROR ... error="..."`), unquoted; None if none."""
    found = _LOGGED_ERROR.findall(text)
    return found[-1].replace('\\"', '"') if found else None


def said(line: str) -> str:
    """What an output line says: a JSON event's own message (`message`, `result`, `error`, as the agents'
    JSON streams put it, e.g. Claude Code's failed `result`, Codex's `turn.failed`), a logged error's text
    (`level=ERROR ... error="..."`), else the line."""
    logged = logged_error(line)
    if logged is not None:
        return logged
    if not line.startswith("{"):
        return line
    try:
        event = orjson.loads(line)
    except orjson.JSONDecodeError:
        return line
    for key in ("message", "result", "error"):
        value = event.get(key) if isinstance(event, dict) else None
        value = value.get("message") if isinstance(value, dict) else value
        if isinstance(value, str) and value.strip():
            return value.strip()
    return line


def first_difference_values(mismatch: GateMismatch, limit: int = EXCERPT_CHARS) -> str:
    """`expected "...", got "..."`: both sides from a little before the first character where they differ
    (control characters escaped as in JSON, so a newline reads \\n), cut to `limit` characters each."""
    common = len(os.path.commonprefix([mismatch.expected, mismatch.actual]))
    start = max(0, common - limit // 4)

    def show(text: str) -> str:
        part = text[start : start + limit]
        body = orjson.dumps(part).decode()[1:-1].replace('\\"', '"')  # values are often JSON: keep its quotes
        before = "…" if start else ""
        after = "…" if start + limit < len(text) else ""
        return f'"{before}{body}{after}"'

    return f"expected {show(mismatch.expected)}, got {show(mismatch.actual)}"


def continuation_failure(
    cont: ContinuationResult, out: Path, stderr: bytes = b"", stdout: bytes = b""
) -> ReplayError | None:
    """The error a continuation that was refused or failed ends with, its cause in the one line: the gate's
    first difference as values, or the agent's last stderr line (its last stdout line when stderr is
    empty; of a JSON event, its message), then where the details are. `stderr` / `stdout`: the ends of the agent's outputs. None: the
    continuation ended as it may (completed, or a budget reached)."""
    tape = cont.cassette
    if tape is not None and tape.verdict == "differs" and tape.difference is not None:
        differs = tape.difference
        return NotVerified(
            f"{differs.reason} at {differs.path or 'the request'}: {first_difference_values(differs)} "
            f"(see {out / 'result.json'}, continuation.cassette)"
        )
    if tape is not None and tape.verdict == "not_recorded":
        return CassetteError(
            f"no cassette was written: {'; '.join(tape.notes)} (the result directory is complete)"
        )
    if cont.agent_status == "bridge_refused":
        found = cont.mismatch
        if found is None:
            return BridgeRefused(f"the continuation request was refused (see {out / 'bridge'})")
        return BridgeRefused(
            f"{found.reason} at {found.path or 'the request'}: {first_difference_values(found)} "
            f"(see {out / 'result.json'}, continuation.mismatch)"
        )
    if cont.agent_status != "agent_error":
        return None
    code = "no exit code" if cont.agent_exit_code is None else f"exit {cont.agent_exit_code}"
    line, where = last_line(stderr), cont.files.get("agent_stderr", "agent/stderr.log")
    if line is None and (line := last_line(stdout)) is not None:
        where = cont.files.get("agent_stdout", "agent")
    if line is None:
        return AgentError(f"the continued agent failed ({code}) and wrote nothing (see {out / 'agent'})")
    return AgentError(f"the continued agent failed ({code}): {excerpt(said(line), 160)} (see {out / where})")
