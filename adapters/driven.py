"""The replay model a driven rerun talks to: a fed scripted model service on a socket the sandbox
reaches as 127.0.0.1:PORT. The agent's own CLI runs in the container; each main-thread request it sends
is held until the rerunner feeds the next historical turn (shared by the Claude Code and Codex reruns)."""

from __future__ import annotations

import queue
import time
from pathlib import Path
from typing import Any

from replayer.adapters.base import no_request
from replayer.adapters.sandbox_paths import REPLAY_MODEL_PORT
from replayer.bridges.scripted import MainThread, Script, ScriptedUpstream, Turn, every_request
from replayer.floor.io import remove_alias, short_alias
from replayer.sandboxes.base import RunningExec, Sandbox

PORT = REPLAY_MODEL_PORT
SOCKET = "replay-model.sock"
REQUEST_TIMEOUT_S = 120.0
STEP_MARGIN_S = 60.0
"""A step may take its longest command's timeout plus this for the CLI's own work."""


class ReplayModel:
    """Serve the fed model on `work`/SOCKET (a host folder mounted at `mount`) for `sandbox`."""

    def __init__(
        self,
        sandbox: Sandbox,
        work: Path,
        mount: str,
        model: str,
        upstream: type[ScriptedUpstream] = ScriptedUpstream,
        main_thread: MainThread = every_request,
    ):
        """`upstream`: the scripted service of the agent's wire (`ScriptedUpstream` speaks Anthropic's and
        OpenAI's; another wire brings its own, e.g. `bridges.gemini.ScriptedGemini`)."""
        self.alias = short_alias(work)
        self.upstream = upstream(
            Script(turns=[], model=model), unix_path=self.alias / SOCKET, fed=True, main_thread=main_thread
        )
        self.upstream.__enter__()
        self.sandbox = sandbox
        sandbox.forward_port(PORT, f"{mount}/{SOCKET}")

    def feed(self, turn: Turn) -> None:
        self.upstream.feed(turn)

    def next_request(
        self, handle: RunningExec, cli: str, what: str, timeout_s: float = REQUEST_TIMEOUT_S
    ) -> Any:
        """The body of the next main-thread request `handle`'s CLI sends; a clear error if none comes."""
        body = handle.await_item(self.upstream.main_bodies, timeout_s)
        if body is None:
            raise no_request(handle, cli, what)
        return body

    def answer_until_exit(self, handle: RunningExec, closing: Turn, timeout_s: float) -> bool:
        """Whether `handle`'s CLI exits within `timeout_s` after its run's last turn. A CLI that asks the
        model again before it exits (Claude Code 2.1.332 does, after its turn ended) gets `closing` again."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if handle.wait(1.0):
                return True
            try:
                self.upstream.main_bodies.get_nowait()
            except queue.Empty:
                continue
            self.feed(closing)
        return False

    def close(self) -> None:
        """The forwarder first: the continuation runs in this container, and must find nothing listening
        on the port that reaches the host."""
        try:
            self.sandbox.stop_forward(PORT)
        finally:
            self.upstream.__exit__(None, None, None)
        (self.alias / SOCKET).unlink(missing_ok=True)
        remove_alias(self.alias)
