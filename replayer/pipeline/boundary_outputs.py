"""The outputs of one replay's boundaries, bounded as a whole (replayer/floor/output_budget.py): the run's
output budget, and the boundary committed last, whose unchanged state files the next one shares.

Only the exported state (`state/workspace`, `state/home`) is shared: nothing writes into it after its
copy but whole-file replacements and removals (`clean_home_copy`), which leave a hard link's other name
as it was; `native/` is rebuilt in place and always copied. What a boundary writes whole (its rebuilt
session, `reruns.json`) shares its blocks in common with the last boundary's where the file system dedupes
(replayer/floor/dedupe.py)."""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path

from replayer.floor.dedupe import share_prefixes
from replayer.floor.limits import SandboxLimits
from replayer.floor.output_budget import Earlier, OutputBudget, SharedTotal, tree_bytes
from replayer.floor.safecopy import CopyReport, Holes, Links, copy_untrusted

SHARED = ("state/workspace", "state/home")
BATCH_TOTAL: ContextVar[SharedTotal | None] = ContextVar("batch_total", default=None)
"""The batch's total the runs of this context draw on too (set by a batch worker around a replay)."""


@dataclass
class _Written:
    charged: int = 0
    shared: int = 0


@dataclass
class BoundaryOutputs:
    budget: OutputBudget
    last: Path | None = None
    """The result directory of the boundary committed last (None before the first)."""
    hard_links: bool = True
    """False: the state is shared by reflinks only, its modes kept (compare's runs fork from it)."""
    _written: dict[int, _Written] = field(default_factory=dict)

    @classmethod
    def of(cls, limits: SandboxLimits, hard_links: bool = True) -> BoundaryOutputs:
        return cls(OutputBudget(limits.output_total(), BATCH_TOTAL.get()), hard_links=hard_links)

    def copy(
        self,
        boundary: int,
        src: Path,
        tmp: Path,
        rel: str,
        *,
        links: Links,
        limits: SandboxLimits,
        what: str,
        holes: Holes = "keep",
    ) -> CopyReport:
        """`copy_untrusted` of `src` to `tmp`/`rel` in boundary `boundary`'s directory: into one of SHARED,
        each file shared with the last boundary's or charged before it is written; elsewhere charged when
        the boundary settles."""
        if rel not in SHARED:
            return copy_untrusted(src, tmp / rel, links=links, limits=limits, what=what, holes=holes)
        root = self.last / rel if self.last is not None else None
        with Earlier(root, self.budget, f"boundary {boundary}", self.hard_links) as earlier:
            report = copy_untrusted(
                src, tmp / rel, links=links, limits=limits, what=what, holes=holes, earlier=earlier
            )
        written = self._written.setdefault(boundary, _Written())
        written.shared += report.shared_bytes
        written.charged += report.bytes - report.shared_bytes
        return report

    def settle(self, boundary: int, tmp: Path) -> None:
        """Charge what boundary `boundary` wrote to `tmp` besides its charged copies, before it is
        committed: OverBudget when that would pass the budget."""
        written = self._written.pop(boundary, _Written())
        written.shared += share_prefixes(self.last, tmp, skip=SHARED)
        self.budget.take(tree_bytes(tmp) - written.charged - written.shared, f"boundary {boundary}")

    def committed(self, final: Path) -> None:
        self.last = final

    def close(self) -> None:
        self.budget.close()
