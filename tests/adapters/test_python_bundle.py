"""The base interpreter a Python agent's bundle is mounted with (adapters/python_bundle.py): read from the
pyvenv.cfg uv wrote, refused in one line when it is the host system's (its /usr would hide the sandbox's)."""

from __future__ import annotations

from pathlib import Path

import pytest

from replayer.adapters.python_bundle import python_home, venv_binds
from replayer.floor.errors import SandboxError


def _bundle(tmp_path: Path, home: str) -> Path:
    bundle = tmp_path / "mini_swe_agent-2.4.6"
    bundle.mkdir()
    (bundle / "pyvenv.cfg").write_text(f"home = {home}\nimplementation = CPython\nuv = 0.13.9\n")
    return bundle


def test_a_python_of_its_own_prefix_is_mounted_whole(tmp_path: Path) -> None:
    bundle = _bundle(tmp_path, "/root/.pyenv/versions/3.11.7/bin")
    binds = venv_binds(bundle, "/opt/agent", ("/opt/companion", tmp_path), ("/work", tmp_path))
    assert binds["/root/.pyenv/versions/3.11.7"] == (Path("/root/.pyenv/versions/3.11.7"), True)


@pytest.mark.parametrize("home", ["/usr/bin", "/bin"])
def test_the_host_systems_python_is_refused_with_what_to_do(tmp_path: Path, home: str) -> None:
    with pytest.raises(SandboxError) as refused:
        python_home(_bundle(tmp_path, home))
    message = str(refused.value)
    assert "\n" not in message and f"({home})" in message
    assert "bundles rm mini_swe_agent@2.4.6" in message


def test_a_bundle_not_installed_says_how_to_install_it(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="bundles add mini_swe_agent@2.4.6"):
        python_home(tmp_path / "mini_swe_agent-2.4.6")
