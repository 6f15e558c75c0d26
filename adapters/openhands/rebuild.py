"""Write a V1 conversation directory ending after a step: complete action/observation pairs, the fresh
observation events in place of the historical ones, a linear `parent_id` chain and `leaf_event_id` on the
last event (when the recording SDK keeps a tree of events) and an idle execution status (so the SDK resumes
it and asks the model)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.openhands.session import BASE_STATE, EVENTS, OBSERVATION_KINDS, Native
from replayer.adapters.sandbox_paths import AGENT_HOME
from replayer.floor.io import write_bytes_atomic
from replayer.floor.trajectory import Observation, Trajectory

CONVERSATIONS = "conversations"
_OPTS = orjson.OPT_INDENT_2


def conversation_dir(home: Path, native: Native) -> Path:
    return home / CONVERSATIONS / str(native.base_state["id"]).replace("-", "")


def prefix_events(
    trajectory: Trajectory, after_step: int, observations: dict[str, Observation]
) -> list[dict[str, Any]]:
    native = trajectory.native_as(Native)
    events = [copy.deepcopy(e) for e in native.events[: native.step_end(after_step)]]
    for call_id, fresh in observations.items():
        at = native.observation_of.get(call_id)
        record = fresh.structured
        if at is None or at >= len(events) or not isinstance(record, dict):
            continue
        if record.get("kind") in OBSERVATION_KINDS and record.get("tool_call_id") == call_id:
            events[at] = copy.deepcopy(record)
    saved = f"{AGENT_HOME}/{CONVERSATIONS}/{str(native.base_state['id']).replace('-', '')}/observations"
    parent = None
    for event in events:
        if isinstance((event.get("observation") or {}).get("full_output_save_dir"), str):
            event["observation"]["full_output_save_dir"] = saved  # the rerun saved into its own folder
        if is_tree(native):
            event["parent_id"] = parent
        else:
            event.pop("parent_id", None)
        parent = event["id"]
    if events and "parent_id" in events[0]:
        del events[0]["parent_id"]  # the SDK writes none on the root event
    return events


def is_tree(native: Native) -> bool:
    """Whether the recording SDK kept its events as a tree (`parent_id`, `leaf_event_id`: 1.34) rather
    than a flat list (1.26, whose events and state forbid those fields)."""
    return "leaf_event_id" in native.base_state


def _stats(stats: Any, response_ids: set[str]) -> Any:
    """Keep the metrics of the prefix's responses only."""
    stats = copy.deepcopy(stats)
    for metrics in (stats or {}).get("usage_to_metrics", {}).values():
        for key in ("response_latencies", "token_usages", "costs"):
            if isinstance(metrics.get(key), list):
                metrics[key] = [m for m in metrics[key] if m.get("response_id", "") in response_ids]
    return stats


def write(trajectory: Trajectory, after_step: int, events: list[dict[str, Any]], home: Path) -> list[Path]:
    native = trajectory.native_as(Native)
    dest = conversation_dir(home, native)
    base = copy.deepcopy(native.base_state)
    base["execution_status"] = "idle"
    if is_tree(native):
        base["leaf_event_id"] = events[-1]["id"] if events else None
        base["head_is_empty"] = not events
    base["persistence_dir"] = f"{AGENT_HOME}/{CONVERSATIONS}/{dest.name}"
    base["stats"] = _stats(base.get("stats"), {str(e.get("llm_response_id")) for e in events})
    users = [e["id"] for e in events if e["kind"] == "MessageEvent" and e.get("source") == "user"]
    base["last_user_message_id"] = users[-1] if users else None
    written = [dest / BASE_STATE]
    write_bytes_atomic(dest / BASE_STATE, orjson.dumps(base, option=_OPTS))
    for n, event in enumerate(events):
        path = dest / EVENTS / f"event-{n:05d}-{event['id']}.json"
        write_bytes_atomic(path, orjson.dumps(event, option=_OPTS))
        written.append(path)
    return written
