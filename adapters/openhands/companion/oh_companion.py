"""Runs inside the sandbox with the pinned openhands-sdk's interpreter (Python 3.12).

serve SPEC SOCKET: rerun historical action batches with the SDK's own tools, no LLM call. SPEC is
  {"base_state": path, "task": first user text, "cwd": ..., "persistence_dir": ...}. Each request line
  {"actions": [ActionEvent dicts]} is answered with {"observations": [{"event": dict, "chat": message}]}
  (the fresh observation events and the chat message the SDK renders of each); {"shell": true or PATH}
  with {"shell": what the reruns changed in the terminal's shell (shell_state.changes), or null without
  a terminal}, also written to PATH when given.
continue SPEC: resume the rebuilt conversation with its LLM pointed at the bridge and run it, its terminal
  given the prefix's shell state first (SPEC's "shell" file, when the reruns wrote one).
  SPEC is {"persistence_dir", "conversation_id", "cwd", "shell"}; options --model --base-url --key
  --max-steps [--prompt]. Prints one JSON line {"type": "exit", "status": ...} at the end.
"""

import argparse
import json
import os
import sys
import uuid

import shell_state
from line_server import run_then_exit, serve_lines
from openhands.sdk import Agent, Conversation
from openhands.sdk.conversation.state import ConversationState
from openhands.sdk.event import ActionEvent, LLMConvertibleEvent
from openhands.tools.preset.default import register_default_tools
from openhands.tools.terminal import TerminalAction
from pydantic import SecretStr


def _agent(base_state_path, llm_update=None):
    with open(base_state_path) as fh:
        spec = json.load(fh)["agent"]
    agent = Agent.model_validate(spec)
    if llm_update:
        agent = agent.model_copy(update={"llm": agent.llm.model_copy(update=llm_update)})
    return agent


def _chat(event):
    message = event.to_llm_message()
    return message.to_chat_dict(
        cache_enabled=False,
        vision_enabled=False,
        function_calling_enabled=True,
        force_string_serializer=False,
        send_reasoning_content=False,
    )


def serve(spec_path, socket_path):
    with open(spec_path) as fh:
        spec = json.load(fh)
    register_default_tools(enable_browser=False)
    conversation = Conversation(
        agent=_agent(spec["base_state"]),
        workspace=spec["cwd"],
        persistence_dir=spec["persistence_dir"],
        conversation_id=uuid.uuid4(),
        visualizer=None,
        delete_on_close=False,
        stuck_detection=False,
    )
    conversation.send_message(spec["task"])
    query = os.path.join(os.path.dirname(socket_path), "shell-query")
    start = shell_state.query(_terminal(conversation), query)

    def handle(request):
        if request.get("shell"):
            now = None if start is None else shell_state.query(_terminal(conversation), query)
            state = None if now is None else shell_state.changes(start, now)
            shell_state.keep(request["shell"], state)
            return {"shell": state}
        return {"observations": _rerun(conversation, request["actions"])}

    try:
        serve_lines(socket_path, handle)
    finally:
        conversation.close()


def _terminal(conversation):
    """What runs a command with the agent's terminal tool, as the SDK runs an action (`tool(action,
    conversation)`; the observation is no event of the conversation), for shell_state; False from it when
    the agent has no terminal."""

    def run(command):
        tool = conversation.agent.tools_map.get("terminal")
        if tool is None:
            return False
        tool(TerminalAction(command=command), conversation)
        return True

    return run


def _rerun(conversation, actions):
    state = conversation.state
    # SDKs with an event tree (parent_id, active_branch; 1.34) chain the injected event to the leaf
    # themselves; earlier ones (1.26) keep a flat list and forbid the field.
    tree = "parent_id" in ActionEvent.model_fields
    with state:
        before = len(state.events)
        for raw in actions:
            record = (
                {**raw, "parent_id": None} if tree else {k: v for k, v in raw.items() if k != "parent_id"}
            )
            conversation._on_event(ActionEvent.model_validate(record))
        branch = state.active_branch() if tree else state.events
        if not ConversationState.get_unmatched_actions(branch):
            raise RuntimeError("the injected actions are not pending")
        conversation.agent.step(conversation, on_event=conversation._on_event)
        fresh = list(state.events)[before + len(actions) :]
    out = []
    for event in fresh:
        if isinstance(event, LLMConvertibleEvent) and not isinstance(event, ActionEvent):
            out.append({"event": event.model_dump(mode="json"), "chat": _chat(event)})
    return out


def cont(spec_path, args):
    with open(spec_path) as fh:
        spec = json.load(fh)
    register_default_tools(enable_browser=False)
    update = {"model": args.model, "base_url": args.base_url, "api_key": SecretStr(args.key)}
    agent = _agent(f"{spec['persistence_dir']}/base_state.json", update)
    conversation = Conversation(
        agent=agent,
        workspace=spec["cwd"],
        persistence_dir=spec["persistence_parent"],
        conversation_id=uuid.UUID(spec["conversation_id"]),
        visualizer=None,
        delete_on_close=False,
        max_iteration_per_run=args.max_steps or 500,
    )
    if args.prompt is not None:
        conversation.send_message(args.prompt)
    status = "error"
    try:
        if spec.get("shell") and os.path.isfile(spec["shell"]):
            conversation._ensure_agent_ready()  # what send_message and run do first: the tools exist
            shell_state.restore(spec["shell"], _terminal(conversation))
        conversation.run()
        status = conversation.state.execution_status.value
        errors = [e for e in conversation.state.events if type(e).__name__ == "ConversationErrorEvent"]
        if status == "error" and errors and getattr(errors[-1], "code", "") == "MaxIterationsReached":
            status = "max_iterations"
    finally:
        print(json.dumps({"type": "exit", "status": status}), flush=True)
        conversation.close()


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["serve", "continue"])
    parser.add_argument("spec")
    parser.add_argument("socket", nargs="?")
    parser.add_argument("--model")
    parser.add_argument("--base-url")
    parser.add_argument("--key")
    parser.add_argument("--max-steps", type=int)
    parser.add_argument("--prompt")
    args = parser.parse_args(argv)
    if args.mode == "serve":
        serve(args.spec, args.socket)
    else:
        cont(args.spec, args)


if __name__ == "__main__":
    run_then_exit(main, sys.argv[1:])
