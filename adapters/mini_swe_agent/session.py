"""mini-swe-agent `.traj.json`: the three formats, steps, the prefix at a boundary and its wire form.

Formats: "mini-swe-agent-1.1" (2.x: `extra.actions`, with `tool_call_id`s in tool-call mode),
"mini-swe-agent-1" (1.x: actions re-parsed with the trajectory's own `action_regex`), and the
oldest bare list of messages. A step is one assistant message's actions with the observation
messages that follow it; FormatError turns are kept verbatim and are not steps.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field

from replayer.adapters.head import loads_document
from replayer.adapters.shapes import MAX_DEPTH, deep_place, fits, validated
from replayer.floor.errors import BadInput, bad_record, excerpt
from replayer.floor.io import read_input, sha256_soon
from replayer.floor.pins import release
from replayer.floor.trajectory import Observation, Step, ToolCall, Trajectory

Message = dict[str, Any]
Format = Literal["mini-swe-agent-1.1", "mini-swe-agent-1", "bare-list"]
TOOL = "bash"
SUBMIT_WORD = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
"""Deepest nesting of a document accepted (real ones are about 10 deep; the rebuild serializes it again)."""


class Native(BaseModel):
    """Parse state the rebuild needs."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    data: dict[str, Any]
    """The whole document (a bare list is wrapped as {"messages": [...]})."""
    format: Format
    messages: list[Message]
    step_spans: list[tuple[int, int]]
    """Per step: index of its assistant message and the index just past its last observation."""
    submitted_step: int | None
    """The step whose batch submitted (its boundary is refused)."""
    observation_index: dict[str, int]
    """Call id -> index of its historical observation message."""


_TEXT_OBSERVATION = re.compile(r"\A<returncode>-?\d+</returncode>\n<output>\n(.*)</output>\s*\Z", re.S)


def own_text(text: str) -> str | None:
    """The command's output inside an observation: the `<output>` of the text templates'
    `<returncode>N</returncode>\\n<output>\\n...</output>`, or the `output` of the tool-call templates' JSON
    `{"returncode", "output"}` (a long output's `output_head` and `output_tail` there, as one text); None
    for another template's text."""
    found = _TEXT_OBSERVATION.match(text)
    if found:
        return found.group(1)
    if not text.startswith("{"):
        return None
    try:
        parsed = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict):
        return None
    keys = ("output",) if "output" in parsed else ("output_head", "output_tail")
    parts = [parsed.get(key) for key in keys]
    return "".join(p for p in parts if isinstance(p, str)) if all(isinstance(p, str) for p in parts) else None


def as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def looks_like_trajectory(records: list[Any]) -> bool:
    fmt = records[0].get("trajectory_format") if len(records) == 1 and isinstance(records[0], dict) else None
    return isinstance(fmt, str) and fmt.startswith("mini-swe-agent")


def looks_like_messages(records: list[Any]) -> bool:
    head = records[0] if len(records) == 1 else None
    return (
        isinstance(head, list)
        and len(head) >= 2
        and all(isinstance(m, dict) and set(m) <= {"role", "content", "extra", "timestamp"} for m in head[:2])
        and head[0].get("role") == "system"
    )


# The fields the replayer reads, typed: a document of another version may carry any others.
class _Record(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, defer_build=True)


class _Action(_Record):
    command: str
    tool_call_id: str | None = None


class _Extra(_Record):
    actions: list[_Action] | None = None
    interrupt_type: str | None = None
    exit_status: str | None = None
    cost: float | None = None
    timestamp: float | None = None


class _Message(_Record):
    role: str
    content: str | list[dict[str, Any]] | None = None
    extra: _Extra | None = None
    tool_call_id: str | None = None
    timestamp: float | None = None


class _AgentConfig(_Record):
    action_regex: str | None = None


class _EnvironmentConfig(_Record):
    cwd: str | None = None
    forward_env: list[str] | None = None


class _Config(_Record):
    agent: _AgentConfig = Field(default_factory=_AgentConfig)
    model: dict[str, Any] = Field(default_factory=dict)
    environment: _EnvironmentConfig = Field(default_factory=_EnvironmentConfig)
    agent_type: str | None = None
    model_type: str | None = None
    environment_type: str | None = None


class _Info(_Record):
    exit_status: str | None = None
    mini_version: str | None = None
    config: _Config = Field(default_factory=_Config)
    model_stats: dict[str, Any] = Field(default_factory=dict)


class _Document(_Record):
    trajectory_format: str
    info: _Info = Field(default_factory=_Info)


