"""Pydantic models for everything that crosses a boundary or lands on disk."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
)

SCHEMA_VERSION = 1


class Strict(BaseModel):
    """Unknown fields refused; fields assignable (a record filled in as things happen)."""

    model_config = ConfigDict(extra="forbid")


class Frozen(Strict):
    """Unknown fields refused; immutable once built (a changed copy: `model_copy(update=...)`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


GIT_WORKSPACE_PREFIX = "git+"
_GIT_REV = r"^[A-Za-z0-9_][A-Za-z0-9._/-]*$"
"""No leading `-`: a revision is never taken for one of git's options."""


class GitWorkspace(Frozen):
    """`--workspace git+URL@REV`: the repository at URL, cloned and checked out at REV (a commit, a tag or
    a branch) as the initial workspace."""

    url: str = Field(min_length=1)
    rev: str = Field(pattern=_GIT_REV)

    @property
    def spec(self) -> str:
        return f"{GIT_WORKSPACE_PREFIX}{self.url}@{self.rev}"


def workspace_spec(value: object) -> object:
    """A string `git+URL@REV` is a GitWorkspace (split at the last `@`, so `git@host:repo` URLs keep
    theirs); any other string is a directory path."""
    if isinstance(value, str) and value.startswith(GIT_WORKSPACE_PREFIX):
        url, sep, rev = value[len(GIT_WORKSPACE_PREFIX) :].rpartition("@")
        if not sep or not url or not re.match(_GIT_REV, rev):
            raise ValueError(f"a git workspace is git+URL@REV (a commit, tag or branch), got {value!r}")
        return GitWorkspace(url=url, rev=rev)
    return value


WorkspaceSpec = Annotated[Path | GitWorkspace, BeforeValidator(workspace_spec)]
"""A workspace directory, or a repository to clone (`git+URL@REV`)."""


class GitCheckout(Frozen):
    """The repository a run's workspace was cloned from, and the commit it was checked out at."""

    url: str
    rev: str
    commit: str


_T = TypeVar("_T")


def quick_init(cls: type[_T]) -> type[_T]:
    """A frozen slotted dataclass whose `__init__` sets each slot through its descriptor, not through the
    `object.__setattr__` a frozen dataclass's own `__init__` calls per field (five times faster; the
    parse builds one per call of a long session). Still frozen: assignment and deletion raise, as before."""
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    scope: dict[str, Any] = {}
    params, body = [], []
    for f in fields:
        scope[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
        if f.default is not dataclasses.MISSING:
            scope[f"_default_{f.name}"] = f.default
            params.append(f"{f.name}=_default_{f.name}")
        else:
            assert f.default_factory is dataclasses.MISSING, f"{cls.__name__}.{f.name}: no factories"
            params.append(f.name)
        body.append(f"    _set_{f.name}(self, {f.name})")
    assert not hasattr(cls, "__post_init__"), cls
    exec(f"def __init__(self, {', '.join(params)}) -> None:\n" + "\n".join(body), scope)
    init = scope["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = init  # type: ignore[method-assign]
    return cls


@quick_init
@dataclass(frozen=True, slots=True)
class Observation:
    """What a tool call returned, as the model saw it, plus the agent's structured record of it.

    Observation, ToolCall and Step are slotted dataclasses, not pydantic models: they are built from records
    the parse has already checked (one per step of a long session: a pydantic validation of each cost more
    than loading the record), and never read from or written to a file as they are."""

    content: str | list[dict[str, Any]]
    """The model-visible result (Anthropic tool_result content: a string or content blocks)."""
    is_error: bool | None = None
    """None when the agent wrote no is_error flag at all (Claude Code does so for Read, Write, Edit)."""
    structured: Any = None
    """The agent's native structured result (Claude Code: toolUseResult); never sent to the model."""
    truncated: bool = False
    """A replayer safety budget cut this observation."""


ToolKind = Literal["rerun", "pure", "unknown"]


@quick_init
@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    tool: str
    input: dict[str, Any]
    historical: Observation | None = None


@quick_init
@dataclass(frozen=True, slots=True)
class Step:
    """One complete tool batch: every tool call of one model turn, with its observations."""

    index: int
    """1-based position among the steps of the active chain."""
    message_id: str
    calls: list[ToolCall]
    complete: bool
    """Every call has its historical observation."""
    before_compaction: bool = False
    final: bool = False
    """The agent's run ended in this step (a submission, a finish): no boundary at or after it."""


class StartingState(Frozen):
    """What a file records of the state its session started from (all optional)."""

    repository_url: str | None = None
    commit: str | None = None
    branch: str | None = None

    @classmethod
    def of(cls, repository_url: object, commit: object, branch: object) -> StartingState | None:
        """From a file's values: strings only; None when it records none of them."""
        values = [v if isinstance(v, str) and v else None for v in (repository_url, commit, branch)]
        return cls(repository_url=values[0], commit=values[1], branch=values[2]) if any(values) else None


CwdSource = Literal["recorded", "inferred", "stated", "default"]
ASKS_FOR_CWD = ": give --cwd"
"""How a parse note that asks for the working directory ends: dropped once --cwd gives it or it is inferred."""
DEFAULT_CWD = "/workspace"
"""The working directory of a file that records none and whose calls name no absolute path in it (relative
paths only: any directory holding the workspace would do), `cwd_source` `default`."""

NativeT = TypeVar("NativeT")


class SubagentFile(Frozen):
    """A subagent's own transcript found beside a parent session (Claude Code's `agent-<agentId>.jsonl`)."""

    file: str
    agent_id: str
    parent_call: str | None = None
    """The session's tool call that started it, where the session says so."""
    parent_step: int | None = None
    """The session's step holding that call."""


class SubagentOf(Frozen):
    """A subagent's own transcript (a Claude Code `agent-*.jsonl`, a Gemini CLI session of `kind: subagent`):
    the session that started it, which the CLI resumes instead of the subagent."""

    parent_session_id: str
    agent_id: str | None = None
    """The subagent's id in its parent (Claude Code's `agentId`); None where the file names none."""
    parent_file: str | None = None
    """The parent session's file, found where the CLI keeps it beside the subagent's; None when absent."""
    parent_call: str | None = None
    """The parent's tool call that started the subagent, where the parent file says so."""
    parent_step: int | None = None
    """The parent's step holding that call."""

    def refusal(self, agent: str) -> str:
        """Why a continuation is refused, in one line naming the parent session."""
        where = f" ({self.parent_file})" if self.parent_file else ""
        who = f"subagent {self.agent_id}" if self.agent_id else "a subagent"
        return (
            f"this is the transcript of {who} of session {self.parent_session_id}{where}: the {agent} CLI "
            "resumes a session, not its subagent; continue the parent session instead"
        )


class Trajectory(Frozen):
    agent: str
    agent_version: str | None
    agent_version_inferred: bool = False
    """The parser read the version from the file's features, not from a version field."""
    session_id: str | None
    cwd: str | None
    cwd_source: CwdSource = "recorded"
    """Where `cwd` came from: the file, its paths (`Reader.inferred_cwd`), --cwd or `DEFAULT_CWD`."""
    source: str
    source_sha256: str
    steps: list[Step]
    environment_image: str | None = None
    """The container image the original run's environment was made from, as the file names it (a
    mini-swe-agent SWE-bench run's instance image); the replay does not start it."""
    start: StartingState | None = None
    """The repository, commit and branch the session started from, where the file records them."""
    runs_as: str | None = None
    """What of the agent's own code runs in place of what the file names (mini-swe-agent: another agent
    class); the result's version note says it."""
    parse_notes: list[str] = Field(default_factory=list)
    """What the parser repaired or supplied the way the agent's own loader does (a skipped line, a session
    id taken from the file name), one sentence each."""
    subagent_of: SubagentOf | None = None
    """The file is a subagent's own transcript: its parent session (a continuation is refused)."""
    subagents: list[SubagentFile] = Field(default_factory=list)
    """The subagents' own transcripts found beside the session's file (its own, not the subagents')."""
    prompt_missing: bool = False
    """The file stores no first prompt and none was given (an OpenCode event log without --task or a
    sibling export): a stand-in starts the reruns, and a continuation is refused, naming --task."""
    _native: object = PrivateAttr(default=None)
    """Adapter-private parse state, used by the same adapter's rebuild (through `keep_native`/`native_as`)."""

    def keep_native(self, native: object) -> None:
        """Keep what the parse read of the native file beside the trajectory (a parser calls this once)."""
        self._native = native

    def native_as(self, kind: type[NativeT]) -> NativeT:
        """What the parse kept of the native file, which must be a `kind` (the reading adapter's own form)."""
        native = (self.__pydantic_private__ or {}).get("_native")  # `self._native` costs ~2 us a read
        if not isinstance(native, kind):
            raise TypeError(
                f"this {self.agent} trajectory keeps {type(native).__name__}, not {kind.__name__}"
            )
        return native


class InspectCall(Frozen):
    id: str
    tool: str
    input: dict[str, Any]
    kind: ToolKind
    has_observation: bool
    reason: str | None = None
    """Why the call is `unknown` (cannot be rerun at the version that runs)."""


class InspectStep(Frozen):
    index: int
    complete: bool
    before_compaction: bool
    final: bool = False
    calls: list[InspectCall]


class HeldSession(Frozen):
    """One session of a file that holds several: where it is in the file (the agent's reader found it)."""

    id: str
    form: str
    """The kind of file, as the agent that reads it names it (`openhands_output`, `opencode_events`...)."""
    lines: list[int]
    """Its lines in the file (1-based)."""
    first_prompt: str | None = None
    event_end: bytes = b"\n"
    """What ends each of its events when it is extracted alone (a blank line for an event stream)."""


class HeldSessionSummary(Frozen):
    """One session of a file that holds several."""

    id: str
    agent: str
    steps: int
    first_prompt: str | None
    """Its first user message, cut to 200 characters (None: the form does not store it)."""


class InspectReport(Frozen):
    """`replayer inspect --json`."""

    agent: str
    agent_version: str | None
    session_id: str | None
    cwd: str | None
    cwd_source: CwdSource | None = None
    """recorded (in the file), inferred (from the paths it names), stated (--cwd) or default (`DEFAULT_CWD`: the
    file records none and its calls name only relative paths); None without a cwd."""
    environment_image: str | None = None
    start: StartingState | None = None
    """The repository, commit and branch the session started from, where the file records them."""
    source_sha256: str
    parse_notes: list[str] = Field(default_factory=list)
    """The trajectory's `parse_notes`: what the parser repaired or supplied, as the agent's loader does."""
    version: VersionRecord | None = None
    """The version a run would use (without --agent-version), whose tools classified the calls."""
    steps: list[InspectStep]
    subagent_of: SubagentOf | None = None
    """The file is a subagent's own transcript: the session (and file, call, step) it belongs to."""
    subagents: list[SubagentFile] = Field(default_factory=list)
    """The session's subagents' own transcripts, found where the CLI writes them beside its file."""
    sessions: list[HeldSessionSummary] = Field(default_factory=list)
    """The sessions of a file that holds several, when no --session chose one (`steps` is then empty)."""


# limits --------------------------------------------------------------------------------------
# Every limit, wherever it comes from (a flag, a variable, a settings file, a manifest, the API), is one of
# these types: a number that is finite and at least what the engine takes (below it a limit would round to
# none, as `cpus=1e-12` became no CPU quota). docs/cli.md, "Limits".
MIN_CPUS = 0.01
"""The smallest CPU share the engines take (Docker refuses less; a nano-CPU quota of 0 is no quota)."""
MIN_MEMORY_BYTES = 6 << 20
"""The smallest memory limit the engines take (Docker's 6 MiB)."""
Count = Annotated[int, Field(ge=1)]
"""A count limit (processes, files, bytes, requests, tokens, workers): at least 1."""
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
"""A timeout: a finite number of seconds above 0."""
GraceSeconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
"""A grace period: finite, 0 for none."""
Cpus = Annotated[float, Field(ge=MIN_CPUS, allow_inf_nan=False)]


def first_error(exc: ValidationError) -> str:
    """A model's first validation error in one line: `where: why (got VALUE)`."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "value"
    return f"{where}: {error['msg']} (got {error['input']!r})"


class ReadBudget(Frozen):
    """Outer safety bounds of the confined file reads; set above what the pinned CLIs do on ordinary files."""

    max_scan_bytes: Count = 16 * 1024 * 1024
    max_content_bytes: Count = 4 * 1024 * 1024
    max_lines: Count = 100_000


class Budgets(Frozen):
    read: ReadBudget = Field(default_factory=ReadBudget)
    default_command_timeout_s: Seconds = 120.0
    max_command_timeout_s: Seconds = 600.0
    max_command_output_bytes: Count = 64 * 1024 * 1024


_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(text: str) -> int:
    """'512m', '8g', '1048576' -> bytes."""
    number, unit = text.strip().lower().rstrip("b"), ""
    if number and number[-1] in _SIZE_UNITS:
        number, unit = number[:-1], number[-1]
    if not number.isdigit() or int(number) <= 0:
        raise ValueError(f"not a size: {text!r} (e.g. 512m, 8g)")
    return int(number) * _SIZE_UNITS[unit]


def _memory(text: str) -> str:
    if parse_size(text) < MIN_MEMORY_BYTES:
        raise ValueError(f"below the engine's minimum of {MIN_MEMORY_BYTES >> 20}m")
    return text


Memory = Annotated[str, AfterValidator(_memory)]
"""A memory size (`512m`, `4g`, `4294967296b`) of at least MIN_MEMORY_BYTES."""


OUTPUT_PER_DISK = 4
"""The default total output budget of a run, in multiples of its `disk` limit."""


class SandboxLimits(Frozen):
    """Resource limits of every container a run starts; recorded in the result."""

    memory: Memory = "4g"
    pids: Count = 1024
    cpus: Cpus = 2.0
    disk_bytes: Count = 8 << 30
    """What the sandbox may write: the container's own file system and, separately, the run's state
    (workspace and agent home) each get this quota where the engine supports it; also the most the host
    copies out of (or into) a place the container can write."""
    copy_files: Count = 200_000
    """The most files the host copies out of (or into) such a place."""
    output_bytes: int | None = None
    """The most a run writes to its outputs in all (every boundary of `run -n a,b,c`); None:
    OUTPUT_PER_DISK times `disk_bytes` (`output_total`)."""

    def output_total(self) -> int:
        return self.output_bytes if self.output_bytes is not None else OUTPUT_PER_DISK * self.disk_bytes

    @classmethod
    def parse(cls, spec: str) -> SandboxLimits:
        """`memory=4g,pids=1024,cpus=2,disk=8g,files=200000,output=32g` (any subset); a bad one raises ValueError
        with a one-line reason."""
        fields: dict[str, Any] = {}
        for item in filter(None, (part.strip() for part in spec.split(","))):
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"expected KEY=VALUE, got {item!r}")
            if key == "memory":
                fields["memory"] = f"{parse_size(value)}b"
            elif key in ("disk", "output"):
                fields["disk_bytes" if key == "disk" else "output_bytes"] = parse_size(value)
            elif key in ("pids", "files") and value.isdigit() and int(value) > 0:
                fields["pids" if key == "pids" else "copy_files"] = int(value)
            elif key == "cpus":
                try:
                    fields["cpus"] = float(value)
                except ValueError:
                    raise ValueError(f"cpus: not a number: {value!r}") from None
            else:
                raise ValueError(
                    f"unknown limit or bad value {item!r} (memory, pids, cpus, disk, files, output)"
                )
        try:
            return cls(**fields)
        except ValidationError as exc:
            raise ValueError(first_error(exc)) from None


def _empty_is_unset(value: object) -> object:
    return None if value == "" else value


DEFAULT_MAX_REQUESTS = 500
"""A continuation's request budget (main-thread and side calls), docs/bridge.md "Budgets"."""
DEFAULT_MAX_TOKENS = 2_000_000
"""A continuation's token budget, every billed usage field counted (docs/bridge.md "Budgets": at Claude
Sonnet's list prices, at most $6 if all were input, $30 if all were output)."""
DEFAULT_LOOP_LIMIT = 5
"""Rounds in a row sending the same request after the same answer that end a continuation (bridges/loop.py)."""


class ContinueSettings(Frozen):
    """The continuation settings one layer gives, or all layers merged (None: this layer leaves it unset).

    The layers, later over earlier (`merge`): the built-in defaults (`ContinueRequest`'s); the settings
    files and `REPLAYER_*` (`replayer.floor.settings.load` merges those: environment > project file > user file);
    the flags or API arguments (`floor/merge.py` puts them over the settings); then, for one compare
    variant, its spec. A batch manifest line's `continuation` is the only layer of its jobs. `request()`
    turns the merged settings into what the engine receives. docs/cli.md, "Settings" and "One vocabulary"."""

    upstream: Annotated[str | None, BeforeValidator(_empty_is_unset)] = None
    """Base URL of the real model service (the bridge forwards there; the sandbox never sees it)."""
    upstream_key_env: str | None = None
    """Host environment variable holding the upstream credential; only the bridge reads it.
    Default: the agent's own (ANTHROPIC_API_KEY for Claude Code, OPENAI_API_KEY for the chat agents)."""
    boundary_prompt: str | None = None
    """Replaces the nonce and is kept: input condition boundary_user_prompt_appended."""
    max_steps: Count | None = None
    """Main-thread model requests allowed through the bridge."""
    max_requests: Count | None = None
    """Every request forwarded (main-thread and side calls) allowed through the bridge (default 500)."""
    max_tokens: Count | None = None
    """Tokens billed (every usage field the upstream reports, cache and thinking included) the bridge lets
    the continuation spend: a request goes only when its worst case fits (default 2,000,000). Set for a
    compare or a batch, it spans all their continuations."""
    loop_limit: int | None = Field(default=None, ge=1)
    """Main-thread rounds in a row that send the same request again after the same answer, after which
    the continuation ends as `loop` (default 5; bridges/loop.py)."""
    end_leftovers: bool | None = None
    """End the processes the prefix left running in the sandbox (listed in the result) before the agent
    starts (default: end them with a real upstream; list them and leave them with the mock or a cassette;
    `--keep-leftovers`: False)."""
    idle_timeout_s: Seconds | None = None
    """No agent output and no bridge traffic for this long ends the run (default: the adapter's, 300 s;
    OpenCode 600 s)."""
    grace_s: GraceSeconds | None = None
    """After SIGINT, how long the agent gets before its process group is killed (default 10 s)."""
    model: str | None = None
    """Default: the model recorded in the session."""
    agent_env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for the agent (e.g. its retry count); recorded in the result. Merged key by key."""
    record_cassette: Path | None = None
    """Write every model exchange of the continuation and its outcome into this new cassette directory."""
    cassette: Path | None = None
    """Answer from this cassette instead of an upstream (no upstream, no key) and verify the outcome
    against the recording's (docs/cassettes.md)."""

    def merge(self, later: ContinueSettings) -> ContinueSettings:
        """These settings with `later`'s over them: each setting `later` sets wins, `agent_env` is merged
        key by key, and `upstream` / `cassette` are one choice (where the answers come from): a layer that
        sets either replaces both."""
        base, over = _settings_of(self), _settings_of(later)
        given = over.model_dump(exclude_none=True, exclude={"agent_env"})
        merged = base.model_dump(exclude={"agent_env"})
        if "upstream" in given or "cassette" in given:
            merged["upstream"] = merged["cassette"] = None
        return ContinueSettings.model_validate(
            {**merged, **given, "agent_env": {**base.agent_env, **over.agent_env}}
        )

    def request(self) -> ContinueRequest:
        """What the engine receives: these settings, every unset one at its default (no upstream: "")."""
        given = _settings_of(self).model_dump(exclude_none=True)
        return ContinueRequest.model_validate({"upstream": "", **given})


def _settings_of(layer: ContinueSettings) -> ContinueSettings:
    """The continuation settings alone of a model that has more (a variant's spec, a ContinueRequest)."""
    if type(layer) is ContinueSettings:
        return layer
    return ContinueSettings.model_validate(
        {name: getattr(layer, name) for name in ContinueSettings.model_fields}
    )


class ContinueRequest(ContinueSettings):
    """`run --continue`: let the pinned agent go on from the boundary through the bridge."""

    upstream: str
    """Base URL of the real model service ("" when a cassette answers)."""
    grace_s: GraceSeconds = 10.0
    max_requests: Count = DEFAULT_MAX_REQUESTS
    max_tokens: Count = DEFAULT_MAX_TOKENS
    loop_limit: Count = DEFAULT_LOOP_LIMIT
    token_ledger: Path | None = None
    """The file holding `max_tokens` for every continuation of one compare or batch (set by the verb, when
    the user set a budget; never by a settings layer); None: the continuation's own."""
    batch_ledger: Path | None = None
    """The ledger file of the batch's own budget (`replayer batch --max-tokens`, set by the batch; its limit in
    the file), which this continuation's requests fit as well as `max_tokens`."""

    def ends_leftovers(self) -> bool:
        """`end_leftovers`, by default true when a real upstream (not the mock, not a cassette) is paid."""
        if self.end_leftovers is not None:
            return self.end_leftovers
        return bool(self.upstream) and self.upstream.partition(":")[0] != "mock"


class ReplayRequest(Frozen):
    mode: Literal["prepare", "run"]
    trajectory: Path
    after_step: int
    out: Path
    workspace: WorkspaceSpec | None = None
    image: str | None = None
    """The sandbox image; `auto`: the environment image the trajectory names (SWE-bench style)."""
    allow_degraded: bool = False
    force: bool = False
    budgets: Budgets = Field(default_factory=Budgets)
    continuation: ContinueRequest | None = None
    task: str | None = None
    """The first user prompt, for a native format that does not store it (OpenCode's event log)."""
    cwd: str | None = None
    """The working directory, for a file that records none (--cwd); refused when the file records another."""
    session: str | None = None
    """The session to replay, for a file that holds several (an OpenHands evaluation output's instance_id,
    an OpenCode session id); for any other file, its own session id or nothing."""
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra container labels (a batch labels its containers to remove those of a dead run)."""
    agent_version: str | None = None
    """The agent version to run, stated (default: the one the file records or implies)."""
    require_verified: bool = False
    """Refuse a version that is not verified instead of running it and saying so."""
    agent_env: dict[str, str] = Field(default_factory=dict)
    """The recording's environment (--agent-env) for every rerun command; the continuation gets it
    through `continuation.agent_env`."""


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


VersionSource = Literal["recorded", "inferred", "stated", "default"]


class VersionRecord(Frozen):
    """The agent version a replay ran, where that version came from, and who reran the tools."""

    version: str
    source: VersionSource
    """recorded: the file's version field; inferred: from the file's features; stated: --agent-version;
    default: the file tells nothing, so the pinned version ran."""
    status: Literal["verified", "unverified"]
    """verified: the pinned version, whose prefix, reruns and gate the test suite checks, or a version
    whose probe `replayer verify` passed (its verdict is stored)."""
    in_file: str | None = None
    """The version field of the file (None: it has none, or the version was inferred)."""
    reruns: str
    """Whose code reran the tools: the version's own, or the replayer's reimplementation of the pinned one."""
    note: str | None = None
    """What ran other than what the file names: another version (its runner does not drive that version
    yet), another class of the agent's own code (mini-swe-agent's progress-tracking agent)."""


class Pins(Frozen):
    replayer: str
    adapter: str
    cli_package: str | None
    cli_version: str | None
    base_image: str


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


class InstalledBundle(Frozen):
    """A bundle this run installed because the cache lacked it (later runs reuse it)."""

    agent: str
    version: str
    source: str
    """`npm PACKAGE` or `PyPI PACKAGE`."""
    bytes: int
    seconds: float


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


# compare ----------------------------------------------------------------------------------------
class VariantSpec(ContinueSettings):
    """What one compare variant changes from the shared continuation settings (None: keep them)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )
    boundary_prompt: str | None = Field(default=None, alias="prompt")
    """A boundary prompt (input condition boundary_user_prompt_appended); `prompt` in compare.json."""
    version: str | None = None
    """The agent's version (a bundle `replayer bundles add AGENT@VERSION` installed)."""
    patch: Path | None = None
    """A unified diff applied to the workspace at the boundary (git apply, in the run's container)."""


class Variant(Frozen):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    spec: VariantSpec = Field(default_factory=VariantSpec)


class CompareRequest(Frozen):
    """`replayer compare`: one replay to the boundary, then every variant R times from its snapshot."""

    trajectory: Path
    after_step: int
    workspace: WorkspaceSpec
    out: Path
    variants: list[Variant]
    repeat: Count = 1
    parallel: Count = 2
    check: str | None = None
    """A shell command run in each run's container after the continuation (and once at the boundary)."""
    check_timeout_s: Seconds = 600.0
    defaults: ContinueRequest
    """The continuation settings every variant starts from."""
    image: str | None = None
    allow_degraded: bool = False
    force: bool = False
    task: str | None = None
    cwd: str | None = None
    """The working directory, for a file that records none (--cwd); refused when the file records another."""
    session: str | None = None
    """The session to replay, for a file that holds several (an OpenHands evaluation output's instance_id,
    an OpenCode session id); for any other file, its own session id or nothing."""
    budgets: Budgets = Field(default_factory=Budgets)
    keep_snapshot: bool = False
    """Leave the snapshot image behind (labelled; `replayer gc` removes it)."""
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    agent_version: str | None = None
    """As in ReplayRequest: the version the replay (and every variant without `version=`) runs."""
    require_verified: bool = False


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


class ImageStatus(BaseModel):
    """The base image, as `replayer setup` found or built it."""

    model_config = ConfigDict(extra="forbid")
    tag: str
    status: Literal["present", "built"]
    bytes: int | None = None
    """The image's size (as the engine reports it)."""
    seconds: float | None = None
    """(built) How long the build took."""


class BundleStatus(BaseModel):
    """An agent bundle, as `replayer setup` found or installed it."""

    model_config = ConfigDict(extra="forbid")
    agent: str
    version: str
    path: Path
    status: Literal["present", "installed"]


class SetupReport(BaseModel):
    """`replayer setup --json`."""

    model_config = ConfigDict(extra="forbid")
    engine: Literal["running", "started"]
    image: ImageStatus | None
    """None: --no-image."""
    bundles: list[BundleStatus]
    notes: list[str]
    """What the scripts warned about (e.g. an engine without disk quotas: no loop devices here)."""
