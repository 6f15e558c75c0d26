"""mini-swe-agent 1.x inside the sandbox, by its own API (imported by mini_companion.py when 1.x is installed).

1.x parses actions and renders observations in the agent (`DefaultAgent.get_observation`), keeps its call
count and cost on the model (`model.n_calls`, `model.cost`), turns every exception into a `user` message
(`DefaultAgent.run`), and saves with `minisweagent.run.utils.save.save_traj`. This file imports nothing of
the replayer: it speaks only JSON.
"""

import inspect


def execute(agent, request):
    """One historical assistant message's action, as `DefaultAgent.run` handles a step after the query."""
    from minisweagent.agents.default import NonTerminatingException, TerminatingException

    agent.messages = []
    agent.model.n_calls = request["n_calls"]
    agent.model.cost = request["cost"]
    exit_status = None
    try:
        agent.get_observation(request["message"])
    except NonTerminatingException as e:  # an execution timeout: 1.x's timeout_template
        agent.add_message("user", str(e))
    except TerminatingException as e:  # a replayed submission: the submission as a user message
        agent.add_message("user", str(e))
        exit_status = type(e).__name__
    return {"messages": agent.messages, "exit_status": exit_status}


def _limits_reached(agent):
    """`DefaultAgent.query`'s own check, made before the step: the interactive agent would ask for new
    limits on the terminal (`input()`), which an unattended run does not have; it ends as DefaultAgent does."""
    config, model = agent.config, agent.model
    return 0 < config.step_limit <= model.n_calls or 0 < config.cost_limit <= model.cost


def _save(agent, path, exit_status, result, extra):
    from minisweagent.run.utils.save import save_traj

    accepted = inspect.signature(save_traj).parameters
    kwargs = {"print_path": False} if "print_path" in accepted else {}
    save_traj(agent, path, exit_status=exit_status, result=result, **kwargs, **extra)


def run_loop(agent, path, extra, emit):
    """The loop of `DefaultAgent.run` without its reset and its two template renders; saved after every
    step, as the batch runner saves at the end."""
    from pathlib import Path

    from minisweagent.agents.default import LimitsExceeded, NonTerminatingException, TerminatingException

    emitted = len(agent.messages)
    exit_status, result = "", ""
    while not exit_status:
        try:
            if _limits_reached(agent):
                raise LimitsExceeded()
            agent.step()
        except NonTerminatingException as e:
            agent.add_message("user", str(e))
        except TerminatingException as e:
            agent.add_message("user", str(e))
            exit_status, result = type(e).__name__, str(e)
        finally:
            _save(agent, Path(path), exit_status or None, result or None, extra)
            for message in agent.messages[emitted:]:
                emit({"type": "message", "role": message.get("role"), "n_calls": agent.model.n_calls})
            emitted = len(agent.messages)
    return exit_status


def continue_(agent, spec, args, emit):
    import json

    with open(spec["trajectory"]) as fh:
        data = json.load(fh)
    stats = data["info"]["model_stats"]
    agent.messages = data["messages"]
    agent.model.n_calls = stats["api_calls"]
    agent.model.cost = stats["instance_cost"]
    if args.max_steps is not None:
        agent.config.step_limit = agent.model.n_calls + args.max_steps  # 1.x counts every call of the run
    if args.prompt is not None:
        agent.add_message("user", args.prompt)
    extra = {"instance_id": data["instance_id"]} if "instance_id" in data else {}
    emit({"type": "started", "messages": len(agent.messages), "n_calls": agent.model.n_calls})
    try:
        exit_status = run_loop(agent, spec["output_path"], extra, emit)
    except Exception as e:
        emit(
            {"type": "exit", "exit_status": type(e).__name__, "error": str(e), "n_calls": agent.model.n_calls}
        )
        raise SystemExit(1) from None
    emit({"type": "exit", "exit_status": exit_status, "n_calls": agent.model.n_calls})
