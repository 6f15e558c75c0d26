"""Run `replayer run --continue` against the scripted upstream, as a user would."""

from __future__ import annotations

import secrets
import shutil
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters import adapter_class
from replayer.bridges.scripted import LoggedRequest, Script, ScriptedUpstream, TextBlock, Turn
from tests.conftest import CLAUDE, replayer

KEY = f"sk-upstream-{secrets.token_hex(12)}"
"""The upstream credential: the bridge's only; it must never reach a file."""


def scripted(agent: str, script: Script, **options: Any) -> ScriptedUpstream:
    """The scripted model on `agent`'s wire, answering its side calls (titles, warm-ups) aside, as its
    adapter says."""
    return adapter_class(agent)().scripted_upstream(script, **options)


def changed_workspace(name: str, dest: Path) -> Path:
    """The recording's workspace with every .txt file changed, so that reruns see fresh content."""
    shutil.copytree(CLAUDE.fixture(name) / "workspace", dest)
    for path in dest.rglob("*.txt"):
        path.write_text(path.read_text() + "changed after the recording\n")
    return dest


def continue_run(
    name: str,
    after_step: int,
    out: Path,
    workspace: Path,
    turns: list[Turn] | None = None,
    *extra: str,
) -> tuple[int, dict, list[LoggedRequest], str]:
    """(exit code, result.json, upstream log, stderr)."""
    code, results, log, err = continue_runs(name, [after_step], out, workspace, turns, *extra)
    return code, results[after_step], log, err


def continue_runs(
    name: str,
    boundaries: list[int],
    out: Path,
    workspace: Path,
    turns: list[Turn] | None = None,
    *extra: str,
) -> tuple[int, dict[int, dict], list[LoggedRequest], str]:
    """One `run -n a,b,... --continue` (one replay, a continuation forked at each boundary, each getting the
    whole script: `by_history`): (exit code, each boundary's result.json, the upstream log of them all,
    stderr). One boundary is `run -n K`: its result directory is `out` itself, else `out/after-K`."""
    script = Script(
        turns=turns or [Turn(blocks=[TextBlock(text="Finished.")])],
        message_id_prefix=f"msg_cont_{name}",
        by_history=len(boundaries) > 1,
    )
    with scripted("claude_code", script, expected_key=KEY) as upstream:
        args = [
            "run",
            str(CLAUDE.fixture(name) / "session.jsonl"),
            "-n",
            ",".join(map(str, boundaries)),
            "-w",
            str(workspace),
        ]
        args += ["-o", str(out), "--continue", "--upstream", upstream.url, "--json", *extra]
        proc = replayer(*args, env={"ANTHROPIC_API_KEY": KEY})
        log = list(upstream.log)
    dirs = {k: out if len(boundaries) == 1 else out / f"after-{k}" for k in boundaries}
    results = {
        k: orjson.loads((d / "result.json").read_bytes()) if (d / "result.json").exists() else {}
        for k, d in dirs.items()
    }
    return proc.returncode, results, log, proc.stderr


def files_containing(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and needle in p.read_bytes()]
