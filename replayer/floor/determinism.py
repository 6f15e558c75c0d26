"""The determinism rate: how often R reruns of the same prefix, each in a fresh container, reproduce a call's
recorded observation exactly, and what varies when they do not (ids, times, process ids, walk order).

Pure: it reads the `RerunRecord`s (a run's reruns.json) of each repeat and classifies the differences.
"""

from __future__ import annotations

import difflib
import itertools
import re
from collections.abc import Callable, Sequence

from pydantic import BaseModel, ConfigDict

from replayer.floor.divergence import NORMALIZERS, PROCESS_IDS
from replayer.floor.results import RerunRecord

DETERMINISM = "determinism.json"

_UUID = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_HEX = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,64}\b")
"""A hash-like word (a git commit, a content digest): lower-case hex with a digit and a letter."""
_CLOCK = re.compile(r"\b\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?\b")
_PID = re.compile(r"(?i)\b(pid|process id|process group pgid|pgid)(\s*[:=]?\s*)\d+")

Classifier = Callable[[str], str]
KINDS: dict[str, Classifier] = {
    "ids": lambda s: _HEX.sub("<ID>", _UUID.sub("<ID>", NORMALIZERS["random_ids"](s))),
    "times": lambda s: _CLOCK.sub("<T>", NORMALIZERS["durations"](NORMALIZERS["iso_timestamps"](s))),
    "process_ids": lambda s: _PID.sub(r"\1\2<PID>", PROCESS_IDS.sub(r"\1<PID>", s)),
    "whitespace": NORMALIZERS["trailing_whitespace"],
}
"""What a line may differ by from run to run, each a mask; a difference no mask explains is `other`, lines
that come back in another order are `walk_order`."""
ORDER = "walk_order"
OTHER = "other"
EXCERPT_LINES = 12
EXCERPT_CHARS = 200
"""An excerpt's bounds: its first lines, each cut to its first characters."""


def _pair_kinds(a: str, b: str) -> set[str]:
    """The fewest masks two lines are equal by ({"other"} when all of them together do not do it)."""
    used: list[str] = []
    a0, b0 = a, b
    for name, mask in KINDS.items():
        ma, mb = mask(a), mask(b)
        if ma != a or mb != b:
            used.append(name)
            a, b = ma, mb
        if a == b:
            break
    if a != b:
        return {OTHER}
    return set(_fewest(a0, b0, used))


def _masked(text: str, names: list[str]) -> str:
    for name in names:
        text = KINDS[name](text)
    return text


def _fewest(a: str, b: str, used: list[str]) -> list[str]:
    """Without the masks that only changed what both lines share (a hash both print beside a time)."""
    needed = list(used)
    for name in used:
        without = [n for n in needed if n != name]
        if _masked(a, without) == _masked(b, without):
            needed = without
    return needed


def varying(old: str, new: str) -> list[str]:
    """What differs between two observations of the same call, by kind (sorted; empty when equal)."""
    if old == new:
        return []
    la, lb = old.split("\n"), new.split("\n")
    if sorted(la) == sorted(lb):
        return [ORDER]
    wa, wb = KINDS["whitespace"](old), KINDS["whitespace"](new)
    if wa == wb:
        return ["whitespace"]
    if sorted(wa.split("\n")) == sorted(wb.split("\n")):
        return ["whitespace", ORDER]
    found: set[str] = set()
    matcher = difflib.SequenceMatcher(None, la, lb, autojunk=False)
    moved_a: list[str] = []
    moved_b: list[str] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if tag == "replace" and i2 - i1 == j2 - j1:
            for x, y in zip(la[i1:i2], lb[j1:j2], strict=True):
                found |= _pair_kinds(x, y)
            continue
        moved_a += la[i1:i2]
        moved_b += lb[j1:j2]
    if moved_a or moved_b:  # lines only one side has here: the same lines elsewhere is walk order
        found.add(ORDER if sorted(moved_a) == sorted(moved_b) else OTHER)
    return sorted(found)


def excerpt(old: str, new: str) -> list[str]:
    """The first lines by which `new` differs from `old`: a unified diff's hunks without context or file
    header (`@@ -3 +3 @@`, `-old line`, `+new line`), bounded by EXCERPT_LINES and EXCERPT_CHARS."""
    diff = difflib.unified_diff(old.split("\n"), new.split("\n"), lineterm="", n=0)
    hunks = itertools.islice(diff, 2, 2 + EXCERPT_LINES)
    return [line[:EXCERPT_CHARS] for line in hunks]


