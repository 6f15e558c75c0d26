"""Run the real pinned Gemini CLI in the sandbox against the scripted Gemini API (recorder and tests)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

from replayer.adapters.gemini_cli import bundle
from replayer.bridges.gemini import ScriptedGemini
from replayer.bridges.scripted import Script
from replayer.floor.pins import load_pins
from replayer.sandboxes.docker import DockerSandbox, connect

CWD = "/testbed"
SOCK_DIR = "/run/replayer-sock"
PORT = 8765
MODEL = "gemini-2.5-flash"


def run_gemini(
    *,
    prompts: list[str],
    workspace: Path,
    home: Path,
    sockets: Path,
    script: Script,
    settings: dict[str, Any] | None = None,
) -> tuple[list[bytes], list[dict]]:
    """The first prompt starts a session (`-p`), each further one resumes it (`--resume <id>`); `settings`
    adds sections to the CLI's settings.json. Returns each run's stdout (one JSON object with the session
    id) and the upstream log."""
    import orjson

    bundle.write_settings(home, settings)
    stdout: list[bytes] = []
    with ScriptedGemini(script, unix_path=sockets / "upstream.sock") as upstream:
        binds = {CWD: (workspace, False), bundle.HOME: (home, False), SOCK_DIR: (sockets, False)}
        binds.update(bundle.binds())
        run_id = f"gemini-{uuid.uuid4().hex[:8]}"
        with DockerSandbox.start(
            connect(), load_pins().base_image.tag, binds=binds, workdir=CWD, run_id=run_id
        ) as box:
            box.forward_port(PORT, f"{SOCK_DIR}/upstream.sock")
            session: str | None = None
            for prompt in prompts:
                argv = bundle.run_argv(prompt, resume=session, model=MODEL)
                res = box.exec(
                    ["bash", "-c", 'exec "$@" </dev/null', "gemini", *argv],
                    workdir=CWD,
                    env=bundle.env(PORT),
                    timeout_s=180,
                )
                if res.exit_code != 0:
                    raise RuntimeError(
                        f"gemini exited {res.exit_code}: {(res.stdout + res.stderr).decode()[-3000:]}"
                    )
                stdout.append(res.stdout)
                session = orjson.loads(res.stdout[res.stdout.index(b"{") :])["session_id"]
        log = [r.model_dump() for r in upstream.log]
    return stdout, log
