"""OpenHands V0 trajectories (openhands-ai <= 1.6.0): the JSON list of serialized events that
`save_trajectory_path` writes, or an evaluation output wrapping it in `history`.

A step is one LLM response's tool-call actions (`tool_call_metadata.model_response.id`) with their
observations (by `cause`); a response's actions are executed one at a time, so its observations
interleave. System, message, recall and state events are not steps. The chat messages follow
`ConversationMemory` with native function calling: the assistant message is the response's own
message (all its tool calls), emitted before its tool results once every call has one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters import carried, held
from replayer.adapters.openhands import bundle
from replayer.adapters.openhands.session import (
    MAX_DEPTH,
    CommandMetadata,
    Record,
    deep_place,
    load_json,
    validated,
)
from replayer.adapters.shapes import fits
from replayer.floor.errors import BadInput, PlanRefused, bad_record, excerpt
from replayer.floor.io import read_input, sha256_hex
from replayer.floor.trajectory import HeldSession, Observation, StartingState, Step, ToolCall, Trajectory

KNOWN_ACTIONS = {
    "system", "message", "recall", "run", "read", "edit", "think", "finish", "change_agent_state", "null",
    "run_ipython", "browse", "browse_interactive", "condensation", "condensation_request", "mcp", "task_tracking",
    "delegate", "reject",
}  # fmt: skip
MAX_MESSAGE_CHARS = 30_000
"""LLMConfig.max_message_chars: ConversationMemory cuts a longer observation in the middle."""
NOT_STEPS = {
    "system",
    "message",
    "recall",
    "change_agent_state",
    "null",
    "condensation",
    "condensation_request",
}
"""Agent actions that are no tool call (GUI exports carry change_agent_state; condensation is bookkeeping)."""
TOOL_OBSERVATIONS = {"run", "read", "edit", "think", "error", "run_ipython", "write", "mcp", "task_tracking"}


# The fields the replayer reads, typed: events of other versions may carry any others.
class _Function(Record):
    name: str
    arguments: str


class _CallMessage(Record):
    id: str
    function: _Function


class _ChoiceMessage(Record):
    tool_calls: list[_CallMessage] | None = None


class _Choice(Record):
    message: _ChoiceMessage | None = None


class _Response(Record):
    id: str | None = None
    choices: list[_Choice] | None = None


class _ToolCallMetadata(Record):
    tool_call_id: str
    function_name: str | None = None
    model_response: _Response | None = None


class _Args(Record):
    openhands_version: str | None = None


class _Extras(Record):
    metadata: CommandMetadata | None = None
    working_dir: str | None = None


class _V0Event(Record):
    source: str
    id: int | None = None
    action: str | None = None
    observation: str | None = None
    args: _Args | None = None
    extras: _Extras | None = None
    tool_call_metadata: _ToolCallMetadata | None = None
    cause: int | None = None
    content: str = ""
    success: bool | None = None


@dataclass
class NativeV0:
    events: list[dict[str, Any]]
    wrapper: dict[str, Any] | None
    """The evaluation output around `history` (None for a bare event list)."""
    step_events: list[list[int]] = field(default_factory=list)
    observation_of: dict[str, int] = field(default_factory=dict)
    """tool_call_id -> index of its observation in `events`."""

    def step_end(self, after_step: int) -> int:
        if after_step == 0:
            return self.step_events[0][0] if self.step_events else len(self.events)
        return max(self.step_events[after_step - 1]) + 1


def _events_of(value: Any) -> tuple[list[Any], dict[str, Any] | None] | None:
    if isinstance(value, dict) and isinstance(value.get("history"), list):
        return value["history"], value
    if isinstance(value, list):
        return value, None
    return None


def _is_event(item: Any) -> bool:
    return isinstance(item, dict) and "source" in item and ("action" in item or "observation" in item)


def looks_like_v0(head: list[Any]) -> bool:
    found = _events_of(head[0]) if len(head) == 1 else None
    return bool(found and found[0] and all(_is_event(e) for e in found[0][:16]))


def _tcm(event: dict[str, Any]) -> dict[str, Any] | None:
    tcm = event.get("tool_call_metadata")
    return tcm if isinstance(tcm, dict) and isinstance(tcm.get("tool_call_id"), str) else None


def response_id(event: dict[str, Any]) -> str | None:
    tcm = _tcm(event)
    response = (tcm or {}).get("model_response")
    rid = response.get("id") if isinstance(response, dict) else None
    return rid if isinstance(rid, str) else None


def parse(path: Path) -> Trajectory:
    data = read_input(path)
    found = _events_of(load_json(path, data, "trajectory"))
    if not found or not all(_is_event(e) for e in found[0]):
        raise BadInput(f"{path}: not a list of OpenHands V0 events")
    events, wrapper = found
    for i, e in enumerate(events):
        if not fits(_V0Event, e):  # the model only explains a refusal: none is kept
            validated(_V0Event, e, str(path), f"event {i}")
    native = NativeV0(events=events, wrapper=wrapper)
    version = None
    for e in events:
        if e.get("action") == "system":
            version = (e.get("args") or {}).get("openhands_version")
    steps = _steps(native, path)
    cwd = next(
        (
            ((e.get("extras") or {}).get("metadata") or {}).get("working_dir")
            or (e.get("extras") or {}).get("working_dir")
            for e in events
            if e.get("observation") in ("run", "recall")
            and (
                ((e.get("extras") or {}).get("metadata") or {}).get("working_dir")
                or (e.get("extras") or {}).get("working_dir")
            )
        ),
        None,
    )
    digest = sha256_hex(data)
    session = (wrapper or {}).get("instance_id") or digest[:32]
    traj = Trajectory(
        agent=bundle.NAME_V0,
        agent_version=str(version) if version else None,
        session_id=str(session),
        cwd=cwd,
        source=str(path),
        source_sha256=digest,
        steps=steps,
        start=_instance_start(wrapper),
        # a fork's own action (`chat`): the agent's are steps of unknown tools, like any tool V0 lacks
        parse_notes=carried.note((e.get("action") for e in events), KNOWN_ACTIONS, "actions", "a fork's?"),
    )
    traj.keep_native(native)
    return traj


def foreign_actions(events: list[dict[str, Any]]) -> list[str]:
    """The action types of `events` V0 does not define (a fork's), each once, quoted."""
    found = {
        e["action"]: None for e in events if e.get("action") is not None and e["action"] not in KNOWN_ACTIONS
    }
    return [excerpt(str(kind)) for kind in found]


_GITHUB_REPO = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def recorded_llm_config(wrapper: dict[str, Any] | None) -> dict[str, Any]:
    """An evaluation output's `metadata.llm_config` (the LLM the recorder ran with), or {}."""
    metadata = (wrapper or {}).get("metadata")
    config = metadata.get("llm_config") if isinstance(metadata, dict) else None
    return config if isinstance(config, dict) else {}


def native_tool_calling(wrapper: dict[str, Any] | None) -> str:
    """The `[llm] native_tool_calling` the continuation runs with, as the companion reads it: the recorded
    setting (an evaluation output's llm_config; None: the version decides by the model), else true (the
    pinned config's: event lists record no LLM config)."""
    config = recorded_llm_config(wrapper)
    if "native_tool_calling" not in config:
        return "true"
    return {True: "true", False: "false", None: "unset"}.get(config["native_tool_calling"], "true")


def _instance_start(wrapper: dict[str, Any] | None) -> StartingState | None:
    """An evaluation output's instance: SWE-bench style `repo` (`owner/name`, a GitHub repository in every
    data set of that family) and `base_commit`."""
    instance = (wrapper or {}).get("instance")
    if not isinstance(instance, dict):
        return None
    repo = instance.get("repo")
    url = f"https://github.com/{repo}" if isinstance(repo, str) and _GITHUB_REPO.match(repo) else None
    return StartingState.of(url, instance.get("base_commit"), None)


def _steps(native: NativeV0, path: Path) -> list[Step]:
    by_id = {e.get("id"): i for i, e in enumerate(native.events) if isinstance(e.get("id"), int)}
    obs_of_action: dict[int, int] = {}
    for i, e in enumerate(native.events):
        if "observation" in e and isinstance(e.get("cause"), int) and e["cause"] in by_id:
            obs_of_action.setdefault(by_id[e["cause"]], i)
    groups: list[tuple[str, list[int]]] = []
    after_user = False
    """A user message came since the last action: the next action starts a step whatever its response id
    (a model service may number its responses anew, as the scripted one of `replayer verify` does)."""
    for i, e in enumerate(native.events):
        if e.get("action") == "message" and e.get("source") == "user":
            after_user = True
        if "action" not in e or e.get("source") != "agent" or e["action"] in NOT_STEPS:
            continue
        rid = response_id(e) or f"action-{e.get('id', i)}"
        if groups and groups[-1][0] == rid and not after_user:
            groups[-1][1].append(i)
        else:
            groups.append((rid, [i]))
        after_user = False
    steps = []
    for n, (rid, actions) in enumerate(groups, 1):
        calls, span, final = [], list(actions), False
        for i in actions:
            e = native.events[i]
            tcm = _tcm(e) or {}
            call_id = str(tcm.get("tool_call_id") or f"action-{e.get('id', i)}")
            obs = obs_of_action.get(i)
            historical = None
            if obs is not None:
                span.append(obs)
                native.observation_of[call_id] = obs
                historical = observation_of(native.events[obs])
            final = final or e["action"] == "finish"
            tool = str(tcm.get("function_name") or e["action"])
            calls.append(ToolCall(id=call_id, tool=tool, input=_input(e, path, i), historical=historical))
        native.step_events.append(sorted(span))
        complete = all(c.historical is not None or c.tool == "finish" for c in calls)
        steps.append(Step(index=n, message_id=rid, calls=calls, complete=complete, final=final))
    return steps


def _input(event: dict[str, Any], path: Path, index: int) -> dict[str, Any]:
    tcm = _tcm(event)
    response = (tcm or {}).get("model_response") or {}
    for choice in response.get("choices") or []:
        for call in (choice.get("message") or {}).get("tool_calls") or []:
            if call.get("id") == (tcm or {}).get("tool_call_id"):
                try:
                    args = orjson.loads(call["function"]["arguments"])
                except (orjson.JSONDecodeError, KeyError, TypeError):
                    break
                if deep_place(args) is not None:
                    where = f"event {index}, field tool_call_metadata.model_response: tool call {excerpt(call['id'])}"
                    raise bad_record(str(path), where, f"arguments nested more than {MAX_DEPTH} levels deep")
                return args if isinstance(args, dict) else {"arguments": args}
    return dict(event.get("args") or {})


def observation_text(event: dict[str, Any]) -> str:
    """What the model saw of an observation (its `to_agent_observation` for commands; content otherwise)."""
    content = str(event.get("content", ""))
    if event.get("observation") != "run":
        return content
    meta = (event.get("extras") or {}).get("metadata") or {}
    text = f"{meta.get('prefix', '')}{content}{meta.get('suffix', '')}"
    if meta.get("working_dir"):
        text += f"\n[Current working directory: {meta['working_dir']}]"
    if meta.get("py_interpreter_path"):
        text += f"\n[Python interpreter: {meta['py_interpreter_path']}]"
    if meta.get("exit_code", -1) != -1:
        text += f"\n[Command finished with exit code {meta['exit_code']}]"
    return text


def observation_of(event: dict[str, Any]) -> Observation:
    return Observation(
        content=observation_text(event),
        is_error=event.get("observation") == "error" or event.get("success") is False,
        structured=event,
    )


def _text(text: str) -> list[dict[str, Any]]:
    return [{"type": "text", "text": text}] if text else []


def to_messages(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ConversationMemory.process_events with native function calling, prompt extensions off."""
    messages: list[dict[str, Any]] = []
    pending: dict[str, dict[str, Any]] = {}
    """response id -> the assistant message waiting for all its tool results."""
    results: dict[str, dict[str, Any]] = {}
    foreign: set[Any] = set()
    """Ids of actions V0 does not define (a fork's): their observations, of the fork's kinds too, are tool
    results as every observation of a tool call is."""
    for e in events:
        kind = e.get("action")
        if kind is not None and kind not in KNOWN_ACTIONS and isinstance(e.get("id"), int):
            foreign.add(e["id"])
        if kind == "system":
            messages.append(
                {"role": "system", "content": _text(str((e.get("args") or {}).get("content", "")))}
            )
        elif kind == "message":
            role = "user" if e.get("source") == "user" else "assistant"
            messages.append({"role": role, "content": _text(str((e.get("args") or {}).get("content", "")))})
        elif kind is not None and _tcm(e):
            rid = response_id(e)
            response = ((_tcm(e) or {}).get("model_response") or {}).get("choices") or [{}]
            message = response[0].get("message") or {}
            if rid and rid not in pending:
                pending[rid] = {
                    "role": "assistant",
                    "content": _text(str(message.get("content") or "")),
                    "tool_calls": [
                        {"id": c["id"], "type": "function", "function": dict(c["function"])}
                        for c in message.get("tool_calls") or []
                    ],
                }
        elif (e.get("observation") in TOOL_OBSERVATIONS or e.get("cause") in foreign) and _tcm(e):
            tcm = _tcm(e) or {}
            if len(observation_text(e)) > MAX_MESSAGE_CHARS:
                raise PlanRefused(
                    f"the observation of {excerpt(tcm['tool_call_id'])} is longer than {MAX_MESSAGE_CHARS} characters; "
                    "OpenHands cuts it and the replayer does not reproduce the cut yet"
                )
            results[str(tcm["tool_call_id"])] = {
                "role": "tool",
                "content": _text(observation_text(e)),
                "tool_call_id": tcm["tool_call_id"],
                "name": tcm.get("function_name"),
            }
        for rid, assistant in list(pending.items()):
            ids = [c["id"] for c in assistant["tool_calls"]]
            if all(i in results for i in ids):
                messages.append(assistant)
                messages.extend(results.pop(i) for i in ids)
                del pending[rid]
    return messages


def sessions_held(path: Path, first_line: bytes) -> list[HeldSession] | None:
    """The instances of an evaluation output (`output.jsonl`, one instance a line); None for another file."""
    if _instance_of(held.first_json_line(first_line)) is None:
        return None
    return held.by_line(
        path, "openhands_output", "an evaluation output instance", _instance_of, _first_prompt
    )


def _instance_of(value: Any) -> str | None:
    ok = isinstance(value, dict) and isinstance(value.get("history"), list)
    return str(value["instance_id"]) if ok and value.get("instance_id") is not None else None


def _first_prompt(value: dict[str, Any]) -> str | None:
    """An instance's first user message, cut to 200 characters."""
    for event in value["history"]:
        if isinstance(event, dict) and event.get("source") == "user" and event.get("action") == "message":
            content = (event.get("args") or {}).get("content")
            return content[:200] if isinstance(content, str) else None
    return None
