"""What every agent finds at the same place inside the sandbox: its home, the bundles, the model services."""

from __future__ import annotations

AGENT_HOME = "/home/replay"
"""The agent home inside the sandbox (the run's home folder in its state directory), for reruns and
continuations alike."""
AGENTS_MOUNT = "/opt/replayer/agents"
"""Where agent bundles are mounted read-only, one folder `<agent>-<version>` each."""
BRIDGE_PORT = 8765
"""The continuation's bridge, on 127.0.0.1 inside the sandbox (forwarded to its host socket)."""
REPLAY_MODEL_PORT = 8763
"""The replay model a driven rerun (Claude Code, Codex) talks to."""
OPENCODE_REPLAY_PORT = 8764
"""The replay model OpenCode's reruns talk to."""
CONTINUE_SPEC = ".replayer/continue.json"
"""A companion's continuation spec, in the rebuilt agent home (the rebuild writes it, `continue` reads it)."""
PLACEHOLDER_KEY = "sk-replayer-bridge-placeholder"
"""What the sandboxed agent is given as its key: the bridge injects the real one on the host."""
REPLAY_MODEL_KEY = "sk-replayer-replay-model"
"""The key a driven rerun's CLI is given (the replay model checks none)."""


def agent_mount(name: str, version: str) -> str:
    """Where the bundle of agent `name` at `version` is mounted."""
    return f"{AGENTS_MOUNT}/{name}-{version}"


def local_url(port: int, path: str = "/v1") -> str:
    """A model service on `port` of the sandbox's loopback, as an agent's base URL."""
    return f"http://127.0.0.1:{port}{path}"


BRIDGE_URL = local_url(BRIDGE_PORT)
CONTINUE_SPEC_PATH = f"{AGENT_HOME}/{CONTINUE_SPEC}"
