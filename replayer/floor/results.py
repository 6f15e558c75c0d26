"""What a replay leaves in result.json: divergences, degradations, the continuation and its bridge
counters, the sandbox record, timings; and a conversation's timeline and reruns."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from replayer.floor.limits import SandboxLimits
from replayer.floor.model_base import SCHEMA_VERSION, Frozen, Strict
from replayer.floor.requests import GitCheckout, ReplayRequest
from replayer.floor.trajectory import CwdSource, RecordedOn, ToolCall, ToolKind
from replayer.floor.versions import InstalledBundle, Pins, VersionRecord

DivergenceStatus = Literal["exact", "normalized_equal", "different", "historical_kept"]


class Divergence(Frozen):
    """How one call's fresh observation compares with the historical one."""

    step: int
    call_id: str
    tool: str
    kind: ToolKind
    status: DivergenceStatus
    normalizers: list[str] = Field(default_factory=list)
    """The normalizers that were needed to make the two equal (normalized_equal only)."""
    first_difference: int | None = None
    """Character offset of the first difference (different only) in the observation's own text (what the
    command or tool printed, without the agent's wrapper: `Adapter.own_text`), or in the whole
    model-visible text when the adapter finds no own text or `in_wrapper`."""
    line: int | None = None
    """The first difference's 1-based line in the same text as `first_difference`."""
    column: int | None = None
    """The first difference's 1-based column in that line."""
    in_wrapper: bool = False
    """The own texts are equal: the difference lies in the agent's wrapper (an exit code, an id, a timing)."""
    historical_excerpt: str | None = None
    """Around the first difference, from the same text as `first_difference`."""
    fresh_excerpt: str | None = None
    truncated: bool = False


class Degradation(Frozen):
    """A refusal the user waived with --allow-degraded, and what was done instead."""

    reason: str
    action: Literal["historical_kept", "class_substituted"]
    """`historical_kept`: a call's recorded observation stands for its rerun; `class_substituted`: the agent's
    built-in class ran (reruns and continuation) in place of a fork's own class the file names."""
    step: int | None = None
    call_id: str | None = None
    tool: str | None = None

    @classmethod
    def historical_kept(cls, step: int, call: ToolCall, reason: str) -> Degradation:
        return cls(reason=reason, action="historical_kept", step=step, call_id=call.id, tool=call.tool)


class Timings(Frozen):
    parse_s: float = 0.0
    install_s: float = 0.0
    """Making the agent's bundle present (an install from npm / PyPI when the cache lacked it; else ~0)."""
    workspace_s: float = 0.0
    """Making the workspace present (a clone or checkout of `git+URL@REV`; a directory: ~0)."""
    sandbox_start_s: float = 0.0
    rerun_s: float = 0.0
    rebuild_s: float = 0.0
    continue_s: float = 0.0
    """The continuation, when there was one (its own `duration_s`)."""
    total_s: float = 0.0


class GateMismatch(Strict):  # not frozen: a gate words the `reason` after finding the difference
    """Where a request first differs from what the gate required."""

    path: str
    expected: str
    actual: str
    reason: str = "the first main-thread request does not carry the rebuilt prefix"


class BridgeCounters(Strict):  # not frozen: the bridge counts as requests pass
    main_requests: int = 0
    side_requests: int = 0
    refused_requests: int = 0
    held_requests: int = 0
    """Main-thread requests over the step, request or token budget: never forwarded."""
    upstream_errors: int = 0
    bytes_from_agent: int = 0
    bytes_from_upstream: int = 0
    input_tokens: int | None = None
    """Summed over the main-thread answers whose usage the upstream reported (None: none reported)."""
    output_tokens: int | None = None
    side_input_tokens: int | None = None
    """The same over the side calls' answers (counted against the token budget with the above)."""
    side_output_tokens: int | None = None
    kept_tokens: int = 0
    """Reserved tokens kept for exchanges that ended before their usage was known (an answer the agent
    abandoned, or the upstream cut), counted against the budget with the above."""


RefusalReason = Literal[
    "undeclared_side_call",
    "side_call_max_tokens",
    "side_call_model",
    "side_call_share",
    "side_calls_at_once",
    "max_requests",
    "max_tokens",
    "loop",
]


class BridgeRefusal(Frozen):
    """A request the bridge did not forward although the gate let it pass: a side call of no shape the
    adapter declares, or asking for more output than its shape allows; or any request over the budget."""

    at_s: float
    """Seconds since the bridge started."""
    method: str
    path: str
    reason: RefusalReason
    detail: str


class LeftoverProcess(Frozen):
    """A process alive in the sandbox at the boundary that the replayer did not start: something a
    historical command left running (in the background)."""

    pid: int
    """Its process id inside the sandbox."""
    command: str
    """Its command line, cut to 200 characters."""


class Leftovers(Frozen):
    processes: list[LeftoverProcess] = Field(default_factory=list)
    """At most 100."""
    count: int = 0
    ended: bool = False
    """--end-leftovers: they were killed before the agent started."""


AgentStatus = Literal[
    "completed",
    "max_steps",
    "max_requests",
    "max_tokens",
    "loop",
    "idle_timeout",
    "agent_error",
    "bridge_refused",
    "session_unreadable",
]
GateVerdict = Literal["accepted", "refused", "not_reached"]
InputCondition = Literal["replayed_boundary_only", "boundary_user_prompt_appended"]


