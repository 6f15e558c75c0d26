"""Live progress: at a terminal (a pseudo-terminal here), `run` prints a line per rerun call (step, tool,
status, time) and the continued agent's end; with its output not a terminal, or with -q, none of that.
Real containers, the real pinned CLI, the scripted upstream."""

from __future__ import annotations

import errno
import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import orjson
import pytest

from replayer.bridges.scripted import Script, ScriptedUpstream, TextBlock, Turn
from replayer.floor import bundles
from tests.conftest import CLAUDE, QUICK_INSTALL, ROOT, bundle_cache, replayer
from tests.support.continuing import KEY

pytestmark = pytest.mark.agent

SESSION = CLAUDE.fixture("write_edit") / "session.jsonl"
WORKSPACE = CLAUDE.fixture("write_edit") / "workspace"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")

pytestmark = [pytest.mark.docker, pytest.mark.agent]


def _at_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, list[str]]:
    """The command with stdin, stdout and stderr a pseudo-terminal of 120 columns: (exit code, the lines it
    showed, colours stripped; a status line redrawn in place shows as several)."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "replayer.cli", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        cwd=ROOT,
        env={**os.environ, "TERM": "xterm-256color", **env},
    )
    os.close(slave)
    shown = bytearray()
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError as exc:  # EIO: the command exited and closed the terminal
            if exc.errno != errno.EIO:
                raise
            break
        if not chunk:
            break
        shown += chunk
    os.close(master)
    text = _ANSI.sub("", shown.decode(errors="replace"))
    return proc.wait(), [line.rstrip() for line in re.split(r"[\r\n]+", text)]


def _step_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if re.match(r"\s+step\s+\d+\s", line)]


def _expected(result: dict) -> list[list[str]]:
    return [[str(d["step"]), d["tool"], d["status"]] for d in result["divergences"]]


def test_run_at_a_terminal_shows_each_rerun_call_and_the_agent(tmp_path: Path) -> None:
    out = tmp_path / "out"
    script = Script(turns=[Turn(blocks=[TextBlock(text="Finished.")])], message_id_prefix="msg_live")
    with ScriptedUpstream(script, expected_key=KEY) as upstream:
        # the upstream from the environment: a setting the user made once
        env = {"ANTHROPIC_API_KEY": KEY, "REPLAYER_UPSTREAM": upstream.url}
        code, lines = _at_a_terminal(
            ["run", str(SESSION), "-n", "3", "-w", str(WORKSPACE), "-o", str(out), "--continue"], env
        )
    assert code == 0, "\n".join(lines)
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["request"]["continuation"]["upstream"] == upstream.url
    steps = _step_lines(lines)
    assert [line.split()[1:4] for line in steps] == _expected(result)
    assert all(re.fullmatch(r"\d+\.\ds", line.split()[4]) for line in steps), steps
    assert f"  agent completed after {result['continuation']['steps_used']} request(s)," in "\n".join(lines)
    # the summary follows the progress, as without it
    assert any(line.startswith("continuation: input condition replayed_boundary_only") for line in lines)


def test_no_progress_when_the_output_is_not_a_terminal_or_with_quiet(tmp_path: Path) -> None:
    args = ["run", str(SESSION), "-n", "3", "-w", str(WORKSPACE)]
    piped = replayer(*args, "-o", str(tmp_path / "piped"), check=True)
    assert _step_lines(piped.stdout.splitlines() + piped.stderr.splitlines()) == []
    assert piped.stderr == "" and "result: " in piped.stdout
    code, lines = _at_a_terminal([*args, "-o", str(tmp_path / "quiet"), "-q"], {})
    assert code == 0 and _step_lines(lines) == [] and not any("rerunning" in line for line in lines)
    assert any(line.startswith("result: ") for line in lines), lines


def test_an_install_at_a_terminal_shows_what_and_how_big(tmp_path: Path) -> None:
    """A bundle the cache lacks: a status line naming it and its source, then a line that stays with its size."""
    cache = bundle_cache(tmp_path / "bundles")
    code, lines = _at_a_terminal(["bundles", "add", QUICK_INSTALL], {"REPLAYER_BUNDLES": str(cache)})
    assert code == 0, lines
    agent, version = bundles.parse_spec(QUICK_INSTALL)
    what = f"{agent} {version} from npm {bundles.agent_pin(agent).npm}"
    assert any(line.lstrip(" ⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏").startswith(f"installing {what}") for line in lines), lines
    done = [line for line in lines if line.startswith(f"  installed {what} (")]
    assert len(done) == 1 and re.search(r"\(\d+\.\d MB, \d+\.\ds\)$", done[0]), lines
