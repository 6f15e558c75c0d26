"""An older session whose model the pinned release has retired runs under the pinned CLI.

Each OpenCode release bundles a models.dev catalogue and deletes the models it marks `deprecated`, one the
config declares included: the pinned CLI on a 1.14-era session of OpenCode Zen's `opencode/grok-code` (marked
deprecated from 1.14 on) printed only "Unexpected server error" (its log: "Model not found") and sent no
model request, so the rerun failed at step 1 and the continuation could not start."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from replayer.floor.pins import pinned_version
from tests.conftest import ROOT, replayer

pytestmark = [pytest.mark.docker, pytest.mark.agent]

PROBE = ROOT / "tests" / "fixtures" / "opencode" / "versions" / "1.14.41" / "probe"
RETIRED = {"providerID": "opencode", "modelID": "grok-code"}


def _on_retired_model(dest: Path) -> Path:
    """The 1.14.41 recording as a session of that model (the model names alone changed)."""
    document = orjson.loads((PROBE / "export.json").read_bytes())
    for message in document["messages"]:
        info = message["info"]
        info.update(RETIRED) if info["role"] == "assistant" else info["model"].update(RETIRED)
    dest.write_bytes(orjson.dumps(document))
    return dest


def test_the_pinned_cli_reruns_and_continues_a_session_of_a_model_it_retired(tmp_path: Path) -> None:
    pinned = pinned_version("opencode")
    out = tmp_path / "out"
    session = _on_retired_model(tmp_path / "export.json")
    args = ["run", str(session), "-n", "1", "-w", str(PROBE / "workspace"), "-o", str(out)]
    args += ["--agent-version", pinned, "--continue", "--upstream", "mock", "--json"]
    proc = replayer(*args)
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["version"]["version"] == pinned
    read = next(d for d in result["divergences"] if d["tool"] == "read")
    assert read["status"] == "exact", read
    cont = result["continuation"]
    assert (cont["gate"], cont["agent_status"]) == ("accepted", "completed"), cont
