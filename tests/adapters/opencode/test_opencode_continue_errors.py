"""A failed OpenCode continuation says why: `opencode run` prints only "Unexpected server error" for what its
server fails on (a model no enabled provider has), the cause is in its log; the continuation runs with the
rerun's `--print-logs --log-level ERROR` (adapters/opencode/rerun.py, ERRORS_ON_STDERR), so the failure is
quoted from it. A compare variant breaks only the continuation (its agent_env is the continuation's). The
compare starts at the prompt alone (-n 0): no step is rerun before the variant continues."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replayer.pipeline.continue_run import continuation_error
from tests.conftest import OPENCODE, replayer

pytestmark = [pytest.mark.docker, pytest.mark.agent]

NO_PROVIDER = 'broken=agent_env.OPENCODE_CONFIG_CONTENT={"enabled_providers": ["nothing"]}'
"""The continuation's config with no provider enabled: the real CLI fails at once, its log says "Model not
found"; reruns (run before the variants fork) would be untouched."""


def test_a_failed_continuation_quotes_the_error_the_cli_logged(tmp_path: Path) -> None:
    fixture = OPENCODE.fixture("tools")
    out = tmp_path / "cmp"
    args = [
        "compare",
        str(fixture / "export.json"),
        "-n",
        "0",
        "-w",
        str(fixture / "workspace"),
        "-o",
        str(out),
    ]
    proc = replayer(*args, "--upstream", "mock", "-j", "1", "--variant", NO_PROVIDER, "--json")
    assert proc.returncode == 0, proc.stderr
    [run] = orjson.loads((out / "compare.json").read_bytes())["runs"]
    cont = run["continuation"]
    assert cont["agent_status"] == "agent_error", cont
    from replayer.floor.results import ContinuationResult

    error = continuation_error(ContinuationResult.model_validate(cont), out / run["dir"])
    assert error is not None
    assert "the continued agent failed (exit 1): 'ProviderModelNotFoundError: Model not found: " in str(error)
    assert "Unexpected server error" not in str(error)
