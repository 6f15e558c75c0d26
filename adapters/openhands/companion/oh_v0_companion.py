"""Runs inside the sandbox with the pinned openhands-ai 1.6.0 interpreter (Python 3.12), or another V0
version's (0.x: through v0_before_1).

serve CONFIG CWD SOCKET: start the V0 local runtime (action execution server, tmux shell, plugins) once,
then answer each request line {"actions": [serialized Action events]} with {"observations": [...]}:
every action deserialized as ReplayManager does (`event_from_dict`) and executed by the runtime exactly as
`Runtime._handle_action` executes a replayed action (default hard timeout, `run_action`, the observation
caused by the action and carrying its tool_call_metadata), serialized as `save_trajectory_path` does.
{"shell": true or PATH} is answered {"shell": what the reruns changed in the runtime's shell
(shell_state.changes)}, also written to PATH when given. {"request": {"messages": PATH, "env": {...}}} is
answered {"request": what `request` prints}, told with ENV over the companion's environment as a `request`
process started with it would tell it (one interpreter start less per continuation).

continue CONFIG CWD SPEC MAX_STEPS [PROMPT]: run the controller over the rebuilt (cut) trajectory as `replay_trajectory_path`
(ReplayManager feeds it the recorded actions), with the runtime answering each replayed action with its
rebuilt observation instead of executing it again (the reruns already brought the workspace to the
boundary), so the history is the rebuilt prefix; when the replay queue is empty the agent asks the model
(through the bridge: LLM_BASE_URL etc. in the environment). The runtime's fresh shell is first given the
prefix's shell state (SPEC's "shell" file, when the reruns wrote one). SPEC is {"replay": path,
"observations": path of {tool_call_id: observation event}, "save": path, "shell": path}; MAX_STEPS model
turns are allowed after the replayed actions (each replayed action is an iteration of the controller). A
PROMPT (the boundary prompt) is a user message appended to the replayed list, as V0 serializes one:
ReplayManager replays it last, as any user message of a recorded session, and the agent answers it. Prints one JSON line
{"type": "exit", "status": agent state, "error": last error}.

request CONFIG CWD MESSAGES: the agent's first request over the native-form MESSAGES (the rebuilt prefix as
ConversationMemory renders it with function calling), as this version's LLM would send it to the model
service: the agent and its LLM made from the continuation's config, the messages formatted
(`format_messages_for_llm`) and passed to `LLM.completion` with the agent's tools as CodeActAgent.step
does, the call stopped right before the service would be asked. Prints one JSON
line {"type": "request", "model", "function_calling": LLM.is_function_calling_active(), "messages": what
would be sent (with function calling off: converted to the text form by the version's own
fn_call_converter), "error": why the version cannot convert them, or null}.

REPLAYER_NATIVE_TOOL_CALLING (true, false, or unset: none given) replaces the config file's
`[llm] native_tool_calling` in both modes that make an agent (the recording's own setting).
"""

import json
import os
import sys
from datetime import datetime

import deferred_iri  # noqa: F401  (first: rfc3987_syntax imported where first used)
import openhands.agenthub  # noqa: F401  (registers the agents)
import shell_state
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

HERE = os.path.dirname(os.path.abspath(__file__))


def _serve_settled():
    """The local runtime starts its action execution server through v0_server.py: V0's shell takes each
    command as the recorded run's did however loaded the machine (v0_settled_shell), and 0.x starts no
    browser."""
    from openhands.runtime.impl.local import local_runtime

    startup_command = local_runtime.get_action_execution_server_startup_command

    def through_v0_server(*args, **kwargs):
        cmd = startup_command(*args, **kwargs)
        at = cmd.index("-m")
        return [*cmd[:at], f"{HERE}/v0_server.py", *cmd[at + 2 :]]

    local_runtime.get_action_execution_server_startup_command = through_v0_server
    _patient_wait(local_runtime.LocalRuntime)


SERVER_WAIT_S = 480
"""How long the runtime waits for its action execution server, within the replayer's 600 s for the companion."""


