"""Where the pinned Gemini CLI package and Node.js are mounted in the sandbox, its home, settings and invocation."""

from __future__ import annotations

from pathlib import Path

import orjson

from adapters.sandbox_paths import AGENT_HOME, PLACEHOLDER_KEY, local_url
from replayer import bundles
from replayer.io import write_bytes_atomic
from replayer.pins import load_pins
from replayer.versions import release

NAME = "gemini_cli"
HOME = AGENT_HOME
GLOBAL_MODULES = "/usr/local/lib/node_modules"
"""The bundle's node_modules, mounted at a standard global path (no host path shows to the agent)."""
NODE = "/usr/local/bin/node"
PACKAGE = f"{GLOBAL_MODULES}/@google/gemini-cli"
GEMINI_DIR = f"{HOME}/.gemini"
SETTINGS = {
    "security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": False}},
    "general": {"disableAutoUpdate": True, "sessionRetention": {"enabled": False}},
    "privacy": {"usageStatisticsEnabled": False},
    "telemetry": {"enabled": False},
}
"""~/.gemini/settings.json: API-key auth (without it: exit 41), --yolo kept in any folder, nothing fetched,
and no session deleted for its age (the CLI's cleanup, on by default, deletes sessions last updated over 30
days ago at startup: a rebuilt session keeps the dates it was recorded with)."""


LOG_SINCE = (0, 39)
"""The first release that writes (and lists) sessions as append logs (`.jsonl`): 0.38.0 writes one JSON
document, 0.39.0 the log (read from their packages); 0.61.0 still reads both."""
CLOSES_SINCE = (0, 54)
"""The first release that closes unanswered tool responses on resume with a model turn of its own
(`closeUnansweredToolResponseTurn`: in 0.54.4's package, not in 0.53.0's)."""


def version() -> str:
    return load_pins().agents[NAME].version


def writes_log() -> bool:
    """Whether the running version keeps sessions as append logs (else as one JSON document)."""
    return release(version()) >= LOG_SINCE


def closes_unanswered() -> bool:
    return release(version()) >= CLOSES_SINCE


def binds() -> dict[str, tuple[Path, bool]]:
    pins = load_pins()
    pin = pins.agents[NAME]
    assert pin.node, "the gemini_cli pin names the host's node"
    return {
        GLOBAL_MODULES: (pins.bundle_dir(NAME) / "node_modules", True),
        NODE: (Path(pin.node), True),
    }


def env(port: int, key: str = PLACEHOLDER_KEY) -> dict[str, str]:
    """The CLI's environment: its home, the model service on 127.0.0.1:`port` (plain http: loopback only)."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": HOME,
        "TERM": "dumb",
        "SHELL": "/bin/bash",
        "GOOGLE_GEMINI_BASE_URL": local_url(port, ""),
        "GEMINI_API_KEY": key,
        "GEMINI_CLI_NO_RELAUNCH": "true",
    }


def cli_argv(*args: str) -> list[str]:
    """The running version's CLI entry (0.61: `bundle/gemini.js`; older releases: `dist/index.js`)."""
    entry = bundles.cli_path(NAME, version()).path.removeprefix("node_modules/")
    return [NODE, f"{GLOBAL_MODULES}/{entry}", *args]


def run_argv(prompt: str, resume: str | None = None, model: str | None = None) -> list[str]:
    """One headless run (`-p`, tools approved, one JSON object printed), resuming `resume` when given."""
    argv = ["-p", prompt, "--yolo", "-o", "json"]
    argv += ["--resume", resume] if resume else []
    argv += ["-m", model] if model else []
    return cli_argv(*argv)


def write_settings(home: Path) -> None:
    write_bytes_atomic(home / ".gemini" / "settings.json", orjson.dumps(SETTINGS, option=orjson.OPT_INDENT_2))