def load(path: Path) -> tuple[Any, bytes]:
    raw = read_input(path)
    try:
        doc, nested = loads_document(raw)
    except orjson.JSONDecodeError as exc:
        raise BadInput(f"{path} is not valid JSON: {exc}") from None
    deep = deep_place(doc) if nested else None
    if deep is not None:
        raise bad_record(str(path), f"field {deep}", f"nested more than {MAX_DEPTH} levels deep")
    return doc, raw


def parse(path: Path) -> Trajectory:
    doc, raw = load(path)
    digest_of = sha256_soon(raw)  # taken on another core while the document is checked
    if isinstance(doc, list):
        data: dict[str, Any] = {"messages": doc}
        fmt: Format = "bare-list"
    elif isinstance(doc, dict) and isinstance(doc.get("messages"), list):
        data = doc
        declared = doc.get("trajectory_format")
        if declared not in ("mini-swe-agent-1.1", "mini-swe-agent-1"):
            raise BadInput(f"{path}: unknown mini-swe-agent trajectory_format {excerpt(declared)}")
        fmt = declared
        validated(_Document, doc, str(path), "")
    else:
        raise BadInput(f"{path} is not a mini-swe-agent trajectory (no messages list)")
    messages: list[Message] = data["messages"]
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise bad_record(str(path), f"message {i}", "not an object", m)
        if not fits(_Message, m):  # the model only explains a refusal: none is kept
            validated(_Message, m, str(path), f"message {i}")
    config = recorded_config(data)
    regex = _action_regex(fmt, config, messages, path)
    steps, spans, submitted, observation_index = _steps(messages, fmt, regex, path)
    digest = digest_of()
    info = as_dict(data.get("info"))
    # 1.x ends a submission with the submission text as a final user message, not an exit message.
    ends_1x = fmt != "mini-swe-agent-1.1" and info.get("exit_status") == "Submitted"
    # A bare list records no exit status: its last batch submitted if it ran the submit command.
    ends_bare = fmt == "bare-list" and bool(steps) and SUBMIT_WORD in steps[-1].calls[-1].input["command"]
    if (ends_1x or ends_bare) and spans and spans[-1][1] == len(messages):
        submitted = len(steps)
    if submitted is not None:
        steps[submitted - 1] = dataclasses.replace(steps[submitted - 1], final=True)
    env_cfg = as_dict(config.get("environment"))
    cwd = env_cfg.get("cwd") or None
    image = env_cfg.get("image")
    traj = Trajectory(
        agent="mini_swe_agent",
        agent_version=info.get("mini_version"),
        session_id=str(data.get("instance_id") or f"mini-{digest[:16]}"),
        cwd=cwd,
        source=str(path),
        source_sha256=digest,
        steps=steps,
        environment_image=image if isinstance(image, str) and image else None,
    )
    # not validated again: the document was checked as read (validation would copy every message)
    traj.keep_native(
        Native.model_construct(
            data=data,
            format=fmt,
            messages=messages,
            step_spans=spans,
            submitted_step=submitted,
            observation_index=observation_index,
        )
    )
    return traj


def recorded_config(data: dict[str, Any]) -> dict[str, Any]:
    return as_dict(as_dict(data.get("info")).get("config"))


V1_REGEX = r"```bash\s*\n(.*?)\n```"
TEXT_REGEX = r"```mswea_bash_command\s*\n(.*?)\n```"


def _action_regex(fmt: Format, config: dict[str, Any], messages: list[Message], path: Path) -> str | None:
    if fmt == "bare-list":
        # No config records the regex: the 2.x block name when it is there, else the 1.x one.
        texts = (m.get("content") for m in messages if m.get("role") == "assistant")
        return (
            TEXT_REGEX
            if any(isinstance(t, str) and "```mswea_bash_command" in t for t in texts)
            else V1_REGEX
        )
    if fmt != "mini-swe-agent-1":
        return None
    agent = as_dict(config.get("agent"))
    regex = agent.get("action_regex")
    if not isinstance(regex, str):
        return V1_REGEX
    try:
        groups = re.compile(regex, re.DOTALL).groups
    except (re.error, RecursionError, OverflowError):
        groups = -1
    if groups not in (0, 1):
        raise bad_record(
            str(path),
            "field info.config.agent.action_regex",
            "not a regular expression with one group",
            regex,
        )
    return regex


