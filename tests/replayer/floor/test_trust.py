"""Trust boundaries of settings and bundles (issue 32, attacks 1 and 2): a replayer.toml in a folder the user
has not trusted sets only `workers` and tighter limits (else every command refuses, exit 13); `replayer trust`
and the user's `trusted` list lift that; a bundle runs on the host only if it is owned by root or the user,
writable by nobody else, and every file is as its digest manifest says (else exit 10, nothing of it runs).
Real files and the real CLI; OpenCode's `opencode import` (in a sandbox of its own) is what runs of a bundle
outside a run's sandbox. The bundle tests that reach that import need Docker."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import stat
import subprocess
import sys
import tomllib
from pathlib import Path

import orjson
import pytest

from replayer.floor import settings
from replayer.floor import trust as trusting
from replayer.floor.bundletrust import MANIFEST, STAMP
from replayer.floor.errors import SettingsError
from replayer.floor.limits import SandboxLimits
from replayer.floor.pins import load_pins, pinned_version
from tests.conftest import CLAUDE, OPENCODE, ROOT

EXPORT = OPENCODE.fixture("tools") / "export.json"
SESSION = CLAUDE.fixture("write_edit") / "session.jsonl"
WORKSPACE = CLAUDE.fixture("write_edit") / "workspace"
OPENCODE_AT = f"opencode@{pinned_version('opencode')}"
OPENCODE_BIN = str(load_pins().agents["opencode"].bin)
"""Where the pinned version's binary is in its bundle."""


