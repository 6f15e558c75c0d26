"""The shapes of OpenCode's session, message and part records, as the pinned CLI's `opencode import` decodes
them (opencode-ai 1.18.33: the Effect schemas `Session.Info`, `MessageV2.Info` and `MessageV2.Part` of its
bundled source), checked where each record is read (an export's message, a store's row, an event line).

A rebuild imports the session into the pinned CLI: a record it would not decode is refused at the parse,
naming the record and the field, instead of failing that import later. The models validate only (the
parser goes on with the record as read); fields they do not name pass, as the CLI's decoding lets them.
Fields `adapters.opencode.importable` fills in when absent (those an event log does not print) are
optional here, typed when present; the session's projectID and path are taken from the importing
process by the CLI and are not checked.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Discriminator, Field, Tag
from pydantic_core import core_schema as cs

from replayer.adapters.shapes import Check, Member, Open, Prefix, Rule

MAX_DEPTH = 100
"""Nesting levels a record may have: far more than OpenCode writes, and few enough that the rebuilt export
and a result embedding the record stay within orjson's limit (254 levels)."""
_SAFE = 2**53 - 1


def optional() -> Any:
    """A field the CLI may leave out: absent, never null (JSON.stringify drops undefined; the CLI's
    decoding refuses a null)."""
    return Field(default=None)


def _compiled(schema: cs.CoreSchema, problem: str, test: Check | frozenset[type]) -> Rule:
    """A check run by pydantic-core itself when a record is validated (refusing with `problem`), and as
    `test` by the record checks (a long export has tens of thousands of ids and numbers)."""
    return Rule(test, cs.custom_error_schema(schema, "shape", custom_error_message=problem))


def _prefixed(prefix: str) -> Rule:
    """A string, then one that starts with `prefix` (orjson and sqlite3 read no lone surrogate, which the
    pattern would refuse)."""
    starts = cs.str_schema(pattern=f"^{prefix}")
    refusal = cs.custom_error_schema(
        starts, "shape", custom_error_message=f"should be an id starting with {prefix!r}"
    )
    return Rule(
        Prefix(prefix),
        cs.chain_schema([cs.str_schema(strict=True), refusal]),
    )


_NUMBER = cs.union_schema([cs.int_schema(strict=True), cs.float_schema(strict=True)], mode="left_to_right")
"""JSON numbers: an int or a float (strict: a bool is no number); orjson reads no NaN or Infinity."""


def _count(value: Any) -> Any:
    """The CLI's non-negative integers (time stamps, counts): safe integers, 5.0 being 5 in JSON."""
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not (number and value == int(value) and 0 <= value <= _SAFE):
        raise ValueError("should be a non-negative integer")
    return value


def _is_count(value: Any) -> bool:
    if type(value) is int:
        return 0 <= value <= _SAFE
    try:
        _count(value)
    except Exception:
        return False
    return True


def _non_negative(value: Any) -> Any:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError("should be a number")
    if value < 0:
        raise ValueError("should be a non-negative number")
    return value


SessionID = Annotated[str, _prefixed("ses")]
MessageID = Annotated[str, _prefixed("msg")]
PartID = Annotated[str, _prefixed("prt")]
Number = Annotated[Any, _compiled(_NUMBER, "should be a number", frozenset({int, float}))]
Count = Annotated[
    Any,
    _compiled(
        # an int in range without a Python call; anything else (a float such as 5.0) by `_count`
        cs.union_schema(
            [cs.int_schema(strict=True, ge=0, le=_SAFE), cs.no_info_plain_validator_function(_count)],
            mode="left_to_right",
        ),
        "should be a non-negative integer",
        _is_count,
    ),
]
NonNegative = Annotated[Any, BeforeValidator(_non_negative)]
Record = dict[str, Any]


class Cache(Open):
    read: Number
    write: Number


class Tokens(Open):
    total: Number = optional()
    input: Number
    output: Number
    reasoning: Number
    cache: Cache


class FileDiff(Open):
    file: str = optional()
    patch: str = optional()
    additions: Number
    deletions: Number
    status: Literal["added", "deleted", "modified"] = optional()


