"""Record kinds a format's newer release adds: where each line names its kind (`type`), one the adapter does
not know is carried as recorded (kept in the rebuilt session; the CLI that wrote it reads it, and the
agents' own readers skip a kind they do not know), and said in the trajectory's parse notes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable

from replayer.floor.errors import excerpt


def note(
    kinds: Iterable[object],
    known: Collection[str],
    what: str = "record kinds",
    whose: str = "a newer release's?",
) -> list[str]:
    """The parse note naming the kinds of `kinds` not in `known`, with their counts ([] when none)."""
    counts = Counter(kind for kind in kinds if isinstance(kind, str) and kind not in known)
    if not counts:
        return []
    named = ", ".join(f"{excerpt(kind)} ({n})" for kind, n in sorted(counts.items()))
    return [f"{what} the replayer does not know ({whose}), carried as recorded: {named}"]
