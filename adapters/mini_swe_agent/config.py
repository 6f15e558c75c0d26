"""The recorded config, turned into what the companion builds: the trajectory's own classes and templates.

Only classes whose semantics the package that runs reproduces inside the sandbox are accepted: the
local and the docker environment (the sandbox is the container), the litellm chat models, the
default and the interactive agent, and the SWE-bench runner's progress-tracking agent (run as the
default agent). A fork's own environment class that extends the local or the docker one runs as the
class it extends when the user waives it (`substitution`); anything else is refused with its name.
A 1.x file run by its own 1.x release keeps its config as recorded (1.x parsed and rendered in the
agent); run by 2.x, its templates move to 2.x's text-based model.
"""

from __future__ import annotations

import copy
import weakref
from typing import Any

from replayer.adapters.mini_swe_agent import bundle
from replayer.adapters.mini_swe_agent.session import Native, recorded_config
from replayer.floor.errors import PlanRefused
from replayer.floor.pins import release

LOCAL_ENV = "minisweagent.environments.local.LocalEnvironment"
DOCKER_ENV = "minisweagent.environments.docker.DockerEnvironment"
ENVIRONMENTS = {LOCAL_ENV, DOCKER_ENV}
TEXTBASED = "minisweagent.models.litellm_textbased_model.LitellmTextbasedModel"
TOOLCALL = "minisweagent.models.litellm_model.LitellmModel"
MODELS = {TOOLCALL, TEXTBASED}
DEFAULT_AGENT = "minisweagent.agents.default.DefaultAgent"
INTERACTIVE = "minisweagent.agents.interactive.InteractiveAgent"
PROGRESS_TRACKING = {
    "minisweagent.run.extra.swebench.ProgressTrackingAgent",  # 1.1.1 - 1.17.5
    "minisweagent.run.benchmarks.swebench.ProgressTrackingAgent",  # 2.0.0 - 2.2.8
    "minisweagent.run.benchmarks.utils.common.ProgressTrackingAgent",  # 2.3.0 -
}
"""The batch runners' agent (`mini-extra swebench`): DefaultAgent whose `step` first posts a progress line
to a `RunBatchProgressManager` (not recorded); actions, observations and the saved file are DefaultAgent's."""
AGENTS = {DEFAULT_AGENT, INTERACTIVE, *PROGRESS_TRACKING}
REFUSED_AGENTS = {
    "minisweagent.run.benchmarks.programbench.ProgramBenchAgent": (  # 2.3.0 -
        "recorded agent_type ProgramBenchAgent is not rerun "
        "(it saves messages without extra.raw_output, which DefaultAgent keeps)"
    ),
}
"""Subclasses in the package that change more than the progress display, each with why it is not rerun."""
CHAT_PROVIDERS = ("openai/", "hosted_vllm/", "deepseek/")
"""litellm routes these prefixes to the chat-completions protocol at `api_base` (the bridge). deepseek/
(`DeepSeekChatConfig`, an OpenAI chat config) posts to `<api_base>/chat/completions` and collapses list
contents to strings (mini's messages are strings; a list would differ at the gate, which refuses); it
prices the recorded model, which openai/ would not (mini stops on a model it cannot price)."""


DOCKER_OPTIONS = {"image", "executable", "run_args", "container_timeout", "pull_timeout"}
"""DockerEnvironment's own options (1.x and 2.x): a section holding them was written by a subclass of it."""


def recorded(native: Native) -> dict[str, Any]:
    return recorded_config(native.data)


def runs_1x() -> bool:
    """mini-swe-agent 1.x is the version that runs (the pins, inside `running_version`)."""
    return release(bundle.version()) < (2,)


def own_1x(native: Native) -> bool:
    """A 1.x file run by a 1.x release: its config as recorded, its own API."""
    return native.format == "mini-swe-agent-1" and runs_1x()


def extended_environment(config: dict[str, Any]) -> str | None:
    """The built-in environment a fork's own environment class extends, judged by its name and the options
    it recorded: a `...Docker...` class with an image and docker's options, or a `...Local...` class without
    an image. None for the package's own classes (supported or refused by name) and anything else."""
    named, section = config.get("environment_type"), config.get("environment")
    if not isinstance(named, str) or not isinstance(section, dict):
        return None
    if named in ENVIRONMENTS or named.startswith("minisweagent.environments."):
        return None
    leaf = named.rpartition(".")[2]
    if "Docker" in leaf and "image" in section and DOCKER_OPTIONS & (section.keys() - {"image"}):
        return DOCKER_ENV
    if "Local" in leaf and "image" not in section:
        return LOCAL_ENV
    return None


def substitution(native: Native) -> str | None:
    """Why the run needs --allow-degraded: the recorded environment class is a fork's own, and the built-in
    class it extends runs in its place (its own options left out); None when the file names the package's."""
    config = recorded(native)
    builtin = extended_environment(config)
    if builtin is None:
        return None
    return (
        f"recorded environment_type {config['environment_type']} is not mini-swe-agent's own class; "
        f"the built-in {builtin.rpartition('.')[2]} it extends runs in its place"
    )


_LAST: list[tuple[weakref.ref[Native], str | None]] = []
"""The last parse asked about and its answer: the plan asks once per call (thousands in a long trajectory)."""


def rerun_refusal(native: Native) -> str | None:
    """Why this trajectory's actions cannot be rerun with their own semantics, or None."""
    if _LAST and _LAST[0][0]() is native:
        return _LAST[0][1]
    reason = _rerun_refusal(native)
    _LAST[:] = [(weakref.ref(native), reason)]
    return reason


