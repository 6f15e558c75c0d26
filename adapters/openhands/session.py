"""OpenHands V1 (software-agent SDK) conversation directories: `base_state.json` + `events/event-NNNNN-<id>.json`.

A step is one LLM response's complete set of ActionEvents (equal `llm_response_id`) with the
observation each one got (ObservationEvent, AgentErrorEvent or UserRejectObservation, matched by
`tool_call_id`). System, message, condensation and state events are not steps. The directory
records no SDK version: a conversation is taken as the pinned version's when every event kind and
base-state key is one that version writes (anything else is refused: fail closed).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import orjson
from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from replayer.adapters.head import conversation_root, loads_document
from replayer.adapters.openhands import bundle
from replayer.adapters.openhands.wire import tool_text
from replayer.adapters.shapes import MAX_DEPTH, Member, deep_place, fits, shallow_text, validated
from replayer.floor.errors import BadInput, bad_record, excerpt
from replayer.floor.foreign import Folder
from replayer.floor.io import MAX_INPUT_BYTES, read_input, sha256_soon
from replayer.floor.pins import pinned_version
from replayer.floor.trajectory import Observation, Step, ToolCall, Trajectory

BASE_STATE = "base_state.json"
EVENTS = "events"
_EVENT_FILE = re.compile(r"^event-(\d{5,})-([0-9a-fA-F-]{36})\.json$")
ACTION_KINDS = {"ActionEvent"}
OBSERVATION_KINDS = {"ObservationEvent", "AgentErrorEvent", "UserRejectObservation"}
CONTEXT_KINDS = {"SystemPromptEvent", "MessageEvent"}
"""Model-visible events that are not steps."""
STATE_KINDS = {"ConversationStateUpdateEvent", "PauseEvent", "ConversationErrorEvent", "TokenEvent"}
"""Events the model never sees."""
REFUSED_KINDS = {"Condensation", "CondensationRequest", "CondensationSummaryEvent"}
_KNOWN_OTHER_KINDS = CONTEXT_KINDS | STATE_KINDS
"""A condensed history is not the list of events: its prefix cannot be rebuilt from them (yet)."""
BASE_STATE_KEYS = {
    "id", "agent", "workspace", "persistence_dir", "max_iterations", "stuck_detection", "execution_status",
    "confirmation_policy", "activated_knowledge_skills", "activated_path_rules", "invoked_skills",
    "blocked_actions", "blocked_messages", "last_user_message_id", "leaf_event_id", "head_is_empty", "stats",
    "secret_registry", "tags", "agent_state",
}  # fmt: skip
"""Every key openhands-sdk 1.34.0 writes into base_state.json."""


"""Deepest nesting of a record accepted (real ones are under 10 deep; the rebuild serializes them again)."""


# The fields the replayer reads, typed: records of another version may carry any others.
class Record(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, defer_build=True)


class _OtherBlock(Record):
    type: str
    text: str | None = None


class _TextBlock(_OtherBlock):
    text: str


_Block = Annotated[
    Annotated[_TextBlock, Tag("text block")] | Annotated[_OtherBlock, Tag("other block")],
    Discriminator(Member("type", frozenset({"text"}), "block")),
]
"""A content block: a text block has its text (a schema, not a validator of its own, so that the events
are checked by their compiled check: `shapes.fits`)."""


class _Event(Record):
    id: str
    kind: str
    source: str
    timestamp: str
    parent_id: str | None = None


class _ToolCall(Record):
    id: str
    name: str
    arguments: str


class _ActionEvent(_Event):
    llm_response_id: str
    tool_call: _ToolCall
    tool_call_id: str
    tool_name: str
    action: dict[str, Any] | None = None
    thought: list[_Block] = Field(default_factory=list)


class CommandMetadata(Record):
    """A terminal observation's `metadata` (V1) or a V0 command's `extras.metadata`."""

    prefix: str = ""
    suffix: str = ""
    working_dir: str | None = None
    py_interpreter_path: str | None = None
    exit_code: int | None = None


class _Observation(Record):
    kind: str | None = None
    is_error: bool | None = None
    content: list[_Block] = Field(default_factory=list)
    metadata: CommandMetadata | None = None
    full_output_save_dir: str | None = None


class _ObservationBase(_Event):
    tool_call_id: str
    tool_name: str


class _ObservationEvent(_ObservationBase):
    observation: _Observation


class _AgentErrorEvent(_ObservationBase):
    error: str = ""


class _UserRejectObservation(_ObservationBase):
    rejection_reason: str = ""


class _LlmMessage(Record):
    role: str
    content: list[_Block] = Field(default_factory=list)


class _MessageEvent(_Event):
    llm_message: _LlmMessage
    extended_content: list[_Block] = Field(default_factory=list)


class _SystemPromptEvent(_Event):
    system_prompt: _Block
    dynamic_context: _Block | None = None


_EVENT_MODELS: dict[str, type[_Event]] = {
    "ActionEvent": _ActionEvent,
    "ObservationEvent": _ObservationEvent,
    "AgentErrorEvent": _AgentErrorEvent,
    "UserRejectObservation": _UserRejectObservation,
    "MessageEvent": _MessageEvent,
    "SystemPromptEvent": _SystemPromptEvent,
}


class _Llm(Record):
    model: str | None = None


class _Agent(Record):
    llm: _Llm | None = None


class _Workspace(Record):
    working_dir: str | None = None


class _Usage(Record):
    response_id: str = ""


class _Metrics(Record):
    response_latencies: list[_Usage] | None = None
    token_usages: list[_Usage] | None = None
    costs: list[_Usage] | None = None


class _Stats(Record):
    usage_to_metrics: dict[str, _Metrics] = Field(default_factory=dict)


class _BaseState(Record):
    id: str
    agent: _Agent
    workspace: _Workspace | None = None
    stats: _Stats | None = None


_TERMINAL_RESULT = re.compile(
    r"\A(?:\x1b\[\?2004l)?(.*?)(?:\n?\x1b\[\?2004h)?"
    r"(?:\n\[(?:The command |Current working directory: |Python interpreter: |Command finished )[^\n]*\])+\Z",
    re.S,
)


def own_text(text: str) -> str | None:
    """What a terminal (V1) or execute_bash (V0) command printed, without the terminal's bracketed-paste
    marks and the `[The command completed with exit code N.]\\n[Current working directory: ...]...` lines
    the tool appends; None for other text."""
    found = _TERMINAL_RESULT.match(text)
    return found.group(1) if found else None


def load_json(path: Path | str, data: bytes, what: str) -> Any:
    """A record file's JSON value, refused when it is not JSON or nests too deep."""
    try:
        value, nested = loads_document(data)
    except orjson.JSONDecodeError:
        raise BadInput(f"{path} is not JSON (a damaged {what})") from None
    deep = deep_place(value) if nested else None
    if deep is not None:
        raise bad_record(str(path), f"field {deep}", f"nested more than {MAX_DEPTH} levels deep")
    return value


