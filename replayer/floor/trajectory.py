"""The trajectory as the parse reads it (steps of tool calls and their observations), and as `inspect`
reports it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import Field, PrivateAttr

from replayer.floor.model_base import Frozen
from replayer.floor.versions import VersionRecord

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
RecordedOn = Literal["windows"]
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
    native_form: str | None = None
    """Which of the agent's native forms the file was read as (`adapters/forms.py`: `bare rollout`...)."""
    agent_version: str | None
    agent_version_inferred: bool = False
    """The parser read the version from the file's features, not from a version field."""
    session_id: str | None
    cwd: str | None
    cwd_source: CwdSource = "recorded"
    """Where `cwd` came from: the file, its paths (`Reader.inferred_cwd`), --cwd or `DEFAULT_CWD`."""
    recorded_on: RecordedOn | None = None
    """The platform the session was recorded on, where it is not the container's (Windows: its paths were
    mapped to their Git Bash form, `recorded_cwd` is the working directory as recorded); None for POSIX."""
    recorded_cwd: str | None = None
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

    def reported(self) -> dict[str, Any]:
        """What every report of this trajectory repeats of it (`inspect`'s, a replay's result.json): the
        agent and version it names, its session, its working directory and where that came from, the
        file's hash and what the parse repaired."""
        return {
            "agent": self.agent,
            "agent_version": self.agent_version,
            "session_id": self.session_id,
            "cwd": self.cwd,
            "cwd_source": self.cwd_source if self.cwd else None,
            "recorded_on": self.recorded_on,
            "recorded_cwd": self.recorded_cwd,
            "source_sha256": self.source_sha256,
            "parse_notes": self.parse_notes,
        }

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
    native_form: str | None = None
    """Which of the agent's native forms the file was read as (`adapters/forms.py`)."""
    agent_version: str | None
    session_id: str | None
    cwd: str | None
    cwd_source: CwdSource | None = None
    """recorded (in the file), inferred (from the paths it names), stated (--cwd) or default (`DEFAULT_CWD`: the
    file records none and its calls name only relative paths); None without a cwd."""
    recorded_on: RecordedOn | None = None
    """The platform the session was recorded on, where it is not the container's (Windows: its paths were
    mapped to their Git Bash form, `recorded_cwd` is the working directory as recorded); None for POSIX."""
    recorded_cwd: str | None = None
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