class CassetteCheck(Frozen):
    """What a continuation did with a cassette (docs/cassettes.md)."""

    cassette: str
    mode: Literal["recorded", "replayed"]
    verdict: Literal["recorded", "not_recorded", "verified", "differs"]
    """recorded / not_recorded (the reason in `notes`) when recording; verified / differs when replaying."""
    where: Literal["request", "outcome"] | None = None
    """(differs) A request the agent sent differed from the recorded one, or the final state did."""
    difference: GateMismatch | None = None
    """(differs) The first differing path, with both sides (normalized, docs/cassettes.md)."""
    exchanges: int = 0
    """Exchanges written (recorded) or answered from the cassette (replayed)."""
    redactions: int = 0
    """(recorded) Secret-looking strings replaced by [REDACTED] in what was written."""
    notes: list[str] = Field(default_factory=list)


class ContinuationResult(Frozen):
    input_condition: InputCondition
    gate: GateVerdict
    gate_notes: list[str] = Field(default_factory=list)
    """What the gate accepted beyond the prefix and the prompt (context items the CLI inserted), reported."""
    mismatch: GateMismatch | None = None
    agent_status: AgentStatus
    agent_exit_code: int | None
    steps_used: int
    """Main-thread model requests forwarded."""
    model: str | None
    mock: bool = False
    """The answers came from the built-in mock model (`--upstream mock`), not from a model service."""
    counters: BridgeCounters
    files: dict[str, str]
    """What landed in the output directory: continued session, agent stdout/stderr, bridge log."""
    duration_s: float
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Adapter facts about how the continuation ran (e.g. a step budget the replayer enforced)."""
    cassette: CassetteCheck | None = None
    refusals: list[BridgeRefusal] = Field(default_factory=list)
    """Requests the bridge did not forward (side-call shapes, budgets), at most 100; `counters` counts all."""
    leftovers: Leftovers = Field(default_factory=Leftovers)
    """Processes the prefix left running at the boundary."""


class SandboxRecord(Frozen):
    """How the run's container was confined, and what the host left out when it copied what the
    container could write."""

    limits: SandboxLimits
    capabilities_dropped: list[str]
    state_disk_limited: bool
    """The workspace and agent home had a disk quota (limits.disk_bytes)."""
    container_disk_limited: bool
    """The container's own file system had a disk quota (limits.disk_bytes)."""
    disk_used_up: list[str] = Field(default_factory=list)
    """Where the quota was used up by the end of the run ("state": workspace and agent home,
    "container": its own file system): a command that wrote there failed (`Disk quota exceeded`), and
    a rerun whose output file was there (Claude Code's, in /tmp) lost the rest of its output."""
    skipped: list[str] = Field(default_factory=list)
    """Links, FIFOs, sockets and devices not copied ("workspace/x (fifo)"), at most 100 per place."""
    skipped_count: int = 0


class ReplayResult(Frozen):
    schema_version: int = SCHEMA_VERSION
    status: Literal["ok"] = "ok"
    request: ReplayRequest
    pins: Pins
    agent: str
    agent_version: str | None
    version: VersionRecord | None = None
    """The version that ran (None only in results written before versions were resolved)."""
    session_id: str | None
    cwd: str | None
    cwd_source: CwdSource | None = None
    """recorded (in the file), inferred (from the paths it names), stated (--cwd) or default (`DEFAULT_CWD`: the
    file records none and its calls name only relative paths); None without a cwd."""
    recorded_on: RecordedOn | None = None
    """The platform the session was recorded on, where it is not the container's (Windows: its paths were
    mapped to their Git Bash form, `recorded_cwd` is the working directory as recorded); None for POSIX."""
    recorded_cwd: str | None = None
    source_sha256: str
    parse_notes: list[str] = Field(default_factory=list)
    """The trajectory's `parse_notes`: what the parser repaired or supplied, as the agent's loader does."""
    image: str | None = None
    image_id: str | None = None
    container: str | None = None
    """Name of the run's container (removed when the command ends)."""
    workspace_checkout: GitCheckout | None = None
    """Where the workspace came from when it was a repository (`--workspace git+URL@REV`)."""
    after_step: int
    boundary_call_ids: list[str]
    divergences: list[Divergence]
    hints: list[str] = Field(default_factory=list)
    """What the divergences suggest about the inputs (e.g. a workspace that is not the starting state)."""
    degradations: list[Degradation]
    native_files: list[str]
    """Paths of the rebuilt native session, relative to the output directory."""
    expected_prefix: str = "expected_prefix.json"
    boundary_model: str | None = None
    """The model the session ran at the boundary, where it switched models between turns (Codex: the prefix's
    last turn's); None: the adapter's default model. A continuation forked from this directory (compare)
    continues with it, as `run --continue` does."""
    timings: Timings
    installed: list[InstalledBundle] = Field(default_factory=list)
    """Bundles this run installed first (the cache lacked them): what, from where, how big, how long."""
    continuation: ContinuationResult | None = None
    sandbox: SandboxRecord | None = None
    """Run mode only."""


class TimelineCall(Frozen):
    name: str
    arguments: str


class TimelineEntry(Frozen):
    """One message of a conversation (the continuation after the boundary, a replay's prefix) in chat form."""

    role: str
    text: str = ""
    tool_calls: list[TimelineCall] = Field(default_factory=list)
    call_id: str | None = None
    """A tool result's call id."""
    truncated: bool = False


class RerunRecord(Frozen):
    """One rerun call's historical and fresh observation, model-visible text (a run's reruns.json)."""

    step: int
    call_id: str
    tool: str
    historical: str | None
    """None: the trajectory recorded no observation for the call."""
    fresh: str