def _patient_wait(runtime_class):
    """The local runtime asks its action execution server whether it is up every 2 s for 120 s (0.x: after
    1 s, 2 s, 4 s, then every 10 s, ten times), and gives up while a loaded machine is still importing it,
    when the companion starts a whole runtime again (`_connected_runtime`): asked every 0.2 s, for
    SERVER_WAIT_S, and not again once the server has died."""
    import tenacity
    from openhands.utils.tenacity_stop import stop_if_should_exit

    runtime_class._wait_until_alive = runtime_class._wait_until_alive.retry_with(
        wait=tenacity.wait_fixed(0.2),
        stop=tenacity.stop_after_delay(SERVER_WAIT_S) | stop_if_should_exit(),
        retry=tenacity.retry_if_not_exception_type(RuntimeError),  # 'Server process died'
    )


def _execute(runtime, config, raw):
    action = event_from_dict(raw)
    if action.timeout is None:
        action.set_hard_timeout(config.sandbox.timeout, blocking=False)
    observation = runtime.run_action(action)
    observation._cause = raw["id"]
    observation.tool_call_metadata = action.tool_call_metadata
    observation._source = raw.get("source", "agent")
    observation._timestamp = datetime.now().isoformat()
    return event_to_trajectory(observation)


def _shell(runtime, config):
    """What runs a command in the runtime's shell as an action is run (its observation is no event), for
    shell_state."""
    from openhands.events.action import CmdRunAction

    def run(command):
        action = CmdRunAction(command=command)
        action.set_hard_timeout(config.sandbox.timeout, blocking=False)
        runtime.run_action(action)

    return run


def main(config_file, cwd, socket_path):
    config, _, runtime = _connected_runtime(config_file, cwd)
    query = os.path.join(os.path.dirname(socket_path), "shell-query")
    try:
        start = shell_state.query(_shell(runtime, config), query)

        def handle(request):
            if "request" in request:
                return {"request": _told(config_file, cwd, request["request"])}
            if request.get("shell"):
                state = shell_state.changes(start, shell_state.query(_shell(runtime, config), query))
                shell_state.keep(request["shell"], state)
                return {"shell": state}
            return {"observations": [_execute(runtime, config, raw) for raw in request["actions"]]}

        serve_lines(socket_path, handle)
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


NATIVE_TOOL_CALLING = {"true": True, "false": False, "unset": None}


def _agent(config_file, cwd):
    """The continuation's config (the file, the environment, the recording's native_tool_calling) and
    the agent made from it, as each version's setup makes them."""
    os.environ["WORKSPACE_BASE"] = cwd  # [core] workspace_base, before the config is finalized
    if BEFORE_1:
        import v0_before_1

        config = v0_before_1.load_config(config_file)
    else:
        config = load_openhands_config(config_file=config_file)
    setting = os.environ.get("REPLAYER_NATIVE_TOOL_CALLING")
    if setting is not None:
        config.get_llm_config().native_tool_calling = NATIVE_TOOL_CALLING[setting]
    sid = generate_sid(config)
    if BEFORE_1:
        return config, sid, None, create_agent(config)
    llm_registry, _, config = create_registry_and_conversation_stats(config, sid, None)
    return config, sid, llm_registry, create_agent(config, llm_registry)


def _without_jupyter_unless_used(config, agent):
    """CodeActAgent asks every runtime for a Jupyter kernel (its class's `sandbox_plugins`) whether or not
    the agent has the IPython tool. With `[agent] enable_jupyter` off (the replayed configuration) no action
    ever reaches the kernel: the runtime starts without it, which is about half of the CPU a runtime start
    costs (the kernel gateway, its kernel, AgentSkills imported into it). Bash, the editor and their
    observations do not go through it."""
    from openhands.runtime.plugins import JupyterRequirement

    if getattr(config.get_agent_config(config.default_agent), "enable_jupyter", True):
        return
    agent_class = type(agent)
    agent_class.sandbox_plugins = [
        p for p in agent_class.sandbox_plugins if not isinstance(p, JupyterRequirement)
    ]


