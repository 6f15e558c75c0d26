"""A CLI that sends no model request when one is due says why in one line, and `-v` prints its whole output.
OpenCode's `run` prints "Unexpected server error" for what its server fails on (a model it lacks): the cause
is in its log, which the rerun has on stderr (errors only)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import OPENCODE, replayer

pytestmark = [pytest.mark.docker, pytest.mark.agent]

BROKEN = 'OPENCODE_CONFIG_CONTENT={"model": "nope/nope"}'
"""A model no provider has: the real CLI exits at once with "Unexpected server error" on stdout; its log
says "Model not found"."""


@pytest.mark.parametrize("verbose", [False, True])
def test_a_silent_cli_is_said_with_where_its_output_is(tmp_path: Path, verbose: bool) -> None:
    fixture = OPENCODE.fixture("tools")
    args = ["run", str(fixture / "export.json"), "-n", "1", "-w", str(fixture / "workspace")]
    args += ["-o", str(tmp_path / "out"), "--agent-env", BROKEN]
    proc = replayer(*args, *(["-v"] if verbose else []))
    assert proc.returncode == 6, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("replayer: sandbox: opencode sent no model request for step 1 (it exited): ")
    assert "(it exited): its log: 'ProviderModelNotFoundError: Model not found: nope/nope." in line
    assert line.endswith("(its whole output: -v)")
    if verbose:
        assert "opencode sent no model request for step 1; its stdout (" in proc.stderr
        assert "Unexpected server error" in proc.stderr
    else:
        assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
