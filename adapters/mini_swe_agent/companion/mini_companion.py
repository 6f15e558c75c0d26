"""Runs inside the sandbox with the interpreter of the mini-swe-agent version that runs: reruns and continuation.

`serve SPEC SOCKET`: build the trajectory's own agent, model and environment classes from its
recorded config, then for every request line on the unix socket execute one assistant message's
actions with `agent.execute_actions` and answer with the observation messages mini-swe-agent made
(a submission adds its exit message). `continue SPEC`: restore the rebuilt messages, `n_calls` and
`cost`, and run the agent loop of `DefaultAgent.run` without its reset; events go to stdout as JSON lines.
With a 1.x release installed, both go through 1.x's own API instead (mini1.py, beside this file).
This file imports nothing of the replayer: it speaks only JSON.
"""

import argparse
import importlib
import inspect
import json
import os
import socket
import sys
import traceback


def load_class(dotted):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def config_fields(cls):
    """The options a class's config takes (its `config_class`: a dataclass in 1.x, a pydantic model in 2.x);
    None when its constructor names no config class (2.x's text-based model passes its own to its parent)."""
    import dataclasses

    parameter = inspect.signature(cls.__init__).parameters.get("config_class")
    config_class = parameter.default if parameter is not None else None
    if dataclasses.is_dataclass(config_class):
        return {f.name for f in dataclasses.fields(config_class)}
    fields = getattr(config_class, "model_fields", None)
    return set(fields) if fields is not None else None


def only_known(cls, options, what):
    """`options` without those `cls`'s config does not take (a fork's own options), each named on stderr."""
    known = config_fields(cls)
    if known is None:
        return options
    for name in sorted(set(options) - known):
        print(f"[companion] {what} option {name} left out: {cls.__name__} does not take it", file=sys.stderr)
    return {k: v for k, v in options.items() if k in known}


def is_1x():
    import minisweagent

    return minisweagent.__version__.startswith("1.")


def build(spec, model_overrides=None):
    import minisweagent

    if minisweagent.__version__ != spec["version"]:
        raise SystemExit(
            f"mini-swe-agent {minisweagent.__version__} is installed, {spec['version']} is pinned"
        )
    cfg = spec["config"]
    # Options the installed classes do not take are left out, each named: a fork's subclass's own (the
    # built-in class it extends runs, waived), another client class's (1.x), or those of a release other
    # than the one that wrote the file (a stated version: 1.15.0 has no `action_regex`).
    env_class = load_class(cfg["environment_type"])
    env = env_class(**only_known(env_class, cfg["environment"], "environment"))
    model_class = load_class(cfg["model_type"])
    model = model_class(**only_known(model_class, {**cfg["model"], **(model_overrides or {})}, "model"))
    agent_class = load_class(cfg["agent_type"])
    return agent_class(model, env, **only_known(agent_class, cfg["agent"], "agent"))


def execute(agent, request):
    if is_1x():
        import mini1

        return mini1.execute(agent, request)
    from minisweagent.exceptions import InterruptAgentFlow

    agent.messages = []
    agent.n_calls = request["n_calls"]
    agent.cost = request["cost"]
    try:
        agent.execute_actions(request["message"])
    except InterruptAgentFlow as e:  # a replayed submission: mini adds its exit message
        agent.add_messages(*e.messages)
    return {"messages": agent.messages}


