"""Where the pinned opencode binary is mounted, its isolated home and config, and how it is invoked."""

from __future__ import annotations

import shlex
from pathlib import Path

import orjson

from replayer.adapters import sandbox_paths
from replayer.adapters.sandbox_paths import AGENT_HOME, PLACEHOLDER_KEY
from replayer.floor import bundles
from replayer.floor.errors import SandboxError, last_line
from replayer.floor.io import write_bytes_atomic
from replayer.floor.pins import load_pins, release
from replayer.sandboxes.base import Sandbox

NAME = "opencode"
DB = ".local/share/opencode/opencode.db"
STORAGE = ".local/share/opencode/storage"
"""The JSON-file session storage of versions before the SQLite store (1.1 and older): session/<project>/,
message/<session>/ and part/<message>/ folders of one JSON file per record."""
ENV = {
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
    # Its detached plugin install looks the registry up even offline; point it at nothing.
    "npm_config_registry": "http://127.0.0.1:9/",
}


def version() -> str:
    return load_pins().agents[NAME].version


BINARY_PLACES = (*bundles.PLACES, "bin/.{c}")
"""Where OpenCode releases put the native binary: `bin/opencode`, 1.2.11-1.15 `bin/.opencode`."""


def mount() -> str:
    return sandbox_paths.agent_mount(NAME, version())


def binary(root: str | Path | None = None) -> str:
    """The binary under `root` (default: its mount in the sandbox)."""
    return f"{root if root is not None else mount()}/{bundles.cli_path(NAME, version(), BINARY_PLACES).path}"


def binds() -> dict[str, tuple[Path, bool]]:
    return {mount(): (load_pins().bundle_dir(NAME), True)}


def base_env(home: str = AGENT_HOME) -> dict[str, str]:
    return {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TERM": "dumb", **ENV}


RETAINED_STATUS = "beta"
"""The model's catalogue status in the config. Each release bundles a models.dev catalogue and deletes every
model it marks `deprecated`, a model the config declares too (merged over the catalogue's entry): the pinned
1.18.33 on a session of an older release whose model it retired (OpenCode Zen's `opencode/grok-code`) failed
every run with "Model not found" ("Unexpected server error" on stdout) before any model request. `beta` is the
one status every release's config takes (alpha, beta, deprecated) that no release deletes; it changes no
request."""


def config(provider: str, model: str, base_url: str) -> dict:
    """opencode.json: one OpenAI-compatible provider (the bridge or the replay model), nothing fetched, its
    model kept whatever the running release's catalogue says of it (`RETAINED_STATUS`)."""
    return {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "model": f"{provider}/{model}",
        "small_model": f"{provider}/{model}",
        "enabled_providers": [provider],
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny"},
        "provider": {
            provider: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "sandbox-replayer",
                "options": {"baseURL": base_url, "apiKey": PLACEHOLDER_KEY},
                "models": {
                    model: {
                        "name": model,
                        "tool_call": True,
                        "reasoning": False,
                        "limit": {"context": 128000, "output": 8192},
                        "status": RETAINED_STATUS,
                    }
                },
            }
        },
    }


def write_config(home: Path, provider: str, model: str, base_url: str) -> None:
    path = home / ".config" / "opencode" / "opencode.json"
    write_bytes_atomic(path, orjson.dumps(config(provider, model, base_url), option=orjson.OPT_INDENT_2))


STDIN_AS_IS = (1, 15, 0)
"""From this version `run` sends a prompt read from stdin as is; before it (observed: 1.1.65, 1.2.27, 1.3.2,
1.14.34, 1.14.41; 1.15.0, 1.15.13 and 1.18.33 send it as is) it appends stdin to the argv message after a
newline, so that a prompt given on stdin alone reaches the model as "\n" + prompt."""


def sent_prompt(prompt: str) -> str:
    """The user message the running version makes of `prompt` given on stdin (`with_stdin_prompt`)."""
    return prompt if release(version()) >= STDIN_AS_IS else "\n" + prompt


def with_stdin_prompt(argv: list[str]) -> list[str]:
    """argv run with $REPLAYER_PROMPT on stdin: the CLI re-quotes argv words that contain spaces."""
    return ["bash", "-c", f'printf %s "$REPLAYER_PROMPT" | exec {shlex.join(argv)}']


def run_argv(session: str | None) -> list[str]:
    argv = [binary(), "run", "--format", "json"]
    return argv + (["--session", session] if session else [])


OUTPUT_BYTES = 256 * 1024 * 1024
"""The most of the CLI's standard output read back (a long session's export): a larger one is an error the
result shows, never a cut read."""
CLI_TIMEOUT_S = 120.0


def run_in(
    sandbox: Sandbox,
    args: list[str],
    *,
    home: str,
    stdout: str,
    env: dict[str, str] | None = None,
    timeout_s: float = CLI_TIMEOUT_S,
) -> bytes:
    """`opencode ARGS` in `sandbox` with `home` as its home and folder; its standard output, written into the
    file `stdout` there and read back by `cat` in the sandbox within OUTPUT_BYTES.

    Into a file, not a pipe: the CLI exits once it has written its stdout, and what it wrote into a pipe past
    the pipe's 64 KiB is lost with it (a long session's export came back cut at 64 KiB)."""
    script = 'mkdir -p "${TMPDIR:-/tmp}" && exec "$0" "$@" > "$REPLAYER_STDOUT"'
    done = sandbox.exec(
        ["sh", "-c", script, binary(), *args],
        workdir=home,
        env={**base_env(home), **(env or {}), "REPLAYER_STDOUT": stdout},
        timeout_s=timeout_s,
    )
    if done.timed_out or done.exit_code != 0:
        why = "timed out" if done.timed_out else f"exited {done.exit_code}"
        raise SandboxError(
            f"opencode {args[0]} in the sandbox {why}: {last_line(done.stderr) or 'no output'}"
        )
    return sandbox.read_file(stdout, max_bytes=OUTPUT_BYTES)
