"""Settings (replayer.toml, the user's config.toml, REPLAYER_* variables): precedence flag > environment >
project file > user file > default, merged setting by setting; an unknown key or a bad value is a one-line
error (exit 13). Without Docker."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest

from replayer.floor import settings, trust
from replayer.floor.bundles import INSTALLED
from replayer.floor.errors import SettingsError
from replayer.floor.limits import SandboxLimits
from tests.conftest import CLAUDE, ROOT, replayer

SESSION = CLAUDE.fixture("write_edit") / "session.jsonl"
WORKSPACE = CLAUDE.fixture("write_edit") / "workspace"


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.fixture
def places(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A project folder (with a subfolder to run from) and an environment whose user file is ours."""
    (tmp_path / "project" / "sub" / "deeper").mkdir(parents=True)
    return tmp_path / "project" / "sub" / "deeper", {"XDG_CONFIG_HOME": str(tmp_path / "config")}


def test_each_layer_sets_what_the_higher_ones_leave(
    places: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    cwd, env = places
    _write(  # the user trusts the project's folder: its file may set every setting
        tmp_path / "config" / "replayer" / "config.toml",
        f'trusted = ["{tmp_path / "project"}"]\n'
        'upstream = "https://user.example"\nimage = "user-image"\nworkers = 3\nbundles = "cache"\n'
        '[limits]\nmemory = "1g"\ncpus = 1.5\n',
    )
    _write(
        tmp_path / "project" / "replayer.toml",
        'upstream = "https://project.example"\nupstream_key_env = "PROJECT_KEY"\n[limits]\nmemory = "2g"\n',
    )
    trust.add(tmp_path / "project", env)  # its content pinned
    env |= {"REPLAYER_UPSTREAM_KEY_ENV": "ENV_KEY", "REPLAYER_LIMITS": "pids=64", "REPLAYER_WORKERS": ""}
    found = settings.load(cwd, env)
    assert found.upstream == "https://project.example"  # project over user
    assert found.upstream_key_env == "ENV_KEY"  # environment over project
    assert (found.image, found.workers) == ("user-image", 3)  # only the user's file says; "" is unset
    assert found.bundles == tmp_path / "config" / "replayer" / "cache"  # beside the file that names it
    assert found.sandbox_limits() == SandboxLimits(memory=f"{2 << 30}b", cpus=1.5, pids=64)
    # a flag's keys replace those keys only
    assert found.sandbox_limits("pids=8,disk=1g") == SandboxLimits(
        memory=f"{2 << 30}b", cpus=1.5, pids=8, disk_bytes=1 << 30
    )


def test_nothing_set_is_the_defaults(places: tuple[Path, dict[str, str]]) -> None:
    cwd, env = places
    found = settings.load(cwd, env)
    assert found == settings.Settings() and found.sandbox_limits() == SandboxLimits()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('uptream = "x"', "unknown setting 'uptream' (known: upstream, upstream_key_env, image, limits"),
        ('[limits]\nmemroy = "1g"', "limits: unknown limit or bad value 'memroy=1g'"),
        ("workers = 0", "workers: Input should be greater than or equal to 1 (got 0)"),
        ("upstream = [", "not a readable TOML file"),
    ],
)
def test_a_project_file_mistake_is_one_line_naming_the_file(
    places: tuple[Path, dict[str, str]], tmp_path: Path, text: str, message: str
) -> None:
    cwd, env = places
    path = _write(tmp_path / "project" / "replayer.toml", text)
    with pytest.raises(SettingsError) as caught:
        settings.load(cwd, env)
    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)
    assert caught.value.exit_code == 13


def _compare_without_key(env: dict[str, str], *args: str) -> tuple[int, str]:
    """compare up to its refusal for the missing key (no container starts)."""
    base = [
        "compare",
        str(SESSION),
        "-n",
        "3",
        "-w",
        str(WORKSPACE),
        "-o",
        "/nonexistent/o",
        "--variant",
        "a=",
    ]
    proc = replayer(*base, *args, env={k: v for k, v in os.environ.items() if not k.endswith("_KEY")} | env)
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.returncode, proc.stderr.strip()


def test_the_command_takes_upstream_and_key_variable_from_the_settings(tmp_path: Path) -> None:
    config = _write(
        tmp_path / "config" / "replayer" / "config.toml",
        'upstream = "http://127.0.0.1:9"\nupstream_key_env = "FILE_KEY"\n',
    )
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config")}
    # without the settings: no upstream at all
    assert _compare_without_key({})[0] == 2  # a usage error naming --upstream mock
    code, err = _compare_without_key(env)
    assert (code, err) == (
        4,
        "replayer: plan_refused: the upstream key variable FILE_KEY is not set on the host",
    )
    code, err = _compare_without_key(env | {"REPLAYER_UPSTREAM_KEY_ENV": "ENV_KEY"})
    assert code == 4 and "ENV_KEY is not set" in err
    code, err = _compare_without_key(
        env | {"REPLAYER_UPSTREAM_KEY_ENV": "ENV_KEY"}, "--upstream-key-env", "FLAG_KEY"
    )
    assert code == 4 and "FLAG_KEY is not set" in err
    assert config.read_text().startswith("upstream")  # settings files are only read


def test_the_bundle_cache_setting_is_where_bundles_are_listed(tmp_path: Path) -> None:
    _write(tmp_path / "cache" / "codex-0.1.0" / INSTALLED, "@openai/codex@0.1.0\n")
    _write(tmp_path / "config" / "replayer" / "config.toml", 'bundles = "../../cache"\n')
    env = {"XDG_CONFIG_HOME": str(tmp_path / "config"), "REPLAYER_BUNDLES": ""}
    proc = replayer("bundles", "list", "--json", env=env, check=True)
    assert [(b["agent"], b["version"]) for b in orjson.loads(proc.stdout)] == [("codex", "0.1.0")]


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"REPLAYER_WORKERS": "many"}, "replayer: settings: the environment (REPLAYER_*): workers: "),
        ({"REPLAYER_LIMITS": "ram=1g"}, "replayer: settings: REPLAYER_LIMITS: unknown limit or bad value"),
    ],
)
def test_a_bad_variable_is_one_line_exit_13(env: dict[str, str], message: str) -> None:
    code, err = _compare_without_key(env)
    assert code == 13 and err.startswith(message), err


def test_every_setting_and_variable_is_documented() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text()
    table = doc[doc.index("## Settings") : doc.index("## One vocabulary")]
    for name in settings.Settings.model_fields:
        assert f"| `{name}`" in table or f"| `[{name}]`" in table, name
    for var in settings._ENV:
        assert f"`{var}`" in table, var