def actions_of(message: Message, fmt: Format, regex: str | None) -> list[dict[str, Any]]:
    if message.get("role") != "assistant":
        return []
    if fmt == "mini-swe-agent-1.1":
        extra = as_dict(message.get("extra"))
        actions = extra.get("actions")
        return [a for a in actions if isinstance(a, dict)] if isinstance(actions, list) else []
    content = message.get("content")
    if not isinstance(content, str):
        return []
    found = [a.strip() for a in re.findall(regex or V1_REGEX, content, re.DOTALL)]
    return [{"command": found[0]}] if len(found) == 1 else []


def _is_observation(message: Message, action: dict[str, Any]) -> bool:
    if "tool_call_id" in action:
        return message.get("role") == "tool" and message.get("tool_call_id") == action["tool_call_id"]
    extra = as_dict(message.get("extra"))
    return message.get("role") == "user" and "interrupt_type" not in extra


def _steps(
    messages: list[Message], fmt: Format, regex: str | None, path: Path
) -> tuple[list[Step], list[tuple[int, int]], int | None, dict[str, int]]:
    observation_index: dict[str, int] = {}
    steps: list[Step] = []
    spans: list[tuple[int, int]] = []
    submitted: int | None = None
    i = 0
    count = len(messages)
    while i < count:
        message = messages[i]
        actions = actions_of(message, fmt, regex) if message.get("role") == "assistant" else None
        if not actions:
            i += 1
            continue
        index = len(steps) + 1
        calls: list[ToolCall] = []
        j = i + 1
        answered = 0
        for n, action in enumerate(actions):
            command = action["command"]  # validated
            historical = None
            call_id = str(action.get("tool_call_id") or f"m{i}.a{n}")
            if j < count and _is_observation(messages[j], action):
                historical = _observation(messages[j])
                observation_index[call_id] = j
                j += 1
                answered += 1
            calls.append(ToolCall(call_id, TOOL, {"command": command}, historical))
        ends_in_submission = _submits(messages, j)
        if ends_in_submission:
            submitted = index
        complete = answered == len(calls) or ends_in_submission
        steps.append(Step(index, f"message-{i}", calls, complete))
        spans.append((i, j))
        i = j
    return steps, spans, submitted, observation_index


def _submits(messages: list[Message], at: int) -> bool:
    """Whether the exit after a batch is a submission (1.1: role exit; 1.x: a final user message)."""
    if at >= len(messages):
        return False
    message = messages[at]
    extra = as_dict(message.get("extra"))
    if message.get("role") == "exit":
        return extra.get("exit_status") == "Submitted"
    return False


def _observation(message: Message) -> Observation:
    """The observation of a checked message: no second validation."""
    content = message.get("content")
    extra = as_dict(message.get("extra"))
    return Observation(content if isinstance(content, str | list) else str(content), structured=extra)


def prefix_messages(native: Native, after_step: int) -> list[Message]:
    """The stored messages up to the end of step `after_step` (0: the system and task messages)."""
    if after_step == 0:
        first_step = native.step_spans[0][0] if native.step_spans else len(native.messages)
        return list(native.messages[: min(first_step, 2)])
    return list(native.messages[: native.step_spans[after_step - 1][1]])


def calls_and_cost(messages: list[Message]) -> tuple[int, float]:
    """`n_calls` and `cost` as the agent had them: every model response (FormatError turns included)."""
    n, cost = 0, 0.0
    for m in messages:
        extra = as_dict(m.get("extra"))
        if m.get("role") == "assistant" or extra.get("interrupt_type") == "FormatError":
            n += 1
            value = extra.get("cost", 0.0)
            cost += float(value) if isinstance(value, int | float) else 0.0
    return n, cost


def to_wire(messages: list[Message]) -> list[Message]:
    """The chat `messages` litellm sends: mini drops `extra`, and litellm drops keys whose value is None."""
    return [{k: v for k, v in m.items() if k != "extra" and v is not None} for m in messages]


WHOLE_MESSAGES_BEFORE = (1, 17, 2)
"""Until 1.17.1, 1.x's LitellmModel passed its messages to litellm as they are (timestamp, extra and all;
litellm drops keys whose value is None); 1.17.2 (#633) sends role and content only."""


def to_wire_1x(messages: list[Message], version: str) -> list[Message]:
    """The chat `messages` mini-swe-agent 1.x `version` sent."""
    if release(version) < WHOLE_MESSAGES_BEFORE:
        return [{k: v for k, v in m.items() if v is not None} for m in messages]
    return [{"role": m.get("role"), "content": m.get("content")} for m in messages]
