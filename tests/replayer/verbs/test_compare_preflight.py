"""compare's checks before any container ask the version that continues, as `run` does: a mini-swe-agent 1.x
file continues by its own 1.x release, which the pinned 2.x would refuse. No Docker."""

from __future__ import annotations

from pathlib import Path

import pytest

from replayer.floor.errors import PlanRefused
from replayer.floor.pins import pinned_version
from replayer.floor.requests import CompareRequest, ContinueRequest, Variant, VariantSpec
from replayer.pipeline.engine import load
from replayer.verbs.compare import _preflight
from tests.conftest import MINI

V1 = MINI.fixture("v1")


def _request(tmp_path: Path) -> CompareRequest:
    return CompareRequest(
        trajectory=V1 / "trajectory.traj.json",
        after_step=2,
        workspace=V1 / "workspace",
        out=tmp_path / "cmp",
        variants=[Variant(name="a", spec=VariantSpec())],
        defaults=ContinueRequest(upstream="mock"),
    )


def test_a_1x_file_is_checked_by_the_release_that_continues_it(tmp_path: Path) -> None:
    adapter, traj = load(V1 / "trajectory.traj.json", None, None, None)
    assert traj.agent_version and traj.agent_version.startswith("1.")
    _preflight(_request(tmp_path), adapter, traj, traj.agent_version)
    with pytest.raises(PlanRefused, match="variant a: "):
        _preflight(_request(tmp_path), adapter, traj, pinned_version("mini_swe_agent"))
