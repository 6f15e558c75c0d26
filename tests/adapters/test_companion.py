"""The step rerunner's companion (adapters/companion.py) in a real sandbox: started at the first step asked
for, so a replay that reruns no call (every call of its prefix kept historical, or none) starts none and
does not wait out the stop grace of one it never spoke to (a Pi replay of a field file whose calls are all
an extension's: 10 s of its 12)."""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import pytest

from replayer.adapters.companion import StepRerunner
from replayer.floor.pins import load_pins
from replayer.floor.trajectory import Observation, Step
from replayer.pipeline.engine import load
from replayer.sandboxes.docker import DockerSandbox
from tests.conftest import PI

pytestmark = pytest.mark.docker

MARK = "companion-that-never-answers"


class Silent(StepRerunner):
    """A companion that starts and never listens (any step asked for fails to connect)."""

    name = "silent"
    start_timeout_s = 0.5

    def request(self, step: Step) -> tuple[dict[str, Any], float]:
        return {"step": step.index}, 1.0

    def observations(self, step: Step, answer: dict[str, Any]) -> dict[str, Observation]:
        return {}


def _running(box: DockerSandbox) -> bool:
    listed = box.exec(["sh", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"], workdir="/", timeout_s=30)
    return MARK in listed.stdout.decode()


def test_a_companion_starts_at_the_first_step_asked_for(tmp_path: Path, docker_client) -> None:
    _, traj = load(PI.fixture("tools") / "session.jsonl")
    assert traj.cwd
    work = tmp_path / "work"
    work.mkdir()
    argv = ["sh", "-c", f"sleep 600; : {MARK}"]
    image = load_pins().base_image.tag
    binds: dict[str, tuple[Path, bool]] = {traj.cwd: (work, False)}
    with DockerSandbox.start(
        docker_client, image, binds=binds, workdir="/", run_id=f"companion-{uuid.uuid4().hex[:8]}"
    ) as box:
        rerunner = Silent(traj, box, work, argv, {})
        assert not _running(box), "no step asked for yet: no companion"
        rerunner.close()  # nothing to stop
        assert not _running(box)
        asked = Silent(traj, box, work, argv, {})
        with pytest.raises(Exception, match="the silent companion did not start"):
            asked.run(traj.steps[0].calls[0])
        assert _running(box), "the first step asked for started it"
        asked.companion.handle.signal(signal.SIGKILL)  # it never listens: no EOF would stop it
        asked.close()
        assert not _running(box)