# parts ---------------------------------------------------------------------------------------------
class _Part(Open):
    id: PartID
    sessionID: SessionID
    messageID: MessageID
    type: str


class _Span(Open):
    start: Count
    end: Count = optional()


class TextPart(_Part):
    text: str
    synthetic: bool = optional()
    ignored: bool = optional()
    time: _Span = optional()
    metadata: Record = optional()


class ReasoningPart(_Part):
    text: str
    metadata: Record = optional()
    time: _Span


class _Model(Open):
    providerID: str
    modelID: str


class SubtaskPart(_Part):
    prompt: str
    description: str
    agent: str
    model: _Model = optional()
    command: str = optional()


class FilePart(_Part):
    mime: str
    filename: str = optional()
    url: str
    source: Record = optional()


class _Start(Open):
    start: Count


class _StartEnd(Open):
    start: Count
    end: Count


class _Completed(_StartEnd):
    compacted: Count = optional()


class _Attachment(Open):
    mime: str
    url: str


class Pending(Open):
    status: Literal["pending"]
    input: Record
    raw: str


class Running(Open):
    status: Literal["running"]
    input: Record
    title: str = optional()
    metadata: Record = optional()
    time: _Start


class Completed(Open):
    status: Literal["completed"]
    input: Record
    output: str
    title: str
    metadata: Record
    time: _Completed
    attachments: list[_Attachment] = optional()


class Failed(Open):
    status: Literal["error"]
    input: Record
    error: str
    metadata: Record = optional()
    time: _StartEnd


class UnknownState(Open):
    status: Literal["pending", "running", "completed", "error"]


_STATUSES = frozenset({"pending", "running", "completed", "error"})
ToolState = Annotated[
    Annotated[Pending, Tag("pending state")]
    | Annotated[Running, Tag("running state")]
    | Annotated[Completed, Tag("completed state")]
    | Annotated[Failed, Tag("error state")]
    | Annotated[UnknownState, Tag("other state")],  # the CLI knows no other status
    Discriminator(Member("status", _STATUSES, "state")),
]


class ToolPart(_Part):
    callID: str
    tool: str
    state: ToolState
    metadata: Record = optional()


class StepStartPart(_Part):
    snapshot: str = optional()


class StepFinishPart(_Part):
    reason: str
    snapshot: str = optional()
    cost: Number
    tokens: Tokens


class SnapshotPart(_Part):
    snapshot: str


class PatchPart(_Part):
    hash: str
    files: list[str]


class AgentPart(_Part):
    name: str
    source: Record = optional()


class _Created(Open):
    created: Count


class _ApiErrorData(Open):
    message: str
    isRetryable: bool


class _ApiError(Open):
    name: Literal["APIError"]
    data: _ApiErrorData


class RetryPart(_Part):
    attempt: Count
    error: _ApiError
    time: _Created


class CompactionPart(_Part):
    auto: bool
    overflow: bool = optional()
    tail_start_id: MessageID = optional()


class UnknownPart(_Part):
    type: Literal[
        "text",
        "reasoning",
        "subtask",
        "file",
        "tool",
        "step-start",
        "step-finish",
        "snapshot",
        "patch",
        "agent",
        "retry",
        "compaction",
    ]


_PARTS: dict[str, type[_Part]] = {
    "text": TextPart,
    "reasoning": ReasoningPart,
    "subtask": SubtaskPart,
    "file": FilePart,
    "tool": ToolPart,
    "step-start": StepStartPart,
    "step-finish": StepFinishPart,
    "snapshot": SnapshotPart,
    "patch": PatchPart,
    "agent": AgentPart,
    "retry": RetryPart,
    "compaction": CompactionPart,
}
Part = Annotated[
    Annotated[TextPart, Tag("text part")]
    | Annotated[ReasoningPart, Tag("reasoning part")]
    | Annotated[SubtaskPart, Tag("subtask part")]
    | Annotated[FilePart, Tag("file part")]
    | Annotated[ToolPart, Tag("tool part")]
    | Annotated[StepStartPart, Tag("step-start part")]
    | Annotated[StepFinishPart, Tag("step-finish part")]
    | Annotated[SnapshotPart, Tag("snapshot part")]
    | Annotated[PatchPart, Tag("patch part")]
    | Annotated[AgentPart, Tag("agent part")]
    | Annotated[RetryPart, Tag("retry part")]
    | Annotated[CompactionPart, Tag("compaction part")]
    | Annotated[UnknownPart, Tag("other part")],  # the CLI knows no other part type
    Discriminator(Member("type", frozenset(_PARTS), "part")),
]


