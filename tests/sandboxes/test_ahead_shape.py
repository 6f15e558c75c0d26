"""Which run a container started ahead can serve (sandboxes/ahead.py `_shape`), without Docker: every part of
the spec but the run id and the host folders of the writable mounts (the run's state) must match."""

from __future__ import annotations

from pathlib import Path

from replayer.floor.limits import SandboxLimits
from replayer.sandboxes.ahead import _shape
from replayer.sandboxes.base import SandboxSpec


def _spec(root: Path, run: str, **changes: object) -> SandboxSpec:
    for name in ("workspace", "home"):
        (root / run / name).mkdir(parents=True, exist_ok=True)
    (root / "bundle").mkdir(exist_ok=True)
    fields: dict[str, object] = {
        "image": "base:1",
        "binds": {
            "/testbed": (root / run / "workspace", False),
            "/home/replay": (root / run / "home", False),
            "/opt/agent": (root / "bundle", True),
        },
        "workdir": "/testbed",
        "run_id": run,
        "labels": {"sandbox-replayer.batch": "b1"},
    }
    return SandboxSpec.model_validate({**fields, **changes})


def test_two_runs_differing_only_in_their_state_share_a_shape(tmp_path: Path) -> None:
    assert _shape(_spec(tmp_path, "a")) == _shape(_spec(tmp_path, "b")) is not None


def test_anything_else_that_differs_makes_another_shape(tmp_path: Path) -> None:
    base = _shape(_spec(tmp_path, "a"))
    binds = _spec(tmp_path, "b").binds
    others = [
        {"image": "base:2"},
        {"workdir": "/other"},
        {"limits": SandboxLimits(pids=512)},
        {"labels": {"sandbox-replayer.batch": "b2"}},
        {"command": ["bash"]},
        {"binds": {**binds, "/opt/agent": (tmp_path / "other-bundle", True)}},  # a read-only mount's source
        {"binds": {**binds, "/opt/agent": (tmp_path / "bundle", False)}},  # writable now
        {"binds": {k: v for k, v in binds.items() if k != "/home/replay"}},
    ]
    for changes in others:
        assert _shape(_spec(tmp_path, "b", **changes)) not in (base, None), changes


def test_no_spare_serves_a_file_mount_or_a_spec_that_propagates(tmp_path: Path) -> None:
    (tmp_path / "socket-file").write_text("")
    binds = {**_spec(tmp_path, "a").binds, "/run/x": (tmp_path / "socket-file", False)}
    assert _shape(_spec(tmp_path, "a", binds=binds)) is None
    assert _shape(_spec(tmp_path, "a", propagated=frozenset({"/testbed"}))) is None