@dataclass
class Native:
    """What rebuild and rerun need: the raw state and events, and where each step's events lie."""

    root: Path
    base_state: dict[str, Any]
    events: list[dict[str, Any]]
    step_events: list[list[int]] = field(default_factory=list)
    """Per step: indexes into `events` of its actions and observations."""
    observation_of: dict[str, int] = field(default_factory=dict)
    """tool_call_id -> index of the observation event."""
    first_user_text: str | None = None

    def step_end(self, after_step: int) -> int:
        """Number of events that make the prefix ending after step `after_step` (complete pairs)."""
        if after_step == 0:
            first = self.step_events[0][0] if self.step_events else len(self.events)
            return first
        return max(self.step_events[after_step - 1]) + 1


def read_events(root: Path, digest: Any, early: list[str] | None = None) -> list[dict[str, Any]]:
    """The event files in order, each read without following a link (a link or special file is refused);
    the ids of actions stored in an early SDK's form are added to `early` (`current_tool_call`)."""
    try:
        folder = Folder.open(root / EVENTS)
    except BadInput:
        raise BadInput(f"{root}: no {EVENTS} directory (not an OpenHands conversation)") from None
    with folder:
        return _read_events(root, folder, digest, [] if early is None else early)


def _read_events(root: Path, folder: Folder, digest: Any, early: list[str]) -> list[dict[str, Any]]:
    named: list[tuple[int, str, str]] = []
    try:
        names = folder.names()
    except OSError as exc:
        raise BadInput(f"cannot read {folder.path}: {exc.strerror}") from None
    prefix = (
        f"{folder.path}{os.sep}"  # paths as strings: thousands of Path objects cost more than their reads
    )
    for name in names:
        if name.startswith("."):
            continue  # .eventlog.lock
        m = _EVENT_FILE.match(name)
        if not m:
            raise BadInput(f"{prefix}{name}: not an event file of an OpenHands conversation")
        named.append((int(m.group(1)), m.group(2), name))
    named.sort()
    events = []
    for n, (index, event_id, name) in enumerate(named):
        if index != n:
            raise BadInput(f"{root}: event {n} is missing (found event-{index:05d})")
        entry = prefix + name
        data = folder.read(name, MAX_INPUT_BYTES)  # a link or special file: refused
        digest.update(data)
        raw = load_json(entry, data, "conversation")
        if not isinstance(raw, dict):
            raise bad_record(entry, "event", "not an object", raw)
        kind = raw.get("kind")
        if kind == "ActionEvent" and (current := current_tool_call(raw)) is not raw:
            raw = current
            early.append(str(raw.get("id")))
        model = _EVENT_MODELS.get(kind, _Event) if isinstance(kind, str) else _Event
        if not fits(model, raw):  # the model only explains a refusal: none is kept
            validated(model, raw, entry, "")
        if raw["id"] != event_id:  # a string: checked above
            raise BadInput(f"{entry}: its id {excerpt(raw['id'])} differs from its file name")
        events.append(raw)
    return events


