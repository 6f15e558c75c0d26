"""The recorded config, turned into what the companion builds: the trajectory's own classes and templates.

Only classes whose semantics the pinned package reproduces inside the sandbox are accepted: the
local and the docker environment (the sandbox is the container), the litellm chat models, the
default and the interactive agent. Anything else is refused with its name.
"""

from __future__ import annotations

import copy
from typing import Any

from adapters.mini_swe_agent import bundle
from adapters.mini_swe_agent.trajectory import Native, recorded_config

LOCAL_ENV = "minisweagent.environments.local.LocalEnvironment"
DOCKER_ENV = "minisweagent.environments.docker.DockerEnvironment"
ENVIRONMENTS = {LOCAL_ENV, DOCKER_ENV}
TEXTBASED = "minisweagent.models.litellm_textbased_model.LitellmTextbasedModel"
TOOLCALL = "minisweagent.models.litellm_model.LitellmModel"
MODELS = {TOOLCALL, TEXTBASED}
INTERACTIVE = "minisweagent.agents.interactive.InteractiveAgent"
AGENTS = {"minisweagent.agents.default.DefaultAgent", INTERACTIVE}
CHAT_PROVIDERS = ("openai/", "hosted_vllm/")
"""litellm routes these prefixes to the chat-completions protocol at `api_base` (the bridge)."""


def recorded(native: Native) -> dict[str, Any]:
    return recorded_config(native.data)


def rerun_refusal(native: Native) -> str | None:
    """Why this trajectory's actions cannot be rerun with their own semantics, or None."""
    if native.format == "bare-list":
        return "a bare message list records no config (no observation template to render with)"
    config = recorded(native)
    for key, allowed in (("environment_type", ENVIRONMENTS), ("model_type", MODELS), ("agent_type", AGENTS)):
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
    agent = config["agent"]
    agent["output_path"] = output_path
    if config["agent_type"] == INTERACTIVE:
        # Unattended: what a person pressing Enter at every prompt gets.
        agent["mode"] = "yolo"
        agent["confirm_exit"] = False
    return config


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