class Event(Open):
    """A line of `opencode run --format json` (its part, when it has one, is checked as a Part)."""

    type: str
    sessionID: SessionID
    timestamp: Count = optional()


# messages ------------------------------------------------------------------------------------------
class _UserTime(Open):
    created: NonNegative


class _UserModel(_Model):
    variant: str = optional()


class _Summary(Open):
    title: str = optional()
    body: str = optional()
    diffs: list[FileDiff]


class _Error(Open):
    name: Literal[
        "ProviderAuthError",
        "UnknownError",
        "MessageOutputLengthError",
        "MessageAbortedError",
        "StructuredOutputError",
        "APIError",
        "ContextOverflowError",
        "ContentFilterError",
    ]
    data: Record


class _Info(Open):
    id: MessageID
    sessionID: SessionID
    role: str


class UserInfo(_Info):
    role: Literal["user"]
    time: _UserTime = optional()
    format: Record = optional()
    summary: _Summary = optional()
    agent: str = optional()
    model: _UserModel = optional()
    system: str = optional()
    tools: dict[str, bool] = optional()


class _AssistantTime(Open):
    created: Count
    completed: Count = optional()


class _Path(Open):
    cwd: str
    root: str


class AssistantInfo(_Info):
    role: Literal["assistant"]
    time: _AssistantTime = optional()
    error: _Error = optional()
    parentID: MessageID
    modelID: str = optional()
    providerID: str = optional()
    mode: str = optional()
    agent: str = optional()
    path: _Path = optional()
    summary: bool = optional()
    cost: Number = optional()
    tokens: Tokens = optional()
    variant: str = optional()
    finish: str = optional()


class UnknownInfo(Open):
    role: Literal["user", "assistant"]


_ROLES = frozenset({"user", "assistant"})
Info = Annotated[
    Annotated[UserInfo, Tag("user info")]
    | Annotated[AssistantInfo, Tag("assistant info")]
    | Annotated[UnknownInfo, Tag("other info")],  # the CLI knows no other role
    Discriminator(Member("role", _ROLES, "info")),
]


class Message(Open):
    """A message in the export's shape: its info and its parts."""

    info: Info
    parts: list[Part]


# the session ---------------------------------------------------------------------------------------
class _SessionSummary(Open):
    additions: Number
    deletions: Number
    files: Number
    diffs: list[FileDiff] = optional()


class _SessionTokens(Open):
    input: Number
    output: Number
    reasoning: Number
    cache: Cache


class _SessionModel(Open):
    id: str
    providerID: str
    variant: str = optional()


class _SessionTime(Open):
    created: Count
    updated: Count
    compacting: Count = optional()
    archived: Number = optional()


class _Rule(Open):
    permission: str
    pattern: str
    action: Literal["allow", "deny", "ask"]


class _Revert(Open):
    messageID: MessageID
    partID: PartID = optional()
    snapshot: str = optional()
    diff: str = optional()


class _Share(Open):
    url: str


class Session(Open):
    """The export's `info`. A null field is left out when it is imported; slug, directory, title, version
    and time are filled in when absent."""

    id: SessionID
    slug: str | None = None
    workspaceID: str | None = None
    directory: str | None = None
    parentID: SessionID | None = None
    summary: _SessionSummary | None = None
    cost: Number | None = None
    tokens: _SessionTokens | None = None
    share: _Share | None = None
    title: str | None = None
    agent: str | None = None
    model: _SessionModel | None = None
    version: str | None = None
    metadata: Record | None = None
    time: _SessionTime | None = None
    permission: list[_Rule] | None = None
    revert: _Revert | None = None
