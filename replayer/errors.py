"""One exception hierarchy; the CLI maps each class to a one-line message and an exit code."""

from __future__ import annotations

from typing import Any

EXCERPT_CHARS = 80


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


class PatchFailed(ReplayError):
    """A compare variant's patch does not apply at the boundary (recorded in that run; compare goes on)."""

    exit_code = 4
    kind = "patch_failed"


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
