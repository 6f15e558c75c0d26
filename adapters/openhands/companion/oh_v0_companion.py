"""Runs inside the sandbox with the pinned openhands-ai 1.6.0 interpreter (Python 3.12), or another V0
version's (0.x: through v0_before_1).

serve CONFIG CWD SOCKET: start the V0 local runtime (action execution server, tmux shell, plugins) once,
then answer each request line {"actions": [serialized Action events]} with {"observations": [...]}:
every action deserialized as ReplayManager does (`event_from_dict`) and executed by the runtime exactly as
`Runtime._handle_action` executes a replayed action (default hard timeout, `run_action`, the observation
caused by the action and carrying its tool_call_metadata), serialized as `save_trajectory_path` does.

continue CONFIG CWD SPEC MAX_STEPS: run the controller over the rebuilt (cut) trajectory as `replay_trajectory_path`
(ReplayManager feeds it the recorded actions), with the runtime answering each replayed action with its
rebuilt observation instead of executing it again (the reruns already brought the workspace to the
boundary), so the history is the rebuilt prefix; when the replay queue is empty the agent asks the model
(through the bridge: LLM_BASE_URL etc. in the environment). SPEC is {"replay": path, "observations":
path of {tool_call_id: observation event}, "save": path}; MAX_STEPS model turns are allowed after the
replayed actions (each replayed action is an iteration of the controller). Prints one JSON line
{"type": "exit", "status": agent state, "error": last error}.
"""

import json
import os
import sys
import time
from datetime import datetime

import openhands.agenthub  # noqa: F401  (registers the agents)
from line_server import run_then_exit, serve_lines
from openhands.core.setup import create_agent, create_runtime, generate_sid
from openhands.events.serialization.event import event_from_dict, event_to_trajectory
from openhands.utils.async_utils import call_async_from_sync

try:
    from openhands.core.config import load_openhands_config
    from openhands.utils.utils import create_registry_and_conversation_stats

    BEFORE_1 = False
except ImportError:  # openhands-ai 0.x: its own loader and setup, and the install its local runtime assumes
    BEFORE_1 = True

SETTLE_S = 1.0
"""A pause before each shell command. V0's shell ends a command by sending Ctrl-L to its tmux pane; until
bash has redrawn its prompt, a next command sent at once can be taken as finished by that redrawn prompt
(with the previous exit code and "[Previous command outputs are truncated...]"). In the recorded run a
model call came between commands; a loaded machine loses that race without the pause."""


def _execute(runtime, config, raw):
    action = event_from_dict(raw)
    if raw.get("action") == "run":
        time.sleep(SETTLE_S)
    if action.timeout is None:
        action.set_hard_timeout(config.sandbox.timeout, blocking=False)
    observation = runtime.run_action(action)
    observation._cause = raw["id"]
    observation.tool_call_metadata = action.tool_call_metadata
    observation._source = raw.get("source", "agent")
    observation._timestamp = datetime.now().isoformat()
    return event_to_trajectory(observation)


def main(config_file, cwd, socket_path):
    config, _, runtime = _connected_runtime(config_file, cwd)
    try:
        serve_lines(
            socket_path,
            lambda request: {"observations": [_execute(runtime, config, raw) for raw in request["actions"]]},
        )
    finally:
        _close(runtime)


def _close(runtime):
    """The runtime's close gives its action execution server 5 s to end on SIGTERM, which it ignores, then 5 s
    more for its log thread: the server is killed first, as that close would after its wait (every
    observation has been answered by then)."""
    server = getattr(runtime, "server_process", None)
    if server is not None and server.poll() is None:
        server.kill()
        server.wait()
    runtime.close()


def _runtime(config_file, cwd):
    os.environ["WORKSPACE_BASE"] = cwd  # [core] workspace_base, before the config is finalized
    if BEFORE_1:
        import v0_before_1

        config = v0_before_1.load_config(config_file)
        sid = generate_sid(config)
        agent = create_agent(config)
        return config, sid, create_runtime(config, sid=sid, headless_mode=True, agent=agent)
    config = load_openhands_config(config_file=config_file)
    sid = generate_sid(config)
    llm_registry, _, config = create_registry_and_conversation_stats(config, sid, None)
    agent = create_agent(config, llm_registry)
    runtime = create_runtime(config, llm_registry, sid=sid, headless_mode=True, agent=agent)
    return config, sid, runtime


def _connected_runtime(config_file, cwd):
    """The local runtime waits a fixed 120 s for its action execution server; on a loaded machine that wait
    can expire (tenacity.RetryError) while the server is still importing. A fresh runtime gets one more try."""
    config, sid, runtime = _runtime(config_file, cwd)
    try:
        call_async_from_sync(runtime.connect)
        return config, sid, runtime
    except Exception as exc:
        print(
            f"the runtime did not start ({type(exc).__name__}); starting it once more",
            file=sys.stderr,
            flush=True,
        )
        runtime.close()
    config, sid, runtime = _runtime(config_file, cwd)
    call_async_from_sync(runtime.connect)
    return config, sid, runtime


def cont(config_file, cwd, spec_path, max_steps):
    import asyncio

    from openhands.core.main import run_controller
    from openhands.events.action import NullAction

    with open(spec_path) as fh:
        spec = json.load(fh)
    with open(spec["observations"]) as fh:
        rebuilt = json.load(fh)
    os.environ["REPLAY_TRAJECTORY_PATH"] = spec["replay"]
    os.environ["SAVE_TRAJECTORY_PATH"] = spec["save"]
    with open(spec["replay"]) as fh:
        replayed = sum(1 for e in json.load(fh) if e.get("source") == "agent" and "action" in e)
    os.environ["MAX_ITERATIONS"] = str(replayed + int(max_steps))
    config, sid, runtime = _connected_runtime(config_file, cwd)
    execute = runtime.run_action

    def run_action(action):
        tcm = getattr(action, "tool_call_metadata", None)
        recorded = rebuilt.get(tcm.tool_call_id) if tcm is not None else None
        if recorded is None:
            return execute(action)
        return event_from_dict({k: v for k, v in recorded.items() if k not in ("id", "cause")})

    runtime.run_action = run_action
    state = None
    try:
        state = asyncio.run(
            run_controller(
                config=config,
                initial_user_action=NullAction(),
                sid=sid,
                runtime=runtime,
                exit_on_message=True,
            )
        )
    finally:
        status = state.agent_state.value if state is not None else "error"
        error = state.last_error if state is not None else "no final state"
        print(json.dumps({"type": "exit", "status": status, "error": error}), flush=True)
        _close(runtime)


if __name__ == "__main__":
    if BEFORE_1:
        import v0_before_1

        v0_before_1.prepare_local_runtime()
    if sys.argv[1] == "continue":
        run_then_exit(cont, *sys.argv[2:6])
    else:
        run_then_exit(main, *sys.argv[2:5])
