"""`replayer setup` refuses what it cannot do here with one line and exit 12, before running a script
where it can tell (and with the script's last line where it cannot). The engine it would have to start is
made unreachable with DOCKER_HOST (the machine's own engine stays untouched); tests/replayer/test_wheel.py runs it
on this ready machine, where it reuses everything."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, replayer

NOWHERE = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}


def _one_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.stdout == "" or proc.stdout.startswith("engine"), proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="needs root and setpriv")
def test_not_root_is_told_to_run_it_as_root() -> None:
    proc = subprocess.run(
        ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        + [sys.executable, "-B", "-m", "replayer.cli", "setup", "--no-bundles"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, **NOWHERE, "HOME": "/nonexistent"},
    )
    assert proc.returncode == 12
    assert _one_line(proc) == (
        "replayer: setup: starting the Docker engine needs root: run `sudo replayer setup` "
        "(or have an administrator run it)"
    )


@pytest.mark.skipif(os.geteuid() != 0, reason="the root check comes first")
def test_no_docker_and_no_apt_get_names_what_to_install(tmp_path: Path) -> None:
    # a PATH where neither dockerd nor apt-get is found
    proc = replayer("setup", env={**NOWHERE, "PATH": str(tmp_path)})
    assert proc.returncode == 12
    assert _one_line(proc) == (
        "replayer: setup: starting the Docker engine needs docker.io, and there is no apt-get to install "
        "it: install it with this system's package manager, then run `replayer setup` again"
    )


def test_an_unknown_agent_is_refused_before_anything_runs() -> None:
    proc = replayer("setup", "--agents", "claude_code,nosuch", env=NOWHERE)
    assert proc.returncode == 2  # the same code in every verb (test_first_contact)
    assert _one_line(proc).startswith("replayer: usage: no agent 'nosuch' (known: claude_code, codex, ")


def test_agents_and_no_bundles_exclude_each_other() -> None:
    proc = replayer("setup", "--agents", "codex", "--no-bundles")
    assert proc.returncode == 2
    assert "give --agents or --no-bundles, not both" in proc.stderr


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("debootstrap") is None, reason="needs root and debootstrap"
)
def test_a_failed_script_says_its_last_line_and_leaves_nothing() -> None:
    from replayer.verbs.setup import SetupError, _run_script

    before = sorted(Path("/var/tmp").glob("replayer-rootfs.*"))
    with pytest.raises(SetupError) as refused:
        args = ["sandbox-replayer/setup-test:never", "nosuchsuite", "http://deb.debian.org/debian", "bash"]
        _run_script("build_base_image.sh", args, "building the base image")
    assert str(refused.value) == (
        "building the base image failed: E: No such script: /usr/share/debootstrap/scripts/nosuchsuite"
    )
    assert sorted(Path("/var/tmp").glob("replayer-rootfs.*")) == before
