"""Compare a fresh observation with the historical one: exact, equal after named normalizers, or different."""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from typing import Any

import orjson

from replayer.floor.results import Divergence
from replayer.floor.trajectory import Observation, ToolCall, ToolKind

_EXCERPT = 160

PROCESS_IDS = re.compile(r"^((?:Process Group PGID|Background PIDs): )\d+(?:, \d+)*$", re.M)
"""The process id lines a shell tool's output ends with (Gemini CLI's run_shell_command): new every run.
The cassette matching masks them too (bridges/playback.py)."""
TASK_IDS = re.compile(
    r"(?<=background with ID: )b[0-9a-z]{8}\b"
    r"|(?<=/tasks/)b[0-9a-z]{8}(?=\.output)|(?<=/tool-results/)b[0-9a-z]{8}(?=\.txt)"
)
"""The random id of a shell command whose output went to the background or to a file (Claude Code's)."""
LISTING_TIME = re.compile(
    r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 0-9]?[0-9] (?:[0-2][0-9]:[0-5][0-9]| [0-9]{4})\b"
)
"""A long listing's modification time (`ls -l`: `Dec  6 00:59`, or `Dec  6  2025` for an old file), which
shows the minute a file was made. The cassette matching masks it too (bridges/playback.py)."""
NORMALIZERS: dict[str, Callable[[str], str]] = {
    "trailing_whitespace": lambda s: re.sub(r"[ \t]+$", "", s.rstrip("\n"), flags=re.M),
    "iso_timestamps": lambda s: re.sub(
        r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:?\d{2})?", "<TS>", s
    ),
    "durations": lambda s: re.sub(
        r"\b\d+(\.\d+)?\s?(ms|s|seconds)\b|(\"duration_seconds\\?\":)\d+(\.\d+)?", r"\3<DUR>", s
    ),
    "random_ids": lambda s: TASK_IDS.sub(
        "<ID>", re.sub(r"(Chunk ID: )[0-9a-f]{6}|(session ID )\d+", r"\1\2<ID>", s)
    ),
    "process_ids": lambda s: PROCESS_IDS.sub(r"\1<PID>", s),
    "listing_times": lambda s: LISTING_TIME.sub("<TS>", s),
    "walk_order": lambda s: "\n".join(sorted(s.split("\n"))),
}
"""The named normalizers an adapter declares for its tools (`Rerunning.normalizers`), in the order they apply:
`random_ids` for tools that print a random label (Codex's chunk and session ids, Claude Code's task ids),
`process_ids` for the lines above, `walk_order` for listings in a parallel directory walk's order
(ripgrep's), which varies run to run."""
COMMON = ("trailing_whitespace", "iso_timestamps", "durations", "listing_times")
"""What any agent's tool output may differ by from run to run."""


def model_text(obs: Observation) -> str:
    """The model-visible part of an observation, as one comparable string."""
    if isinstance(obs.content, str):
        return obs.content
    return orjson.dumps(obs.content, option=orjson.OPT_SORT_KEYS).decode()


OwnText = Callable[[str], str | None]
"""An adapter's `own_text` for one tool: the observation's own text inside its model-visible text."""


def _first_difference(a: str, b: str) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def line_column(text: str, at: int) -> tuple[int, int]:
    """The 1-based line and column of offset `at` in `text`."""
    line = text.count("\n", 0, at) + 1
    return line, at - (text.rfind("\n", 0, at) + 1) + 1


def _where(old: str, new: str, own: OwnText | None) -> tuple[str, str, bool]:
    """The two texts a difference is located in: the observations' own texts when the adapter finds both
    and they differ; else the whole texts, with whether the own texts were equal (the difference lies in
    the agent's wrapper: an exit code, an id, a timing)."""
    if own is None:
        return old, new, False
    own_old, own_new = own(old), own(new)
    if own_old is None or own_new is None:
        return old, new, False
    if own_old == own_new:
        return old, new, True
    return own_old, own_new, False


def _excerpt(text: str, at: int) -> str:
    start = max(0, at - _EXCERPT // 2)
    return text[start : start + _EXCERPT]


def divergence_of(
    step: int,
    call: ToolCall,
    kind: ToolKind,
    fresh: Observation,
    normalizers: Collection[str],
    own: OwnText | None = None,
) -> Divergence:
    """How the fresh observation of a rerun call differs from its historical one, `normalizers` (names in
    `NORMALIZERS`, what the adapter declares for the call's tool) allowed; a difference is located in the
    observations' own texts (`own`, the adapter's `own_text` for the tool), not in the agent's wrapper."""
    base: dict[str, Any] = {"step": step, "call_id": call.id, "tool": call.tool, "kind": kind}
    historical = call.historical
    if historical is None:
        return Divergence(**base, status="different", fresh_excerpt=_excerpt(model_text(fresh), 0))
    old, new = model_text(historical), model_text(fresh)
    same_flag = bool(historical.is_error) == bool(fresh.is_error)
    if old == new and same_flag:
        return Divergence(**base, status="exact", truncated=fresh.truncated)
    if same_flag:
        used: list[str] = []
        a, b = old, new
        for name, fn in ((n, f) for n, f in NORMALIZERS.items() if n in normalizers):
            na, nb = fn(a), fn(b)
            if na != a or nb != b:
                used.append(name)
                a, b = na, nb
            if a == b:
                needed = _needed(old, new, used)
                return Divergence(
                    **base, status="normalized_equal", normalizers=needed, truncated=fresh.truncated
                )
    a, b, in_wrapper = _where(old, new, own)
    at = _first_difference(a, b)
    line, column = line_column(a, at)
    return Divergence(
        **base,
        status="different",
        first_difference=at,
        line=line,
        column=column,
        in_wrapper=in_wrapper,
        historical_excerpt=_excerpt(a, at),
        fresh_excerpt=_excerpt(b, at),
        truncated=fresh.truncated,
    )


def _normalized(text: str, names: list[str]) -> str:
    for name in names:
        text = NORMALIZERS[name](text)
    return text


def _needed(old: str, new: str, used: list[str]) -> list[str]:
    """The normalizers the two texts are equal by, without those that only changed what both share (e.g.
    trailing spaces on lines of both when it is their order that differs)."""
    needed = list(used)
    for name in used:
        without = [n for n in needed if n != name]
        if _normalized(old, without) == _normalized(new, without):
            needed = without
    return needed


def position(d: Divergence) -> str:
    """Where a `different` observation first differs, in words."""
    at = f"line {d.line}, column {d.column}"
    return f"in the agent's wrapper (its output is the same) at {at}" if d.in_wrapper else f"at {at}"


def kept(step: int, call: ToolCall, kind: ToolKind) -> Divergence:
    return Divergence(step=step, call_id=call.id, tool=call.tool, kind=kind, status="historical_kept")


def workspace_hint(divergences: list[Divergence]) -> str | None:
    """A word when most reruns differ from the first character of their own text (what the command printed,
    not the agent's wrapper around it): the usual cause is a workspace that is not the one the session
    started from, not the agent."""
    reruns = [d for d in divergences if d.kind == "rerun"]
    at_start = [d for d in reruns if d.status == "different" and d.first_difference == 0 and not d.in_wrapper]
    if len(at_start) < 2 or 2 * len(at_start) <= len(reruns):
        return None
    return (
        f"{len(at_start)} of {len(reruns)} reruns differ from the first character of their output: the workspace is "
        "probably not the session's starting state (`replayer inspect` shows what the file records of it)"
    )
