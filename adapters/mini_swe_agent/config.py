"""The recorded config, turned into what the companion builds: the trajectory's own classes and templates.

Only classes whose semantics the pinned package reproduces inside the sandbox are accepted: the
local and the docker environment (the sandbox is the container), the litellm chat models, the
default and the interactive agent, and the SWE-bench runner's progress-tracking agent (run as the
default agent). Anything else is refused with its name.
"""

from __future__ import annotations

import copy
import weakref
from typing import Any

from replayer.adapters.mini_swe_agent import bundle
from replayer.adapters.mini_swe_agent.session import Native, recorded_config

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


def recorded(native: Native) -> dict[str, Any]:
    return recorded_config(native.data)


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
        if key == "model_type" and native.format == "mini-swe-agent-1":
            continue  # 1.x parsed actions and rendered observations in the agent: any model class reruns
        value = config.get(key)
        if value not in allowed:
            return f"recorded {key} {value!r} is not supported (supported: {', '.join(sorted(allowed))})"
        section = config.get(key.removesuffix("_type"))
        if not isinstance(section, dict):
            return f"the recorded config has no {key.removesuffix('_type')} section"
    env = config["environment"]
    if config["environment_type"] == DOCKER_ENV and env.get("forward_env"):
        return f"forward_env {env['forward_env']} took values from the original host, which were not recorded"
    if config["model"].get("set_cache_control"):
        return "set_cache_control rewrites the wire messages (an Anthropic route, not chat completions)"
    return None


def companion_config(native: Native, *, output_path: str | None) -> dict[str, Any]:
    """The recorded config with only what the sandbox needs changed (recorded in docs/adapters)."""
    config = copy.deepcopy(recorded(native))
    if native.format == "mini-swe-agent-1":
        _as_textbased(config)
    if config["environment_type"] == DOCKER_ENV:
        config["environment"]["executable"] = f"{bundle.COMPANION_MOUNT}/docker"
    if config["agent_type"] in PROGRESS_TRACKING:
        config["agent_type"] = DEFAULT_AGENT
    agent = config["agent"]
    agent["output_path"] = output_path
    if config["agent_type"] == INTERACTIVE:
        # Unattended: what a person pressing Enter at every prompt gets.
        agent["mode"] = "yolo"
        agent["confirm_exit"] = False
    return config


def runs_as(native: Native) -> str | None:
    """Which class reruns and continues the file's actions when it is not the one the file names."""
    named = recorded(native).get("agent_type")
    if named not in PROGRESS_TRACKING:
        return None
    return f"recorded agent_type {named} is DefaultAgent plus a progress display: {DEFAULT_AGENT} ran"


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
    if native.format != "mini-swe-agent-1.1":
        return "a mini-swe-agent 1.x trajectory: the pinned 2.x package sends a different wire form"
    if not model or not model.startswith(CHAT_PROVIDERS):
        return (
            f"model {model!r} is not routed to chat completions by litellm; "
            f"pass --model with one of the prefixes {', '.join(CHAT_PROVIDERS)}"
        )
    return None
