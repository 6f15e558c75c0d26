"""A real container of the base image, shared by the sandbox tests: the test's folder mounted at /testbed,
with the limits `box_limits` gives (a module overrides it for tighter ones)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from replayer.floor.limits import SandboxLimits
from replayer.floor.pins import load_pins
from replayer.sandboxes.docker import DockerSandbox


@pytest.fixture
def box_limits() -> SandboxLimits:
    return SandboxLimits()


@pytest.fixture
def box(docker_client, tmp_path: Path, box_limits: SandboxLimits) -> Iterator[DockerSandbox]:
    with DockerSandbox.start(
        docker_client,
        load_pins().base_image.tag,
        binds={"/testbed": (tmp_path, False)},
        workdir="/testbed",
        run_id=f"test-{uuid.uuid4().hex[:8]}",
        limits=box_limits,
    ) as started:
        yield started