def serve(spec, path):
    agent = build(spec)
    if os.path.exists(path):
        os.unlink(path)  # left by an earlier companion of this run
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    conn, _ = server.accept()
    stream = conn.makefile("rwb")
    for line in stream:
        try:
            answer = execute(agent, json.loads(line))
        except Exception as e:
            answer = {"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()}
        stream.write(json.dumps(answer).encode() + b"\n")
        stream.flush()


EVENTS = sys.stdout
"""The event stream; everything else printed (the interactive agent's console) goes to stderr."""


def emit(event):
    EVENTS.write(json.dumps(event) + "\n")
    EVENTS.flush()


def format_error(agent, e):
    """2.4.6: charge the failed call and exit after `max_consecutive_format_errors` in a row."""
    agent.cost += e.messages[0].get("extra", {}).get("cost", 0.0)
    agent.n_consecutive_format_errors += 1
    limit = agent.config.max_consecutive_format_errors
    if 0 < limit <= agent.n_consecutive_format_errors:
        exit_message = {
            "role": "exit",
            "content": "RepeatedFormatError",
            "extra": {"exit_status": "RepeatedFormatError", "submission": ""},
        }
        agent.add_messages(*e.messages, exit_message)
    else:
        agent.add_messages(*e.messages)


def run_loop(agent):
    """The loop of DefaultAgent.run without the reset and the two template renders, as the installed
    version has it: 2.4.6 counts consecutive FormatErrors (`max_consecutive_format_errors`) and charges
    their cost; earlier 2.x (2.2.7) handle a FormatError as any InterruptAgentFlow."""
    from minisweagent.exceptions import FormatError, InterruptAgentFlow

    counts_format_errors = hasattr(agent.config, "max_consecutive_format_errors")
    emitted = len(agent.messages)
    while True:
        try:
            agent.step()
            agent.n_consecutive_format_errors = 0
        except FormatError as e:
            if counts_format_errors:
                format_error(agent, e)
            else:
                agent.add_messages(*e.messages)
        except InterruptAgentFlow as e:
            agent.add_messages(*e.messages)
        except Exception as e:
            agent.handle_uncaught_exception(e)
            raise
        finally:
            agent.save(agent.config.output_path)
            for message in agent.messages[emitted:]:
                emit({"type": "message", "role": message.get("role"), "n_calls": agent.n_calls})
            emitted = len(agent.messages)
        if agent.messages[-1].get("role") == "exit":
            return agent.messages[-1].get("extra", {})


def continue_(spec, args):
    kwargs = {
        **(spec["config"]["model"].get("model_kwargs") or {}),
        "api_base": args.api_base,
        "api_key": args.key,
    }
    agent = build(spec, {"model_name": args.model, "model_kwargs": kwargs})
    if is_1x():
        import mini1

        return mini1.continue_(agent, spec, args, emit)
    with open(spec["trajectory"]) as fh:
        data = json.load(fh)
    stats = data["info"]["model_stats"]
    agent.messages = data["messages"]
    agent.n_calls = stats["api_calls"]
    agent.cost = stats["instance_cost"]
    if args.max_steps is not None:
        agent.config.step_limit = agent.n_calls + args.max_steps  # mini counts every call of the run
    if args.prompt is not None:
        agent.add_messages(agent.model.format_message(role="user", content=args.prompt))
    emit({"type": "started", "messages": len(agent.messages), "n_calls": agent.n_calls})
    try:
        result = run_loop(agent)
    except Exception as e:
        emit({"type": "exit", "exit_status": type(e).__name__, "error": str(e), "n_calls": agent.n_calls})
        raise SystemExit(1) from None
    emit({"type": "exit", "exit_status": result.get("exit_status", ""), "n_calls": agent.n_calls})


def main():
    parser = argparse.ArgumentParser()
    modes = parser.add_subparsers(dest="mode", required=True)
    serve_args = modes.add_parser("serve")
    serve_args.add_argument("spec")
    serve_args.add_argument("socket")
    cont = modes.add_parser("continue")
    cont.add_argument("spec")
    cont.add_argument("--model", required=True)
    cont.add_argument("--api-base", required=True)
    cont.add_argument("--key", required=True)
    cont.add_argument("--max-steps", type=int)
    cont.add_argument("--prompt")
    args = parser.parse_args()
    with open(args.spec) as fh:
        spec = json.load(fh)
    sys.stdout = sys.stderr
    if args.mode == "serve":
        serve(spec, args.socket)
    else:
        continue_(spec, args)


if __name__ == "__main__":
    try:
        main()
    except Exception:  # its cause on stderr: the exit below would drop the traceback
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    # Everything is written by now; the interpreter's own exit (litellm's handlers, freeing its module
    # graph) takes seconds more and is skipped.
    os._exit(0)
