"""The rebuilt session is a real Claude Code session: the pinned CLI resumes it, and its first
request carries exactly expected_prefix.json plus the documented resume envelope."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from replayer.adapters.claude_code import envelope, wire
from replayer.bridges.scripted import Script
from tests.conftest import CLAUDE, replayer
from tests.support.claude_cli import run_claude

pytestmark = pytest.mark.agent


@pytest.mark.parametrize(
    ("name", "after_step"), [("parallel", 1), ("write_edit", 3), ("continued", 2), ("single", 0)]
)
def test_real_cli_resumes_the_rebuilt_prefix(name: str, after_step: int, tmp_path: Path) -> None:
    out = tmp_path / "out"
    workspace = tmp_path / "changed"
    shutil.copytree(CLAUDE.fixture(name) / "workspace", workspace)
    for f in workspace.glob("*.txt"):
        f.write_text(f.read_text() + "changed on disk\n")
    replayer(
        "run",
        str(CLAUDE.fixture(name) / "session.jsonl"),
        "-n",
        str(after_step),
        "-w",
        str(workspace),
        "-o",
        str(out),
        check=True,
    )
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    cont = orjson.loads((out / "continuation.json").read_bytes())
    home, ws, socks = tmp_path / "home", tmp_path / "ws", tmp_path / "sock"
    shutil.copytree(out / "native" / "home", home)
    shutil.copytree(out / "state" / "workspace", ws)
    socks.mkdir()
    _, log = run_claude(
        prompts=["nonce-7f3a"],
        workspace=ws,
        home=home,
        sockets=socks,
        script=Script(turns=[]),
        session_id=cont["session_id"],
        resume_first=True,
    )
    first = next(r for r in log if r["main_thread"])
    sent = wire.normalize_request(first["body"]["messages"])
    assert sent == envelope.resume_request(expected, "nonce-7f3a", cont["prefix_last_was_string"])
    # the fresh observation of a changed file is what the CLI sent
    if name == "continued":
        assert sent[2]["content"][0]["content"] == "one\nchanged on disk"