# the rate -----------------------------------------------------------------------------------------
class CallDeterminism(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    step: int
    call_id: str
    tool: str
    exact: int
    """Of the repeats, how many reproduced the recorded observation exactly."""
    stable: bool
    """Every repeat's observation was the same (whether or not it was the recorded one)."""
    varies: list[str]
    """What differed from the recording or between repeats, by kind (KINDS, `walk_order`, `other`)."""
    excerpt_of: int | None = None
    """The first repeat (1-based) whose observation was not the recorded one; None when every repeat was."""
    excerpt: list[str] = []
    """How that repeat differed from the recording (`excerpt`), or `not rerun` when it did not rerun the call."""


class ToolDeterminism(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tool: str
    calls: int
    reruns: int
    """calls x repeats."""
    exact: int
    """Reruns whose observation was the recorded one, character for character."""
    rate: float
    """exact / reruns."""
    varies: list[str]


class Determinism(BaseModel):
    """R reruns of one prefix, each in a fresh container (`determinism.json`, a verdict's `determinism`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    repeats: int
    reruns: int
    exact: int
    rate: float
    tools: list[ToolDeterminism]
    calls: list[CallDeterminism]


def determinism(runs: Sequence[Sequence[RerunRecord]]) -> Determinism:
    """The rate of the repeats `runs` (each one rerun's records, the first run's calls define the calls):
    a call's rerun counts as exact when its observation is the recorded one; a call missing from a repeat
    (not rerun there) counts as not exact, `other`."""
    by_run = [{r.call_id: r for r in run} for run in runs]
    calls: list[CallDeterminism] = []
    for first in runs[0] if runs else []:
        fresh = [run.get(first.call_id) for run in by_run]
        texts = [r.fresh for r in fresh if r is not None]
        reference = first.historical if first.historical is not None else texts[0]
        kinds: set[str] = set()
        for text in texts:
            kinds.update(varying(reference, text))
            kinds.update(varying(texts[0], text))
        if len(texts) < len(fresh):
            kinds.add(OTHER)
        exact = sum(1 for t in texts if first.historical is not None and t == first.historical)
        stable = len(texts) == len(fresh) and len(set(texts)) == 1
        differing = [
            (i, r)
            for i, r in enumerate(fresh, 1)
            if r is None or first.historical is None or r.fresh != first.historical
        ]
        shown: dict[str, object] = {}
        if differing:
            at, rerun = differing[0]
            lines = ["not rerun"] if rerun is None else excerpt(reference, rerun.fresh)
            shown = {"excerpt_of": at, "excerpt": lines}
        calls.append(
            CallDeterminism(
                step=first.step,
                call_id=first.call_id,
                tool=first.tool,
                exact=exact,
                stable=stable,
                varies=sorted(kinds),
                **shown,
            )
        )
    repeats = len(runs)
    tools = []
    for tool in sorted({c.tool for c in calls}):
        mine = [c for c in calls if c.tool == tool]
        exact = sum(c.exact for c in mine)
        tools.append(
            ToolDeterminism(
                tool=tool,
                calls=len(mine),
                reruns=len(mine) * repeats,
                exact=exact,
                rate=_rate(exact, len(mine) * repeats),
                varies=sorted({k for c in mine for k in c.varies}),
            )
        )
    exact = sum(c.exact for c in calls)
    reruns = len(calls) * repeats
    return Determinism(
        repeats=repeats, reruns=reruns, exact=exact, rate=_rate(exact, reruns), tools=tools, calls=calls
    )


def _rate(exact: int, of: int) -> float:
    return round(exact / of, 3) if of else 1.0


def summary(found: Determinism) -> str:
    """One line: the rate, then each tool's with what varies, e.g. `7/9 exact (0.778) over 3 repeats;
    exec_command 1/3 (ids, times)`."""
    tools = "; ".join(
        f"{t.tool} {t.exact}/{t.reruns}" + (f" ({', '.join(t.varies)})" if t.varies else "")
        for t in found.tools
    )
    head = f"{found.exact}/{found.reruns} exact ({found.rate:.3f}) over {found.repeats} repeats"
    return f"{head}; {tools}" if tools else head
