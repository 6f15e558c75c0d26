"""The chat `messages` openhands-sdk 1.34.0 sends for a list of events (`events_to_messages` +
`Message.to_chat_dict` with native function calling, no vision, no prompt caching for chat models).

Re-implemented here because `prepare` runs on the host without the SDK; the fidelity tests hold it
against the requests the pinned SDK really sent, at every boundary of every recording.
"""

from __future__ import annotations

from typing import Any

from replayer.floor.errors import PlanRefused

ERROR_HEADER = "[An error occurred during execution.]\n"
MAX_TERMINAL_CHARS = 30_000
"""MAX_CMD_OUTPUT_SIZE: a longer terminal text is cut in the middle (and saved to a file) by the SDK."""
MAX_TOOL_TEXT_CHARS = 50_000
"""DEFAULT_TEXT_CONTENT_LIMIT: a longer tool text block is cut in the middle by the message serializer."""


def _texts(content: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": c["text"]} for c in content if c.get("type") == "text"]


def tool_text(event: dict[str, Any]) -> str:
    """The model-visible text of one observation event (ObservationEvent.to_llm_message content, joined)."""
    kind = event["kind"]
    if kind == "AgentErrorEvent":
        return str(event.get("error", ""))
    if kind == "UserRejectObservation":
        return f"Action rejected: {event.get('rejection_reason', '')}"
    obs = event.get("observation") or {}
    head = ERROR_HEADER if obs.get("is_error") else ""
    body = "".join(c.get("text", "") for c in obs.get("content", []) if c.get("type") == "text")
    if obs.get("kind") == "TerminalObservation":
        meta = obs.get("metadata") or {}
        body = f"{meta.get('prefix', '')}{body}{meta.get('suffix', '')}"
        if meta.get("working_dir"):
            body += f"\n[Current working directory: {meta['working_dir']}]"
        if meta.get("py_interpreter_path"):
            body += f"\n[Python interpreter: {meta['py_interpreter_path']}]"
        if meta.get("exit_code", -1) != -1:
            body += f"\n[Command finished with exit code {meta['exit_code']}]"
    return head + body


def _tool_content(event: dict[str, Any]) -> list[dict[str, Any]]:
    """Content blocks of a tool message (Observation.to_llm_content: the error header is a block of its own)."""
    text = tool_text(event)
    terminal = (event.get("observation") or {}).get("kind") == "TerminalObservation"
    if len(text) > (MAX_TERMINAL_CHARS if terminal else MAX_TOOL_TEXT_CHARS):
        raise PlanRefused(
            f"the observation of {event.get('tool_call_id')} is {len(text)} characters long; the SDK cuts such "
            "texts and the replayer does not reproduce the cut yet"
        )
    if event["kind"] != "ObservationEvent":
        return [{"type": "text", "text": tool_text(event)}]
    obs = event.get("observation") or {}
    head = [{"type": "text", "text": ERROR_HEADER}] if obs.get("is_error") else []
    if obs.get("kind") == "TerminalObservation":
        return head + [{"type": "text", "text": tool_text(event)[len(ERROR_HEADER) if head else 0 :]}]
    return head + _texts(obs.get("content", []))


def _assistant(batch: list[dict[str, Any]]) -> dict[str, Any]:
    thought = [t for e in batch for t in _texts(e.get("thought") or [])]
    message: dict[str, Any] = {"role": "assistant"}
    if thought:
        message["content"] = thought
    message["tool_calls"] = [
        {
            "id": e["tool_call"]["id"],
            "type": "function",
            "function": {"name": e["tool_call"]["name"], "arguments": e["tool_call"]["arguments"]},
        }
        for e in batch
    ]
    return message


def _plain_user(message: dict[str, Any]) -> bool:
    return message.get("role") == "user" and set(message) == {"role", "content"}


def to_messages(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    i = 0
    while i < len(events):
        event = events[i]
        kind = event["kind"]
        if kind == "ActionEvent":
            j = i + 1
            while (
                j < len(events)
                and events[j]["kind"] == "ActionEvent"
                and events[j].get("llm_response_id") == event.get("llm_response_id")
            ):
                j += 1
            messages.append(_assistant(events[i:j]))
            i = j
            continue
        i += 1
        if kind == "SystemPromptEvent":
            blocks = [event["system_prompt"]] + (
                [event["dynamic_context"]] if event.get("dynamic_context") else []
            )
            msg: dict[str, Any] = {"role": "system", "content": _texts(blocks)}
        elif kind == "MessageEvent":
            llm = event["llm_message"]
            msg = {
                "role": llm["role"],
                "content": _texts(llm.get("content", []) + event.get("extended_content", [])),
            }
        elif kind in ("ObservationEvent", "AgentErrorEvent", "UserRejectObservation"):
            msg = {
                "role": "tool",
                "content": _tool_content(event),
                "tool_call_id": event["tool_call_id"],
                "name": event["tool_name"],
            }
        else:
            continue
        if messages and _plain_user(messages[-1]) and _plain_user(msg):
            messages[-1]["content"] = messages[-1]["content"] + msg["content"]
        else:
            messages.append(msg)
    return messages