EARLY_TOOL_CALL_NOTE = (
    "actions store their tool calls in an early SDK's form (`tool_call.function.name`, the OpenAI shape): "
    "read as the current one (`tool_call.name`)"
)


def current_tool_call(event: dict[str, Any]) -> dict[str, Any]:
    """An action event with its tool call in the current form: early SDKs stored the OpenAI-shaped
    `{id, type, function: {name, arguments}}` (litellm's ChatCompletionMessageToolCall), later ones
    `MessageToolCall` `{id, name, arguments, origin}`; the rebuilt conversation is written in the latter."""
    call = event.get("tool_call")
    if not isinstance(call, dict) or "name" in call or not isinstance(call.get("function"), dict):
        return event
    function = call["function"]
    mapped = {
        "id": call.get("id"),
        "name": function.get("name"),
        "arguments": function.get("arguments"),
        "origin": "completion",  # the chat completion API family, the only one early SDKs called
    }
    return {**event, "tool_call": mapped}


def parse(path: Path) -> Trajectory:
    """`path`: the conversation folder, or the agent server's `<id>` folder holding it as `event_service/`."""
    root = conversation_root(path) or path
    parts = _Parts()
    base_path = root / BASE_STATE
    data = read_input(base_path)
    parts.update(data)
    base = load_json(base_path, data, "conversation")
    if not isinstance(base, dict) or "agent" not in base or "id" not in base:
        raise BadInput(f"{base_path} is not an OpenHands base state")
    validated(_BaseState, base, str(base_path), "")
    # Inferred: the pinned SDK writes exactly these keys; another version wrote this one (stated with
    # --agent-version, or the pinned version runs by default). Earlier SDKs write a subset (1.26: no
    # leaf_event_id, head_is_empty, activated_path_rules), later ones more.
    version: str | None = pinned_version(bundle.NAME) if set(base) == BASE_STATE_KEYS else None
    early: list[str] = []
    events = read_events(root, parts, early)
    digest = sha256_soon(b"".join(parts))  # one update, on another core while the steps are built
    native = Native(root=root, base_state=base, events=events)
    steps = _steps(native, base_path)
    traj = _trajectory(native, steps, version, str(path), digest())
    return traj.model_copy(update={"parse_notes": [EARLY_TOOL_CALL_NOTE]}) if early else traj


