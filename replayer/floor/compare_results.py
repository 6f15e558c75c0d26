"""What `compare` leaves: every fork's run record, its check, the variants' tally (compare.json, and
summary.json of `compare -n a,b`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from replayer.floor.model_base import SCHEMA_VERSION, Frozen
from replayer.floor.requests import CompareRequest, VariantSpec
from replayer.floor.results import ContinuationResult, Degradation, TimelineEntry
from replayer.floor.versions import Pins, VersionRecord


class CheckResult(Frozen):
    command: str
    exit_code: int | None
    """None when the check hit its timeout."""
    passed: bool
    timed_out: bool
    output: str
    """stdout and stderr interleaved as the command wrote them, cut to the middle when long."""
    output_bytes: int
    truncated: bool
    duration_s: float


RunStatus = Literal["ok", "failed"]


class RunRecord(Frozen):
    """One fork: a variant's continuation from the snapshot, its check and its workspace diff."""

    variant: str
    repeat: int
    """1-based."""
    status: RunStatus
    """failed: the run could not be carried out (see error); an agent that failed is still "ok"."""
    error_kind: str | None = None
    error: str | None = None
    pins: Pins | None = None
    container: str | None = None
    continuation: ContinuationResult | None = None
    check: CheckResult | None = None
    timeline: list[TimelineEntry] = Field(default_factory=list)
    first_difference: int | None = None
    """Timeline index of this run's first action (assistant message) that differs from the reference
    run's; None when its actions equal the reference's. Tool results are not compared (volatile)."""
    continuation_error: str | None = None
    """Why the continuation was refused or failed (an agent that exited with an error: its last output
    line), as `run` says it; None for a continuation that ended as it may."""
    infrastructure_failure: str | None = None
    """Why the run tells nothing about the variant (its container, bridge, install or worker failed, or the
    gate refused the rebuilt prefix); None for a run the agent or the check decided. Such runs are counted
    apart from the check pass rate."""
    patch_diff: str | None = None
    """What the variant's patch changed at the boundary (None: the variant has no patch)."""
    patch_diff_truncated: bool = False
    workspace_diff: str = ""
    """The agent's own edits: the workspace at the end against the boundary's (after the patch, if any)."""
    workspace_diff_truncated: bool = False
    dir: str
    """The run's directory, relative to the compare output."""
    fork_s: float | None = None
    """Seconds the run waited at its turn (a free slot, the replay done) for its container ready with its
    own workspace and agent home (and its patch applied); about 0 when that was made ready while the
    replay ended or earlier runs went on (replayer/pipeline/forkpool.py)."""
    state_disk_limited: bool | None = None
    """Whether the run's workspace and agent home had a disk quota (as a replay's do, where supported)."""
    fork_path: Literal["prestarted", "cold"] | None = None
    """prestarted: the run's container started before the boundary and its state was mounted into it
    (replayer/pipeline/fork.py); cold: the container started from the snapshot image once the boundary was ready."""
    fork_fallback: str | None = None
    """Why a cold run's container was not pre-started, or not used."""
    ready_s: float | None = None
    """Seconds from the run being told the snapshot is ready to its container ready with its own
    workspace and agent home (before its patch)."""
    wall_s: float = 0.0
    """Seconds from the run's turn to its end."""


class VariantSummary(Frozen):
    name: str
    spec: VariantSpec
    runs: int
    failed_runs: int
    infrastructure_failures: int = 0
    """Runs with an `infrastructure_failure`: left out of the pass rate."""
    agent_status: dict[str, int]
    steps_used: list[int]
    check_passed: int
    check_pass_rate: float | None
    """Passes over the variant's runs that were not infrastructure failures (a run whose patch did not apply
    did not pass); None without --check or when every run was an infrastructure failure."""
    input_tokens: int | None
    output_tokens: int | None
    mean_wall_s: float


class CompareTimings(Frozen):
    replay_s: float = 0.0
    snapshot_s: float = 0.0
    runs_s: float = 0.0
    total_s: float = 0.0


class CompareResult(Frozen):
    schema_version: int = SCHEMA_VERSION
    request: CompareRequest
    pins: Pins
    agent: str
    agent_version: str | None
    after_step: int
    replay: str = "replay/result.json"
    version: VersionRecord | None = None
    """The agent version the replay ran (a variant's `version` runs another: see its runs' pins)."""
    divergences: dict[str, int]
    """Status -> count over the prefix's reruns (details in replay/result.json)."""
    degradations: list[Degradation] = Field(default_factory=list)
    """The replay's degradations (--allow-degraded): every run continues from that prefix."""
    snapshot_image: str
    snapshot_kept: bool
    boundary_check: CheckResult | None = None
    reference_run: str | None
    """NAME/K of the run the others' first differences are measured against (the first ok run)."""
    common_actions: int
    """How many actions (assistant messages) every ok run shares from the boundary on."""
    variants: list[VariantSummary]
    runs: list[RunRecord]
    timings: CompareTimings
    stopped: str | None = None
    """Why runs were not carried out: the compare's outputs reached its total output budget (`--limits
    output=`); those runs are failed with kind `output`. None: every run was carried out."""


class BoundaryComparison(Frozen):
    """One boundary of `compare -n a,b,...`: where its comparison is and its tally, or why it has none."""

    after_step: int
    dir: str
    """after-K, relative to the output: compare.json and report.html as `compare -n K` writes them."""
    error_kind: str | None = None
    error: str | None = None
    """Why the boundary has no comparison (its directory is then not there)."""
    divergences: dict[str, int] = Field(default_factory=dict)
    boundary_check: CheckResult | None = None
    variants: list[VariantSummary] = Field(default_factory=list)
    stopped: str | None = None
    """The comparison's `stopped`: runs not carried out for the compare's total output budget."""


class CompareBoundaries(Frozen):
    """`compare -n a,b,...`: the prefix replayed once, every variant forked from every boundary; the
    output's summary.json."""

    schema_version: int = SCHEMA_VERSION
    request: CompareRequest
    """The options (its after_step: the last boundary; its out: the output holding after-K/)."""
    boundaries: list[BoundaryComparison]
    replay_s: float
    """The one replay, from the start to the last boundary passed."""
    total_s: float
