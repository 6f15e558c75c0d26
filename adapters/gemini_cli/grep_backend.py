"""Which grep backend a Gemini CLI session's `grep_search` ran on, read from its observations' wording.

The CLI registers `grep_search` as its RipGrepTool when ripgrep is found (a bundled binary, else `rg` on a
trusted PATH) and `tools.useRipgrep` is not false; else as its GrepTool (git grep in a repository, else the
system grep, else a JavaScript walk). Both format results the same way (`formatGrepResults`), except where
they say they searched: without a `dir_path`, the RipGrepTool says `in path "."` and the GrepTool
`in the workspace directory` (`across N workspace directories`); a missing folder is `Path is not a valid
directory or file: X` for the first, `Path is not a directory: X` for the second (packages/core/src/tools/
ripGrep.ts and grep.ts, 0.30 to 0.61). Which of the GrepTool's three strategies ran is not in the wording: the
CLI picks it again from the workspace (a repository or not) and the sandbox (git and grep are there).

The base image has ripgrep, so a rerun registers the RipGrepTool unless told otherwise: a session that
shows the GrepTool's wording is rerun and continued with `tools.useRipgrep: false`, the setting the CLI
itself reads.
"""

from __future__ import annotations

import re
from typing import Literal

from replayer.floor.divergence import model_text
from replayer.floor.trajectory import Step

Backend = Literal["ripgrep", "grep"]
GREP = "grep_search"
_HEADER = r'^(?:Found \d+ (?:match|matches|files with matches) for pattern|No matches found for pattern) "'
_GREP_TOOL = re.compile(
    _HEADER
    + r'.*?" (?:in the workspace directory|across \d+ workspace directories)\b|^Path is not a directory: ',
    re.M | re.S,
)
_RIPGREP_TOOL = re.compile(
    _HEADER + r'.*?" in path "\."|^Path is not a valid directory or file: ', re.M | re.S
)


def wording(text: str) -> Backend | None:
    """The backend one grep_search observation's wording shows (None: the wording is the same for both)."""
    head = text[:4096]  # the header is the first line; a pattern is rarely longer
    if _GREP_TOOL.search(head):
        return "grep"
    if _RIPGREP_TOOL.search(head):
        return "ripgrep"
    return None


def recorded_backend(steps: list[Step]) -> Backend | None:
    """The backend the session's first revealing grep_search observation shows (None: no call shows one)."""
    for step in steps:
        for call in step.calls:
            if call.tool == GREP and call.historical is not None:
                found = wording(model_text(call.historical))
                if found is not None:
                    return found
    return None


def settings(backend: Backend | None) -> dict[str, object]:
    """What the CLI's settings.json adds for the recorded backend."""
    return {"tools": {"useRipgrep": False}} if backend == "grep" else {}


def note(backend: Backend | None) -> list[str]:
    if backend != "grep":
        return []
    return [
        "grep_search ran without ripgrep when recorded (its wording: 'in the workspace directory'): reruns and "
        "the continuation use the CLI's own grep fallback (tools.useRipgrep false)"
    ]