class _Parts(list[bytes]):
    """The files' bytes in the order read, hashed in one go: an update per small file holds the GIL."""

    update = list.append


def _steps(native: Native, where: Path) -> list[Step]:
    groups: list[tuple[str, list[int]]] = []
    obs_by_call: dict[str, int] = {}
    previous_kind = None
    for i, event in enumerate(native.events):
        kind = event["kind"]
        if kind in REFUSED_KINDS:
            raise BadInput(f"{where.parent}: a condensed conversation ({kind}) is not supported")
        if kind in ACTION_KINDS:
            rid = event["llm_response_id"]  # validated, as the other fields read below
            if previous_kind in ACTION_KINDS and groups and groups[-1][0] == rid:
                groups[-1][1].append(i)
            else:
                groups.append((rid, [i]))
        elif kind in OBSERVATION_KINDS:
            obs_by_call[event["tool_call_id"]] = i
        elif kind == "MessageEvent":
            message = event.get("llm_message") or {}
            if native.first_user_text is None and message.get("role") == "user":
                native.first_user_text = "".join(
                    c.get("text", "") for c in message.get("content", []) if c.get("type") == "text"
                )
        elif kind not in _KNOWN_OTHER_KINDS:
            raise BadInput(
                f"{where.parent}: unknown event kind {excerpt(kind)} (not written by openhands-sdk 1.34)"
            )
        previous_kind = kind
    native.observation_of = obs_by_call
    steps = []
    events, root = native.events, where.parent
    for n, (rid, indexes) in enumerate(groups, 1):
        calls: list[ToolCall] = []
        span = list(indexes)
        final = False
        complete = True
        for i in indexes:
            event = events[i]
            call_id = str(event["tool_call_id"])
            obs = obs_by_call.get(call_id)
            historical = None
            if obs is not None:
                span.append(obs)
                historical = observation_of(events[obs])
            else:
                complete = False
            action = event.get("action") or {}
            final = final or event.get("tool_name") == "finish" or action.get("kind") == "FinishAction"
            calls.append(ToolCall(call_id, str(event.get("tool_name")), _input(event, root), historical))
        span.sort()
        native.step_events.append(span)
        steps.append(Step(n, rid, calls, complete, False, final))
    return steps


def _input(action_event: dict[str, Any], root: Path) -> dict[str, Any]:
    text = action_event["tool_call"].get("arguments") or "{}"
    try:
        args = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {"arguments": action_event["tool_call"].get("arguments")}
    if not shallow_text(text, MAX_DEPTH) and deep_place(args) is not None:
        where = f"event {action_event['id']}, field tool_call.arguments"
        raise bad_record(str(root), where, f"nested more than {MAX_DEPTH} levels deep")
    return args if isinstance(args, dict) else {"arguments": args}


def observation_of(event: dict[str, Any]) -> Observation:
    """The model-visible text of an observation event (as the SDK renders it), with the event as the record."""
    obs = event.get("observation") or {}
    is_error = bool(obs.get("is_error")) if event["kind"] == "ObservationEvent" else True
    return Observation(tool_text(event), is_error, event)


def _trajectory(native: Native, steps: list[Step], version: str | None, source: str, sha: str) -> Trajectory:
    workspace = native.base_state.get("workspace") or {}
    traj = Trajectory(
        agent=bundle.NAME,
        agent_version=version,
        agent_version_inferred=version is not None,
        session_id=str(native.base_state.get("id") or "") or None,
        cwd=workspace.get("working_dir"),
        source=source,
        source_sha256=sha,
        steps=steps,
    )
    traj.keep_native(native)
    return traj