def _rerun_refusal(native: Native) -> str | None:
    if native.format == "bare-list":
        return "a bare message list records no config (no observation template to render with)"
    config = recorded(native)
    if config.get("agent_type") in REFUSED_AGENTS:
        return REFUSED_AGENTS[config["agent_type"]]
    for key, allowed in (("environment_type", ENVIRONMENTS), ("model_type", MODELS), ("agent_type", AGENTS)):
        if key == "environment_type" and extended_environment(config):
            continue  # a fork's subclass: `substitution` says what runs instead
        if key == "model_type" and native.format == "mini-swe-agent-1":
            continue  # 1.x parsed actions and rendered observations in the agent: any model class reruns
        value = config.get(key)
        if value not in allowed:
            return f"recorded {key} {value!r} is not supported (supported: {', '.join(sorted(allowed))})"
        section = config.get(key.removesuffix("_type"))
        if not isinstance(section, dict):
            return f"the recorded config has no {key.removesuffix('_type')} section"
    env = config["environment"]
    docker = (extended_environment(config) or config["environment_type"]) == DOCKER_ENV
    if docker and env.get("forward_env"):
        return f"forward_env {env['forward_env']} took values from the original host, which were not recorded"
    if config["model"].get("set_cache_control"):
        return "set_cache_control rewrites the wire messages (an Anthropic route, not chat completions)"
    return None


def companion_spec(native: Native, *, output_path: str | None) -> dict[str, Any]:
    """What the companion builds and runs: the version, the config, the classes standing in for others."""
    spec: dict[str, Any] = {
        "version": bundle.version(),
        "config": companion_config(native, output_path=output_path),
    }
    if extended_environment(recorded(native)):
        spec["substituted_environment"] = recorded(native)["environment_type"]
    if own_1x(native):
        spec["output_path"] = output_path  # 1.x's agent config has no output path: save_traj writes it
        if recorded(native).get("model_type") != LITELLM_1X:
            spec["substituted_model"] = recorded(native).get("model_type")
    return spec


LITELLM_1X = TOOLCALL
"""1.x's default model class (the same path as 2.x's tool-call model): its `api_base` reaches the bridge."""


def companion_config(native: Native, *, output_path: str | None) -> dict[str, Any]:
    """The recorded config with only what the sandbox needs changed (recorded in docs/adapters)."""
    config = copy.deepcopy(recorded(native))
    if "environment_type" not in config:  # a bare list, a 1.x run before 1.10.0 (`save_traj` saved none)
        raise PlanRefused(
            "the trajectory records no config (its agent, model and environment classes): "
            "the agent cannot be started to rerun or continue it"
        )
    config["environment_type"] = extended_environment(config) or config["environment_type"]
    if own_1x(native):
        # 1.x parses and renders in the agent: the model class only queries; 1.x's litellm one is the
        # one whose requests reach the bridge (OpenRouterModel and the others post to a fixed URL)
        config["model_type"] = LITELLM_1X
    elif native.format == "mini-swe-agent-1":
        _as_textbased(config)
    if config["environment_type"] == DOCKER_ENV:
        config["environment"]["executable"] = f"{bundle.COMPANION_MOUNT}/docker"
    if config["agent_type"] in PROGRESS_TRACKING:
        config["agent_type"] = DEFAULT_AGENT
    agent = config["agent"]
    if not own_1x(native):
        agent["output_path"] = output_path
    if config["agent_type"] == INTERACTIVE:
        # Unattended: what a person pressing Enter at every prompt gets.
        agent["mode"] = "yolo"
        agent["confirm_exit"] = False
    return config


def runs_as(native: Native) -> str | None:
    """Which class reruns and continues the file's actions when it is not the one the file names."""
    config = recorded(native)
    notes = []
    named = config.get("agent_type")
    if named in PROGRESS_TRACKING:
        notes.append(
            f"recorded agent_type {named} is DefaultAgent plus a progress display: {DEFAULT_AGENT} ran"
        )
    model = config.get("model_type")
    if native.format == "mini-swe-agent-1" and isinstance(model, str) and model != LITELLM_1X:
        notes.append(
            f"recorded model_type {model} posts to its own service: a continuation queries through "
            f"{LITELLM_1X} (1.x renders in the agent, so reruns do not use the model)"
        )
    return "; ".join(notes) or None


def _as_textbased(config: dict[str, Any]) -> None:
    """1.x parsed actions and rendered observations in the agent, with these templates; 2.x does it in
    the text-based model. Timeouts differ (1.x rendered its timeout_template), hence the version degradation."""
    agent = config["agent"]
    config["model_type"] = TEXTBASED
    config["model"] |= {
        "action_regex": agent.get("action_regex", r"```bash\s*\n(.*?)\n```"),
        "observation_template": agent["action_observation_template"],
        "format_error_template": agent.get("format_error_template", "{{ error }}"),
    }


def model_name(native: Native) -> str | None:
    name = recorded(native).get("model", {}).get("model_name")
    return name if isinstance(name, str) else None


def continuation_refusal(native: Native, model: str | None) -> str | None:
    reason = rerun_refusal(native)
    if reason:
        return reason
    if native.format == "mini-swe-agent-1" and not runs_1x():
        return (
            f"a mini-swe-agent 1.x trajectory: {bundle.version()} sends a different wire form; "
            f"the 1.x release that wrote it continues it (--agent-version 1.x.y)"
        )
    if not model or not model.startswith(CHAT_PROVIDERS):
        return (
            f"model {model!r} is not routed to chat completions by litellm; "
            f"pass --model with one of the prefixes {', '.join(CHAT_PROVIDERS)}"
        )
    return None