def _cli(*args: str, cwd: Path, config: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """The real CLI run from `cwd`, with `config` as the user's XDG_CONFIG_HOME."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(config), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "replayer.cli", *args], capture_output=True, text=True, env=full, cwd=cwd
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stdout, proc.stderr.strip()


RAN = "the stand-in ran"
"""What the stand-in binary says before it fails: the import's one-line error then carries it."""


def _fake_opencode(root: Path) -> Path:
    """A bundle folder of the pinned OpenCode under `root` whose binary is a script that says RAN, leaves
    `root`/on-the-host where it runs (only the host has that folder), and fails."""
    bundle = root / f"opencode-{pinned_version('opencode')}"
    binary = bundle / OPENCODE_BIN
    binary.parent.mkdir(parents=True)
    binary.write_text(f"#!/bin/sh\necho {RAN} >&2\ntouch {root / 'on-the-host'} 2>/dev/null\nexit 1\n")
    binary.chmod(0o755)
    (bundle / ".installed").write_text("opencode-ai@planted\n")
    return bundle


@pytest.fixture
def planted(tmp_path: Path) -> Path:
    """A downloaded folder: an OpenCode export and a replayer.toml (written by each test)."""
    folder = tmp_path / "downloaded"
    folder.mkdir()
    shutil.copy(EXPORT, folder / "export.json")
    return folder


def test_a_planted_folder_cannot_choose_the_bundle_that_runs(planted: Path, tmp_path: Path) -> None:
    _fake_opencode(planted / "evil")
    (planted / "replayer.toml").write_text('bundles = "evil"\n')
    prepare = ("prepare", "export.json", "-n", "1", "-o", str(tmp_path / "out"))
    env = {"REPLAYER_BUNDLES": ""}  # the suite's own bundle cache setting would hide the planted one
    code, _, err = _cli(*prepare, cwd=planted, config=tmp_path / "config", env=env)
    assert code == 13 and len(err.splitlines()) == 1, err
    assert err.startswith(f"replayer: settings: {planted / 'replayer.toml'}: sets 'bundles'"), err
    assert f"replayer trust {planted}" in err
    # trusted, the folder names the bundle cache; the planted bundle has no digests: still nothing runs
    assert _cli("trust", str(planted), cwd=tmp_path, config=tmp_path / "config")[0] == 0
    code, _, err = _cli(*prepare, cwd=planted, config=tmp_path / "config", env=env)
    assert code == 10 and "without a digest manifest" in err and f"replayer bundles rm {OPENCODE_AT}" in err
    assert RAN not in err and not (tmp_path / "out").exists()


def test_a_planted_upstream_receives_nothing(planted: Path, tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        (planted / "replayer.toml").write_text(f'upstream = "http://127.0.0.1:{server.getsockname()[1]}"\n')
        run = (
            "run",
            str(SESSION),
            "-n",
            "3",
            "-w",
            str(WORKSPACE),
            "-o",
            str(tmp_path / "out"),
            "--continue",
        )
        code, _, err = _cli(*run, cwd=planted, config=tmp_path / "config", env={"ANTHROPIC_API_KEY": "sk-x"})
        assert code == 13 and "sets 'upstream'" in err and "your key" in err, err
        with pytest.raises(BlockingIOError):
            server.accept()  # nobody connected
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("text", "command", "named"),
    [
        ('upstream_key_env = "HOME"', ("inspect", "export.json"), "sets 'upstream_key_env'"),
        ('workspaces = "/tmp/elsewhere"', ("bundles", "list"), "sets 'workspaces'"),
        ('image = "evil:latest"', ("prepare", "export.json", "-n", "1", "-o", "out"), "sets 'image'"),
        ('verdicts = "v"', ("verify", "opencode@1.0.0", "--json"), "sets 'verdicts'"),
        ('npm_registry = "http://127.0.0.1:9"', ("bundles", "list"), "sets 'npm_registry'"),
        ('pypi_index = "http://127.0.0.1:9/simple"', ("bundles", "list"), "sets 'pypi_index'"),
        ('[limits]\ndisk = "1000g"', ("view", "export.json"), "limits: disk 1000g is looser"),
        ('uptream = "x"', ("prepare", "export.json", "-n", "1", "-o", "out"), "unknown setting 'uptream'"),
    ],
)
def test_every_command_refuses_what_an_untrusted_file_may_not_set(
    planted: Path, tmp_path: Path, text: str, command: tuple[str, ...], named: str
) -> None:
    (planted / "replayer.toml").write_text(text + "\n")
    code, out, err = _cli(*command, cwd=planted, config=tmp_path / "config")
    assert (code, out) == (13, "") and len(err.splitlines()) == 1, err
    assert err.startswith(f"replayer: settings: {planted / 'replayer.toml'}: {named}"), err
    assert not (planted / "out").exists()


def _layers(tmp_path: Path, project: str, user: str = "") -> tuple[Path, dict[str, str]]:
    cwd = tmp_path / "project" / "sub"
    cwd.mkdir(parents=True)
    (tmp_path / "project" / "replayer.toml").write_text(project)
    (tmp_path / "config" / "replayer").mkdir(parents=True)
    (tmp_path / "config" / "replayer" / "config.toml").write_text(user)
    return cwd, {"XDG_CONFIG_HOME": str(tmp_path / "config")}


def test_an_untrusted_file_may_set_workers_and_tighten_limits(tmp_path: Path) -> None:
    cwd, env = _layers(
        tmp_path, 'workers = 1\n[limits]\nmemory = "1g"\npids = 64\n', '[limits]\nmemory = "2g"\n'
    )
    found = settings.load(cwd, env)
    assert found.workers == 1 and found.sandbox_limits() == SandboxLimits(memory=f"{1 << 30}b", pids=64)


@pytest.mark.parametrize(
    ("project", "user", "looser"),
    [
        (
            '[limits]\nmemory = "3g"\n',
            '[limits]\nmemory = "2g"\n',
            "memory 3g is looser than the 2g in force",
        ),
        ("[limits]\ncpus = 4\n", "", "cpus 4.0 is looser than the 2.0 in force"),
        ("[limits]\nfiles = 300000\n", "", "files 300000 is looser"),
    ],
)
def test_an_untrusted_file_may_not_loosen_a_limit(
    tmp_path: Path, project: str, user: str, looser: str
) -> None:
    cwd, env = _layers(tmp_path, project, user)
    with pytest.raises(SettingsError, match=looser):
        settings.load(cwd, env)
    # trusted, the same file sets it
    trusting.add(tmp_path / "project", env)
    settings.load(cwd, env)


def test_only_the_users_file_says_what_is_trusted(tmp_path: Path) -> None:
    cwd, env = _layers(tmp_path, f'trusted = ["{tmp_path / "project"}"]\nupstream = "http://127.0.0.1:9"\n')
    with pytest.raises(SettingsError, match="sets 'trusted': only your own file"):
        settings.load(cwd, env)


def test_a_linked_project_file_in_an_untrusted_folder_is_not_followed(tmp_path: Path) -> None:
    cwd, env = _layers(tmp_path, "workers = 2\n")
    real = tmp_path / "project" / "replayer.toml"
    real.rename(tmp_path / "elsewhere.toml")
    real.symlink_to(tmp_path / "elsewhere.toml")
    with pytest.raises(SettingsError, match="a symbolic link"):
        settings.load(cwd, env)


def test_replayer_trust_adds_lists_and_removes_a_folder_keeping_the_users_file(
    planted: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    user = config / "replayer" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text('# mine\nupstream = "https://user.example"\n[limits]\nmemory = "2g"\n')
    (planted / "replayer.toml").write_text('upstream = "https://project.example"\n')
    assert _cli("inspect", "export.json", cwd=planted, config=config)[0] == 13
    # `trust` itself runs in the untrusted folder
    code, out, err = _cli("trust", ".", cwd=planted, config=config)
    assert (code, out.split()) == (0, [str(planted.resolve())]), err
    assert _cli("trust", str(planted), cwd=tmp_path, config=config)[0] == 0  # twice is once
    text = user.read_text()
    pin = {
        str(planted.resolve() / "replayer.toml"): hashlib.sha256(
            b'upstream = "https://project.example"\n'
        ).hexdigest()
    }
    assert "# mine" in text and tomllib.loads(text) == {
        "trusted": [str(planted.resolve())],
        "pinned": pin,
        "upstream": "https://user.example",
        "limits": {"memory": "2g"},
    }
    found = settings.load(planted, {"XDG_CONFIG_HOME": str(config)})
    assert found.upstream == "https://project.example"  # the trusted project file over the user's
    code, _, err = _cli("inspect", "export.json", "--json", cwd=planted, config=config)
    assert code == 0, err
    listed = orjson.loads(_cli("trust", "--list", "--json", cwd=tmp_path, config=config)[1])
    assert listed == {"user_file": str(user), "trusted": [str(planted.resolve())], "pinned": pin}
    code, _, err = _cli("trust", str(tmp_path / "missing"), cwd=tmp_path, config=config)
    assert code == 13 and "not a folder or a file" in err
    code, out, _ = _cli("trust", "--remove", str(planted), cwd=tmp_path, config=config)
    assert (code, out) == (0, "") and tomllib.loads(user.read_text())["trusted"] == []
    assert tomllib.loads(user.read_text())["pinned"] == {}
    assert _cli("inspect", "export.json", cwd=planted, config=config)[0] == 13


# bundles: a cache the (trusted) environment names, holding a stand-in for the pinned OpenCode binary


@pytest.fixture
def cache(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A bundle cache with an OpenCode bundle installed before manifests, its binary a script leaving
    says RAN; the environment naming the cache."""
    root = tmp_path / "cache"
    _fake_opencode(root)
    return root, {"REPLAYER_BUNDLES": str(root)}


def _prepare(tmp_path: Path, env: dict[str, str]) -> tuple[int, str]:
    out = tmp_path / "out"
    shutil.rmtree(out, ignore_errors=True)
    code, _, err = _cli(
        "prepare", str(EXPORT), "-n", "1", "-o", str(out), cwd=tmp_path, config=tmp_path, env=env
    )
    return code, err


@pytest.mark.docker
def test_a_bundle_runs_outside_a_runs_sandbox_only_as_its_manifest_says(
    cache: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    root, env = cache
    bundle = root / f"opencode-{pinned_version('opencode')}"
    code, err = _prepare(tmp_path, env)
    assert code == 10 and f"replayer bundles add {OPENCODE_AT}" in err and RAN not in err, err
    # the user says it is theirs: its digests are recorded, and it runs
    code, _, err = _cli("bundles", "add", OPENCODE_AT, cwd=tmp_path, config=tmp_path, env=env)
    assert code == 0 and (bundle / MANIFEST).is_file(), err
    code, err = _prepare(tmp_path, env)
    assert code == 6 and err.endswith(RAN), err  # the stand-in ran (and failed as an import)...
    assert not (root / "on-the-host").exists()  # ...in its sandbox, not on the host
    assert (bundle / STAMP).is_file()  # verified: the next process hashes only what changed since
    # tampered: the same size, other bytes, the modification time set back; nothing of it runs (the change
    # time moved, so the stamp does not vouch for it)
    binary = bundle / OPENCODE_BIN
    before = binary.stat()
    binary.write_text(binary.read_text().replace(RAN, RAN.replace("ran", "RUN")))
    os.utime(binary, ns=(before.st_atime_ns, before.st_mtime_ns))
    code, err = _prepare(tmp_path, env)
    assert code == 10 and len(err.splitlines()) == 1, err
    assert "is not what was installed" in err and f"`replayer bundles rm {OPENCODE_AT}`" in err
    assert RAN not in err and "RUN" not in err


def test_a_verified_bundle_is_not_read_again_by_the_next_process(
    cache: tuple[Path, dict[str, str]], tmp_path: Path
) -> None:
    """Each OpenCode run checks its bundle (hundreds of MB) before it runs anything from it on the host: a
    process after the first reads the manifest and the stamp, and hashes only what changed since (the bytes
    each process read while it checked, from its /proc/self/io)."""
    root, env = cache
    bundle = root / f"opencode-{pinned_version('opencode')}"
    (bundle / "node_modules").mkdir(exist_ok=True)
    (bundle / "node_modules" / "big.bin").write_bytes(os.urandom(8 << 20))
    assert _cli("bundles", "add", OPENCODE_AT, cwd=tmp_path, config=tmp_path, env=env)[0] == 0
    check = (
        "import pathlib, re, sys\n"
        "from replayer.floor import bundletrust\n"
        "io = pathlib.Path('/proc/self/io')\n"
        "start = int(re.search(r'rchar: (\\d+)', io.read_text())[1])\n"
        "problem = bundletrust.mismatch(pathlib.Path(sys.argv[1]))\n"
        "print(int(re.search(r'rchar: (\\d+)', io.read_text())[1]) - start, problem)\n"
    )

    def checked() -> tuple[int, str]:
        argv = [sys.executable, "-c", check, str(bundle)]
        read, problem = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.split(" ", 1)
        return int(read), problem.strip()

    (bundle / STAMP).unlink(missing_ok=True)
    assert checked()[0] > 8 << 20  # every file hashed, the stamp written
    read, problem = checked()
    assert problem == "None" and read < 1 << 20 and (bundle / STAMP).is_file()
    (bundle / "node_modules" / "big.bin").write_bytes(os.urandom(8 << 20))  # changed: hashed, and refused
    read, problem = checked()
    assert read > 8 << 20 and problem == "node_modules/big.bin is not what was installed"


@pytest.mark.parametrize("where", ["bundle", "cache", "added file"])
def test_a_bundle_others_could_change_is_refused(
    cache: tuple[Path, dict[str, str]], tmp_path: Path, where: str
) -> None:
    root, env = cache
    bundle = root / f"opencode-{pinned_version('opencode')}"
    assert _cli("bundles", "add", OPENCODE_AT, cwd=tmp_path, config=tmp_path, env=env)[0] == 0
    if where == "added file":
        (bundle / "node_modules" / "preload.js").write_text("evil()\n")
    else:
        folder = bundle if where == "bundle" else root
        folder.chmod(folder.stat().st_mode | stat.S_IWOTH)
    code, err = _prepare(tmp_path, env)
    assert code == 10 and len(err.splitlines()) == 1 and RAN not in err, err
    assert ("writable by group or others" in err) == (where != "added file"), err
