"""Where the pinned Pi package and Node.js are mounted in the sandbox, Pi's home and config, its invocation."""

from __future__ import annotations

from pathlib import Path

import orjson

from replayer.adapters.sandbox_paths import AGENT_HOME, PLACEHOLDER_KEY
from replayer.floor.io import write_bytes_atomic
from replayer.floor.pins import load_pins

NAME = "pi"
GLOBAL_MODULES = "/usr/local/lib/node_modules"
"""The bundle's node_modules is mounted here, a standard global path: Pi's system prompt names its
install path, so no host path may show in it."""
NODE = "/usr/local/bin/node"
PACKAGE = f"{GLOBAL_MODULES}/@mariozechner/pi-coding-agent"
AGENT_DIR = f"{AGENT_HOME}/.pi/agent"
ENV = {"PI_OFFLINE": "1", "PI_SKIP_VERSION_CHECK": "1", "PI_TELEMETRY": "0"}


def version() -> str:
    return load_pins().agents[NAME].version


def binds() -> dict[str, tuple[Path, bool]]:
    pins = load_pins()
    pin = pins.agents[NAME]
    assert pin.node, "the pi pin names the host's node"
    return {
        GLOBAL_MODULES: (pins.bundle_dir(NAME) / "node_modules", True),
        NODE: (Path(pin.node), True),
    }


def base_env() -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": AGENT_HOME, "TERM": "dumb", **ENV}


def cli_argv(*args: str) -> list[str]:
    return [NODE, f"{PACKAGE}/dist/cli.js", *args]


API = "openai-completions"
"""The api of the one provider the replayer configures (the bridge speaks it)."""


def target(model: str) -> tuple[str, str, str]:
    """The model (provider, api, id) a continuation launched with `model` ("provider/id") sends to: the one
    provider the replayer configures, named as the companion names it (split at the first '/')."""
    provider, _, model_id = model.partition("/")
    return provider, API, model_id


def write_config(home: Path, provider: str, model: str, base_url: str, *, compaction: bool = True) -> None:
    """~/.pi/agent/models.json and settings.json: one OpenAI-compatible provider, nothing fetched."""
    agent = home / ".pi" / "agent"
    models = {
        "providers": {
            provider: {
                "baseUrl": base_url,
                "api": API,
                "apiKey": PLACEHOLDER_KEY,
                "models": [
                    {
                        "id": model,
                        "name": model,
                        "reasoning": False,
                        # Pi's defaults, written out: older versions (0.45.7) require `input` and `cost`
                        "input": ["text"],
                        "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                        "contextWindow": 128000,
                        "maxTokens": 8192,
                    }
                ],
            }
        }
    }
    settings = {
        "defaultProvider": provider,
        "defaultModel": model,
        "enableInstallTelemetry": False,
        "quietStartup": True,
        "compaction": {"enabled": compaction},
    }
    write_bytes_atomic(agent / "models.json", orjson.dumps(models, option=orjson.OPT_INDENT_2))
    write_bytes_atomic(agent / "settings.json", orjson.dumps(settings, option=orjson.OPT_INDENT_2))


COMPANION_MOUNT = "/opt/replayer/pi-companion"
WORK_MOUNT = "/run/replayer-pi"
COMPANION_DIR = Path(__file__).resolve().parent / "companion"


def companion_argv(mode: str, *args: str) -> list[str]:
    return [NODE, f"{COMPANION_MOUNT}/pi_companion.mjs", mode, *args]


def sandbox_binds(work: Path) -> dict[str, tuple[Path, bool]]:
    return {**binds(), COMPANION_MOUNT: (COMPANION_DIR, True), WORK_MOUNT: (work, False)}


def session_dir(cwd: str) -> str:
    """Pi's getDefaultSessionDir name for a cwd: --<path with separators as '-'>--."""
    return "--" + cwd.lstrip("/\\").replace("/", "-").replace("\\", "-").replace(":", "-") + "--"
