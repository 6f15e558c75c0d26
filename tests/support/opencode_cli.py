"""Run the real pinned `opencode` CLI in the sandbox against the scripted chat upstream (recorder and tests)."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from pathlib import Path

import orjson

from replayer.adapters.opencode import bundle
from replayer.adapters.sandbox_paths import AGENT_HOME, BRIDGE_PORT
from replayer.bridges.scripted import Script
from replayer.floor.pins import load_pins
from replayer.sandboxes.docker import DockerSandbox, connect
from tests.support.continuing import scripted

CWD = "/testbed"
SOCK_DIR = "/run/replayer-sock"
PORT = BRIDGE_PORT
PROVIDER = "fake"
MODEL = "fake-model"


def _session_id(stdout: bytes, home: Path) -> str:
    """The run's session: its first event names it. Some versions (1.14, 1.15) return from `run` before their
    event loop has printed anything, 1.0.98 prints nothing when it cannot load its provider; then the store's
    only session (a recorder's home: its own), in its SQLite store or JSON files."""
    if stdout.strip():
        return str(orjson.loads(stdout.splitlines()[0])["sessionID"])
    if not (home / bundle.DB).is_file():
        (found,) = (home / bundle.STORAGE / "session").glob("*/ses_*.json")
        return found.stem
    with contextlib.closing(sqlite3.connect(f"file:{home / bundle.DB}?mode=ro", uri=True)) as db:
        (found,) = db.execute("SELECT id FROM session").fetchall()
    return str(found[0])


def run_opencode(
    *, prompts: list[str], workspace: Path, home: Path, sockets: Path, script: Script
) -> tuple[list[bytes], list[dict], str]:
    """The first prompt starts a session, each further one continues it (`--session`).

    Returns each run's stdout, the upstream log and the session id."""
    bundle.write_config(home, PROVIDER, MODEL, f"http://127.0.0.1:{PORT}/v1")
    stdout: list[bytes] = []
    session: str | None = None
    with scripted("opencode", script, unix_path=sockets / "upstream.sock") as upstream:
        binds = {CWD: (workspace, False), AGENT_HOME: (home, False), SOCK_DIR: (sockets, False)}
        binds.update(bundle.binds())
        run_id = f"opencode-{uuid.uuid4().hex[:8]}"
        with DockerSandbox.start(
            connect(), load_pins().base_image.tag, binds=binds, workdir=CWD, run_id=run_id
        ) as box:
            box.forward_port(PORT, f"{SOCK_DIR}/upstream.sock")
            for prompt in prompts:
                argv = bundle.with_stdin_prompt(bundle.run_argv(session))
                env = {**bundle.base_env(), "REPLAYER_PROMPT": prompt}
                res = box.exec(argv, workdir=CWD, env=env, timeout_s=180)
                if res.exit_code != 0:
                    raise RuntimeError(
                        f"opencode exited {res.exit_code}: {(res.stdout + res.stderr).decode()[-3000:]}"
                    )
                stdout.append(res.stdout)
                if session is None:
                    session = _session_id(res.stdout, home)
        log = [r.model_dump() for r in upstream.log]
    assert session is not None
    return stdout, log, session
