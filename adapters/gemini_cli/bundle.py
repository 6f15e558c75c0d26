"""Where the pinned Gemini CLI package and Node.js are mounted in the sandbox, its home, settings and invocation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.gemini_cli.wire import DOCUMENT, Resume
from replayer.adapters.sandbox_paths import AGENT_HOME, PLACEHOLDER_KEY, local_url
from replayer.floor import bundles
from replayer.floor.io import write_bytes_atomic
from replayer.floor.pins import load_pins, release

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

# How a resumed session is sent (wire.Resume), read from each release's bundle (`npm pack
# @google/gemini-cli@X`, or the bundle cache): convertSessionToClientHistory, stripToolCallIdPrefixes,
# GeminiChat.getHistoryTurns and makeApiCallAndProcessStream. There are no 0.46, 0.48-0.50 releases.
STRIPS_PREFIXES_SINCE = (0, 43)
"""`stripToolCallIdPrefixes` on every request (call ids sent without the stored `<tool name>__` prefix):
in 0.43.0's package, not in 0.42.0's."""
CONTENT_PARTS_SINCE = (0, 44)
"""`convertSessionToClientHistory` sends a gemini message as its content parts when they hold calls or
thoughts (else thoughts, text, `toolCalls`): 0.44.0; 0.39.0 to 0.43.0 convert as 0.34 (document) does."""
REUSES_CONTEXT_SINCE = (0, 44)
"""`getInitialChatHistory` builds no fresh session context when the resumed history's first turn has the
context's stable id (`wire.ENVIRONMENT_ID`): that stored turn is sent as the context. 0.44.0, not 0.43.0
(which sends a fresh context, then the stored one)."""
SKIPS_CONTEXT_SINCE = (0, 45)
"""Stored `<session_context>` / `<hook_context>` user messages are not sent: 0.45.2, not 0.44.0."""
SKIPS_BLANK_SINCE = (0, 47)
"""Blank user messages are not sent either (`isIgnoredUserContent`): 0.47.0, not 0.45.2."""
MERGES_SINCE = (0, 53)
"""Consecutive turns of one role are sent as one (`coalesceConsecutiveRoles` in
`makeApiCallAndProcessStream`): 0.53.0, not 0.52.0. Before it the history's two user turns after a tool
batch (the calls' results, then the recorded functionResponse message) go out as two turns."""
STRIPS_THOUGHTS_SINCE = (0, 54)
"""`getHistoryTurns` strips thought parts for Gemini 2 and 3 models (`stripThoughts`, then merges):
0.54.4, not 0.53.0 (which sends recorded thoughts as thought parts)."""
DROPS_EMPTY_TEXT_SINCE = (0, 57)
"""`stripToolCallIdPrefixes` also drops empty text parts (and empty `text` beside other keys): 0.57.0,
not 0.56.0."""


def version() -> str:
    return load_pins().agents[NAME].version


def writes_log() -> bool:
    """Whether the running version keeps sessions as append logs (else as one JSON document)."""
    return release(version()) >= LOG_SINCE


def resume_rules(running: str | None = None) -> Resume:
    """How `running` (default: the running version) sends a resumed session."""
    at = release(running or version())
    if at < LOG_SINCE:
        return DOCUMENT
    return Resume(
        content_parts=at >= CONTENT_PARTS_SINCE,
        skips_context=at >= SKIPS_CONTEXT_SINCE,
        reuses_context=at >= REUSES_CONTEXT_SINCE,
        skips_blank=at >= SKIPS_BLANK_SINCE,
        strips_prefixes=at >= STRIPS_PREFIXES_SINCE,
        drops_empty_text=at >= DROPS_EMPTY_TEXT_SINCE,
        strips_thoughts=at >= STRIPS_THOUGHTS_SINCE,
        merges=at >= MERGES_SINCE,
        closes=at >= CLOSES_SINCE,
    )


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


def write_settings(home: Path, extra: dict[str, Any] | None = None) -> None:
    """SETTINGS, and `extra`'s sections (the recording's grep backend: grep_backend.py)."""
    found = {**SETTINGS, **(extra or {})}
    write_bytes_atomic(home / ".gemini" / "settings.json", orjson.dumps(found, option=orjson.OPT_INDENT_2))
