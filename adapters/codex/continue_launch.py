"""Continue Codex with `codex exec resume <thread-id> --json ... <prompt>`, then clean the nonce out of the rollout."""

from __future__ import annotations

from pathlib import Path

import orjson

from replayer.adapters.base import Launch, stdout_events
from replayer.adapters.codex import bundle
from replayer.adapters.codex import session as rollout
from replayer.adapters.codex.resume import TurnSettings
from replayer.adapters.sandbox_paths import AGENT_HOME, BRIDGE_URL, PLACEHOLDER_KEY
from replayer.floor.io import write_bytes_atomic
from replayer.floor.results import AgentStatus
from replayer.floor.trajectory import Trajectory

KEY_ENV = "REPLAYER_CODEX_KEY"


def config_toml(
    model: str | None,
    provider: str | None = None,
    base_url: str = BRIDGE_URL,
    turn: TurnSettings | None = None,
) -> str:
    """CODEX_HOME/config.toml: the model service is the bridge (reached through the mounted socket), under
    the provider name the rollout records (a CLI refuses to resume a thread under another provider). The
    built-in `openai` provider cannot be redefined: its base URL is set instead. `turn`: the recorded
    reasoning effort and personality the continuation keeps (the recorded `summary` is the CLI's resolved default "auto"
    where the request sent none: 0.142.0 observed, so it is not set)."""
    head = f'model = "{model}"\n' if model else ""
    if turn is not None and turn.effort:
        head += f"model_reasoning_effort = {_toml_string(turn.effort)}\n"
    if turn is not None and turn.personality:
        head += f"personality = {_toml_string(turn.personality)}\n"
    name = provider or "replayer"
    if name == "openai":
        return head + (
            'model_provider = "openai"\n'
            f'openai_base_url = "{base_url}"\n'
            "check_for_update_on_startup = false\n"
        )
    return head + (
        f"model_provider = {_toml_string(name)}\n"
        "check_for_update_on_startup = false\n\n"
        f"[model_providers.{_toml_string(name)}]\n"
        'name = "sandbox-replayer bridge"\n'
        f'base_url = "{base_url}"\n'
        'wire_api = "responses"\n'
        f'env_key = "{KEY_ENV}"\n'
        "request_max_retries = 0\n"
        "stream_max_retries = 0\n"
    )


def _toml_string(text: str) -> str:
    return orjson.dumps(text).decode()  # a JSON string without control characters is a TOML basic string


def command(traj: Trajectory, launch: Launch) -> tuple[list[str], dict[str, str]]:
    assert traj.session_id and launch.prompt is not None
    codex = f"{bundle.agent_mount()}/{bundle.cli().path}"
    # the options before `resume`: 0.58 takes none after it
    argv = [codex, "exec", "--json", "--skip-git-repo-check"]
    argv += ["--dangerously-bypass-approvals-and-sandbox"]  # the sandbox is the container
    if launch.model:
        # always: the rebuilt config.toml sets the boundary turn's model, which may not be the one asked for
        argv += ["-m", launch.model]
    argv += ["resume", traj.session_id, launch.prompt]
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": AGENT_HOME,
        "CODEX_HOME": bundle.CODEX_HOME,
        KEY_ENV: PLACEHOLDER_KEY,
        "CODEX_API_KEY": PLACEHOLDER_KEY,  # the built-in openai provider's key (codex exec)
        # where the built-in openai provider finds the bridge before config's openai_base_url (0.58)
        "OPENAI_BASE_URL": BRIDGE_URL,
    }
    return ["bash", "-c", 'exec "$@" </dev/null', "codex", *argv], env


def status(traj: Trajectory, stdout: bytes) -> AgentStatus:
    """completed only for the rebuilt thread (the CLI silently starts a new session on some mistakes)."""
    seen = stdout_events(stdout)
    started = next((e for e in seen if e.get("type") == "thread.started"), None)
    if started is None or started.get("thread_id") != traj.session_id:
        return "agent_error"
    # `error` events alone are retries the CLI recovered from ("Reconnecting... 1/5"): the turn's own
    # end decides
    if any(e.get("type") == "turn.failed" for e in seen):
        return "agent_error"
    return "completed" if any(e.get("type") == "turn.completed" for e in seen) else "agent_error"


def finish(
    native_file: Path, home: Path, rebuilt_home: Path, dest: Path, prompt: str, keep_prompt: bool
) -> dict[str, str]:
    """continued/rollout.jsonl without the nonce (ordinals renumbered) and rollout.raw.jsonl as the CLI left it."""
    continued = home / native_file.relative_to(rebuilt_home)
    if not continued.is_file():
        return {}
    raw = continued.read_bytes()
    write_bytes_atomic(dest / "rollout.raw.jsonl", raw)
    records = [orjson.loads(line) for line in raw.splitlines() if line.strip()]
    if not keep_prompt:
        needle = orjson.dumps(prompt)[1:-1].decode()
        records = [r for r in records if needle not in orjson.dumps(r["payload"]).decode()]
    paginated = bool(records) and records[0]["payload"].get("history_mode") == "paginated"
    if paginated:
        for ordinal, record in enumerate(records):
            record["ordinal"] = ordinal
    write_bytes_atomic(dest / "rollout.jsonl", rollout.to_jsonl(records))
    return {
        "continued_rollout": "continued/rollout.jsonl",
        "continued_rollout_raw": "continued/rollout.raw.jsonl",
    }