def _runtime(config_file, cwd):
    config, sid, llm_registry, agent = _agent(config_file, cwd)
    _without_jupyter_unless_used(config, agent)
    if BEFORE_1:
        return config, sid, create_runtime(config, sid=sid, headless_mode=True, agent=agent)
    runtime = create_runtime(config, llm_registry, sid=sid, headless_mode=True, agent=agent)
    return config, sid, runtime


class _Captured(Exception):
    """Raised in place of the model service call, carrying what would have been sent."""


def request(config_file, cwd, messages_path):
    print(json.dumps(first_request(config_file, cwd, messages_path), default=str), flush=True)


def _told(config_file, cwd, ask):
    """`first_request` with ask["env"] over this process's environment while it is told (the reruns'
    companion: the continuation's model and tool calling setting, as a `request` process gets them)."""
    saved = {name: os.environ.get(name) for name in ask["env"]}
    os.environ.update(ask["env"])
    try:
        return first_request(config_file, cwd, ask["messages"])
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def first_request(config_file, cwd, messages_path):
    from openhands.core.message import Message

    _, _, _, agent = _agent(config_file, cwd)
    llm = agent.llm
    with open(messages_path) as fh:
        native = [Message.model_validate(m) for m in json.load(fh)]
    tools = agent.tools
    try:  # 1.x adapts the tools to the model as CodeActAgent.step does; 0.x sends them as they are
        from openhands.llm.llm_utils import check_tools

        tools = check_tools(tools, llm.config)
    except ImportError:
        pass

    def capture(*args, **kwargs):
        raise _Captured(kwargs["messages"])

    llm._completion_unwrapped = capture
    answer = {
        "type": "request",
        "model": llm.config.model,
        "function_calling": llm.is_function_calling_active(),
    }
    try:
        llm.completion(messages=llm.format_messages_for_llm(native), tools=tools)
    except _Captured as sent:
        answer.update(messages=sent.args[0], error=None)
    except Exception as exc:  # the version's own converter refusing the prefix (FunctionCallConversionError)
        answer.update(messages=None, error=f"{type(exc).__name__}: {str(exc).splitlines()[0]}")
    return answer


def _connected_runtime(config_file, cwd):
    """The local runtime waits SERVER_WAIT_S for its action execution server (`_patient_wait`); should that
    wait expire (tenacity.RetryError) while the server is still importing, a fresh runtime gets one more try."""
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


def _with_prompt(replay_path, prompt):
    """The replayed list with the boundary prompt appended as a user message event (V0's serialization)."""
    from openhands.events.action import MessageAction
    from openhands.events.event import EventSource
    from openhands.events.serialization.event import event_to_dict

    with open(replay_path) as fh:
        events = json.load(fh)
    message = MessageAction(content=prompt)
    message._source = EventSource.USER
    events.append(event_to_dict(message))
    path = f"{replay_path}.prompted.json"
    with open(path, "w") as fh:
        json.dump(events, fh)
    return path


def cont(config_file, cwd, spec_path, max_steps, prompt=None):
    import asyncio

    from openhands.core.main import run_controller
    from openhands.events.action import NullAction

    with open(spec_path) as fh:
        spec = json.load(fh)
    with open(spec["observations"]) as fh:
        rebuilt = json.load(fh)
    replay = spec["replay"] if prompt is None else _with_prompt(spec["replay"], prompt)
    os.environ["REPLAY_TRAJECTORY_PATH"] = replay
    os.environ["SAVE_TRAJECTORY_PATH"] = spec["save"]
    with open(replay) as fh:  # the task is the initial action; every later one is a replayed iteration
        replayed = sum(1 for e in json.load(fh)[1:] if e.get("source") in ("agent", "user") and "action" in e)
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
        shell_state.restore(spec.get("shell"), _shell(runtime, config))  # not a replayed action
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
    _serve_settled()
    if sys.argv[1] == "continue":
        run_then_exit(cont, *sys.argv[2:7])
    elif sys.argv[1] == "request":
        run_then_exit(request, *sys.argv[2:5])
    else:
        run_then_exit(main, *sys.argv[2:5])
