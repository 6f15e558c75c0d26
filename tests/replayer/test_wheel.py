"""Installed, not cloned: the wheel built from this checkout carries everything a run needs. It is
installed into a fresh virtual environment outside the checkout and run from a folder outside it:
`replayer --version`, `replayer setup` (which finds this machine ready and reuses all of it), a
replay of a recorded Claude Code session, and the export of a session of a version that is not the pin,
with that version's own tools (captured from the probe recordings the wheel carries)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import orjson
import pytest

from replayer.floor.pins import load_pins
from tests.conftest import CLAUDE, MINI, ROOT

UV = Path(sys.executable).with_name("uv")
"""The development environment's uv (pyproject's dev extra): it builds the wheel (the same members as `pip
wheel`) and installs its dependencies in well under a second where pip took about fifteen."""

pytestmark = [pytest.mark.docker, pytest.mark.agent]

FOLDERS = {
    "replayer": "replayer",
    "adapters": "replayer/adapters",
    "bridges": "replayer/bridges",
    "sandboxes": "replayer/sandboxes",
}
"""Each package folder of the checkout -> where its files are in the wheel (setup.py's one namespace)."""


def _package_files() -> list[str]:
    """Every file of the packages in the checkout (modules and data), as wheel member names."""
    return sorted(
        f"{inside}/{path.relative_to(ROOT / top)}"
        for top, inside in FOLDERS.items()
        for path in (ROOT / top).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    )


def _checkout_path(member: str) -> Path:
    for top, inside in sorted(FOLDERS.items(), key=lambda kv: -len(kv[1])):
        if member.startswith(inside + "/"):
            return ROOT / top / member[len(inside) + 1 :]
    raise AssertionError(member)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # built from a copy: an in-tree build leaves build/ and *.egg-info in the checkout
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "setup.py", "README.md", "docs", "tests/fixtures", *FOLDERS):
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__", "field")
            shutil.copytree(ROOT / name, src / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = tmp_path_factory.mktemp("dist")
    subprocess.run([str(UV), "build", "-q", "--wheel", "--no-config", "-o", str(dist), str(src)], check=True)
    return next(dist.glob("sandbox_replayer-*.whl"))


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment holding the wheel and its dependencies (from PyPI, through uv's cache)."""
    root = tmp_path_factory.mktemp("venv")
    subprocess.run([str(UV), "venv", "-q", "--no-config", "--python", sys.executable, str(root)], check=True)
    subprocess.run(
        [
            str(UV),
            "pip",
            "install",
            "-q",
            "--no-config",
            "--python",
            str(root / "bin" / "python"),
            str(wheel),
        ],
        check=True,
    )
    return root


def _outside(venv: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The installed console script, from a folder outside the checkout, with nothing pointing into it."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(venv / "bin" / "replayer"), *args], capture_output=True, text=True, cwd=cwd, env=env
    )


def test_the_wheel_holds_every_file_of_the_packages(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        members = {info.filename: info for info in zf.infolist()}
    expected = _package_files()
    assert "replayer/sandboxes/images/pins.toml" in expected
    tops = {name.split("/")[0] for name in members}
    assert {t for t in tops if not t.endswith((".dist-info", ".data"))} == {"replayer"}, tops  # one namespace
    assert any("/companion/" in name for name in expected)
    assert [name for name in expected if name not in members] == []
    from replayer.adapters import REGISTRY, adapter_class

    for agent in REGISTRY:  # the probe recordings verify and the export's tool capture start from
        cls = adapter_class(agent)
        if cls.probe_native is not None:
            probe = f"replayer/data/probes/{cls.probe_recordings[0].replace('*', '')}"
            assert any(n.startswith(probe) and n.endswith("/meta.json") for n in members), agent
    for name in expected:  # an executable (the companion `docker` shim, the setup scripts) stays one
        mode = members[name].external_attr >> 16
        assert bool(mode & 0o111) == os.access(_checkout_path(name), os.X_OK), name


def test_the_wheel_holds_the_docs_the_help_names(wheel: Path, venv: Path, tmp_path: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        members = set(zf.namelist())
    data = "sandbox_replayer-0.1.0.data/data/share/sandbox-replayer/docs"
    docs = sorted(p.relative_to(ROOT / "docs") for p in (ROOT / "docs").rglob("*.md"))
    assert docs and [d for d in docs if f"{data}/{d}" not in members] == []
    # the installed help says where they are, and they are there
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    shown = subprocess.run(
        [str(venv / "bin" / "replayer"), "--help"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**env, "COLUMNS": "1000"},
        check=True,
    ).stdout
    where = venv / "share" / "sandbox-replayer" / "docs"
    assert f"Docs (docs/NAME.md in this help): {where}/NAME.md." in shown
    assert (where / "cli.md").read_bytes() == (ROOT / "docs" / "cli.md").read_bytes()


@pytest.mark.agent
def test_installed_replayer_runs_from_outside_the_checkout(venv: Path, tmp_path: Path) -> None:
    located = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import replayer; from replayer import adapters; print(replayer.__file__, adapters.__file__)",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        check=True,
    ).stdout.split()
    assert all(Path(p).is_relative_to(venv) for p in located), located
    generic = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import adapters"], capture_output=True, text=True, cwd=tmp_path
    )
    assert "No module named 'adapters'" in generic.stderr  # nothing generic at the top of site-packages

    version = _outside(venv, tmp_path, "--version")
    assert version.returncode == 0, version.stderr
    pins = load_pins()
    for agent, pin in pins.agents.items():
        assert f"  {agent} {pin.version} " in version.stdout
    assert pins.base_image.tag in version.stdout

    setup = _outside(venv, tmp_path, "setup", "--json")
    assert setup.returncode == 0, setup.stderr
    report = orjson.loads(setup.stdout)
    assert report["engine"] == "running"
    image = report["image"]
    assert (image["tag"], image["status"], image["seconds"]) == (pins.base_image.tag, "present", None)
    assert image["bytes"] > 0  # how big it is, as the engine says
    wanted = [(a, v) for a, pin in pins.agents.items() for v in (pin.version, *pin.also)]
    assert [(b["agent"], b["version"]) for b in report["bundles"]] == wanted
    assert {b["status"] for b in report["bundles"]} == {"present"}

    _replays(venv, tmp_path, CLAUDE.fixture("single") / "session.jsonl", "claude_code")


@pytest.mark.agent
def test_an_agent_with_a_companion_replays_from_the_installed_package(venv: Path, tmp_path: Path) -> None:
    """mini-swe-agent's rerun mounts its companion (a driver and a `docker` shim) from the package."""
    _replays(venv, tmp_path, MINI.fixture("toolcall") / "trajectory.traj.json", "mini_swe_agent")


def _replays(venv: Path, cwd: Path, trajectory: Path, agent: str) -> None:
    out = cwd / "out"
    run = _outside(
        venv,
        cwd,
        *("run", str(trajectory), "--after-step", "1"),
        *("--workspace", str(trajectory.parent / "workspace"), "--out", str(out), "--json"),
    )
    assert run.returncode == 0, run.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["after_step"] == 1
    assert result["agent"] == agent
    assert [d["status"] for d in result["divergences"]] == ["exact"]
    assert all((out / name).is_file() for name in result["native_files"])


@pytest.mark.agent
def test_the_wheel_exports_an_older_versions_session_with_that_versions_tools(
    venv: Path, tmp_path: Path
) -> None:
    """A real Claude Code 2.1.50 session (the oldest non-pinned version of the field files whose bundle the
    machine holds): its record carries 2.1.50's own definitions, captured by 2.1.50's CLI from the probe
    recordings in the wheel, not the pinned version's."""
    from replayer import installer
    from replayer.adapters import tool_definitions
    from replayer.floor.pins import pinned_version

    assert pinned_version("claude_code") != "2.1.50"
    installer.ensure("claude_code", "2.1.50")  # the project's own install (a no-op when it is there)
    cache = tool_definitions.cache_path("claude_code", "2.1.50")
    cache.unlink(missing_ok=True)  # captured now, by the installed wheel
    session = ROOT / "tests" / "fixtures" / "field" / "claude_code" / "erk-2.1.50.jsonl"
    prepared = _outside(venv, tmp_path, "prepare", str(session), "-n", "1", "-o", str(tmp_path / "prep"))
    assert prepared.returncode == 0, prepared.stderr
    out = tmp_path / "records.jsonl"
    export = _outside(venv, tmp_path, "export", str(tmp_path / "prep"), "-o", str(out), "--json")
    assert export.returncode == 0, export.stderr
    record = orjson.loads(out.read_bytes())
    tools = record["metadata"]["tools"]
    assert (tools["version"], tools["source"]) == ("2.1.50", "captured"), tools
    assert orjson.loads(export.stdout)["pinned_tools"] == 0
    captured = tool_definitions.CapturedTools.model_validate_json(cache.read_bytes())
    assert captured.version == "2.1.50" and captured.probe.startswith("claude_code/")
    pinned = orjson.loads(
        (
            ROOT / "adapters" / "claude_code" / "data" / pinned_version("claude_code") / "tools.json"
        ).read_bytes()
    )
    assert captured.tools != pinned
    assert {t["function"]["name"] for t in record["tools"]} == {t["name"] for t in captured.tools}
