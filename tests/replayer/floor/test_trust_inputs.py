"""Trust, round 3 (issue 42, attacks 2, 3 and 4), each rebuilt from its description: a downloaded manifest
may not choose where traffic or the key goes, the image or a repository to clone; trust is pinned to the
file (owner, modes up the path, no link, content hash); an untrusted `workers` only lowers; every limit is
finite and at least the engine's minimum, from every source. Real files, the real CLI. Without Docker."""

from __future__ import annotations

import math
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from replayer import api
from replayer.floor import settings
from replayer.floor import trust as trusting
from replayer.floor.errors import BadInput, SettingsError
from replayer.floor.limits import SandboxLimits
from replayer.verbs.batch_manifest import read_manifest
from tests.conftest import MINI, ROOT, replayer

TRAJ = MINI.fixture("toolcall") / "trajectory.traj.json"
WORKSPACE = MINI.fixture("toolcall") / "workspace"
NOBODY = 65534


@pytest.fixture
def server() -> Iterator[socket.socket]:
    """A model service on 127.0.0.1 that must see nothing: `accept` raises BlockingIOError while nobody
    connected."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        sock.setblocking(False)
        yield sock


def _manifest(folder: Path, **fields: object) -> Path:
    """A downloaded manifest: one continue line over the mini-swe-agent fixture (copied beside it, named
    relatively as a downloaded folder names its files), with `fields` over it."""
    line = {"trajectory": TRAJ.name, "boundaries": [1], "mode": "continue", "workspace": "workspace"}
    line["continuation"] = {"upstream": "mock"}
    folder.mkdir(parents=True, exist_ok=True)
    (folder / TRAJ.name).write_bytes(TRAJ.read_bytes())
    if not (folder / "workspace").exists():
        shutil.copytree(WORKSPACE, folder / "workspace", symlinks=True)
    path = folder / "manifest.jsonl"
    path.write_bytes(orjson.dumps(line | fields) + b"\n")
    return path


def _config(tmp_path: Path) -> dict[str, str]:
    return {"XDG_CONFIG_HOME": str(tmp_path / "config")}


def test_a_downloaded_manifest_cannot_send_a_key_to_its_server(tmp_path: Path, server: socket.socket) -> None:
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    manifest = _manifest(
        tmp_path / "downloaded", continuation={"upstream": url, "upstream_key_env": "GITHUB_TOKEN"}
    )
    env = _config(tmp_path) | {"GITHUB_TOKEN": "ghp_secret"}
    proc = replayer("batch", str(manifest), "-o", str(tmp_path / "out"), env=env)
    err = proc.stderr.strip()
    assert proc.returncode == 3 and len(err.splitlines()) == 1, err
    assert "manifest line 1: continuation.upstream: a manifest you have not trusted may not set it" in err
    assert f"replayer trust {manifest}" in err and "--trust-manifest" in err
    with pytest.raises(BlockingIOError):
        server.accept()  # nobody connected
    # the key variable alone is refused too (the upstream being the built-in mock)
    _manifest(tmp_path / "downloaded", continuation={"upstream": "mock", "upstream_key_env": "GITHUB_TOKEN"})
    with pytest.raises(
        BadInput, match="continuation.upstream_key_env: .*which host variable is sent as the key"
    ):
        read_manifest(manifest)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"image": "evil.example/pwn:latest"}, "image: "),
        ({"workspace": "git+https://evil.example/repo.git@main"}, "workspace: "),
        ({"continuation": {"upstream": "mock:/etc/shadow"}}, "continuation.upstream: "),
        ({"budgets": {"max_command_timeout_s": 86400.0}}, "budgets.max_command_timeout_s: "),
        ({"budgets": {"read": {"max_scan_bytes": 1 << 40}}}, "budgets.read.max_scan_bytes: "),
    ],
)
def test_an_untrusted_manifest_chooses_no_image_repository_or_looser_budget(
    tmp_path: Path, fields: dict[str, object], named: str
) -> None:
    manifest = _manifest(tmp_path / "downloaded", **fields)
    with pytest.raises(BadInput) as caught:
        read_manifest(manifest)
    assert str(caught.value).startswith(f"manifest line 1: {named}") and "\n" not in str(caught.value)
    read_manifest(manifest, trusted=True)  # the user's own (--trust-manifest): taken as it says


@pytest.mark.parametrize(
    ("fields", "why"),
    [
        ({"workspace": "SECRET"}, "an absolute name"),
        ({"workspace": "../secret"}, "a name that leaves the folder (`..`)"),
        ({"workspace": "linked"}, "a link, or a link on the way"),
        ({"trajectory": "linked/id_ed25519"}, "a link, or a link on the way"),
        ({"trajectory": "SECRET/id_ed25519"}, "an absolute name"),
    ],
)
def test_an_untrusted_manifest_names_only_files_in_its_own_folder(
    tmp_path: Path, fields: dict[str, str], why: str
) -> None:
    """A downloaded manifest naming a host folder (~/.ssh) as its workspace would have it copied into the
    sandbox and shown to the model: an untrusted one names only files inside its own folder, no `..`, no
    link out; refused in one line, exit 3; the user's own (--trust-manifest) keeps absolute names."""
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "id_ed25519").write_text("PRIVATE KEY")
    folder = tmp_path / "downloaded"
    folder.mkdir()
    (folder / "linked").symlink_to(secret)
    fields = {k: v.replace("SECRET", str(secret)) for k, v in fields.items()}
    manifest = _manifest(folder, **fields)
    out = tmp_path / "out"
    proc = replayer("batch", str(manifest), "-o", str(out), env=_config(tmp_path))
    err = proc.stderr.strip()
    assert proc.returncode == 3 and len(err.splitlines()) == 1, err
    field = next(iter(fields))
    assert f"manifest line 1: {field}: {fields[field]}: {why}; " in err, err
    assert "--trust-manifest" in err and not out.exists()
    [(_, entry)] = read_manifest(manifest, trusted=True)  # the user's own: taken as it says
    assert str(secret) in str(getattr(entry, field).resolve())
    # relative names inside the folder are what a downloaded manifest uses
    [(_, entry)] = read_manifest(_manifest(tmp_path / "plain"))
    assert entry.named("workspace", None) == tmp_path / "plain" / "workspace"
    assert os.path.samefile(entry.workspace, tmp_path / "plain" / "workspace")  # through its held folder


def test_a_manifest_trusted_by_replayer_trust_is_pinned_to_its_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    manifest = _manifest(tmp_path / "mine", continuation={"upstream": "https://mine.example"})
    trusting.add(manifest)
    [(_, entry)] = read_manifest(manifest)
    assert entry.continuation is not None and entry.continuation.upstream == "https://mine.example"
    # changed after it was trusted (a `git pull`): asked again, in one line
    _manifest(tmp_path / "mine", continuation={"upstream": "https://evil.example"})
    with pytest.raises(SettingsError) as caught:
        read_manifest(manifest)
    assert str(caught.value) == (
        f"{manifest}: changed since you trusted it; run `replayer trust {manifest}` again if the change is yours"
    )
    trusting.add(manifest)
    assert read_manifest(manifest)[0][1].continuation.upstream == "https://evil.example"  # type: ignore[union-attr]


def _trusted_project(tmp_path: Path, text: str) -> tuple[Path, dict[str, str]]:
    """A project folder whose replayer.toml (`text`) the user trusted with `replayer trust`."""
    folder = tmp_path / "shared"
    folder.mkdir()
    (folder / "replayer.toml").write_text(text)
    env = _config(tmp_path)
    trusting.add(folder, env)
    return folder, env


def test_another_users_writable_file_in_a_trusted_folder_is_refused(tmp_path: Path) -> None:
    folder, env = _trusted_project(tmp_path, 'upstream = "https://mine.example"\n')
    assert settings.load(folder, env).upstream == "https://mine.example"
    project = folder / "replayer.toml"
    os.chmod(project, 0o666)  # anyone may rewrite it now
    settings.forget()
    with pytest.raises(SettingsError) as caught:
        settings.load(folder, env)
    assert str(caught.value).startswith(f"{project}: {project} is writable by group or others")
    os.chmod(project, 0o644)
    os.chown(project, NOBODY, NOBODY)  # another user's (a shared folder)
    settings.forget()
    with pytest.raises(SettingsError, match=f"is owned by another user \\(uid {NOBODY}\\)"):
        settings.load(folder, env)
    os.chown(project, os.geteuid(), os.getegid())
    os.chmod(folder, 0o777)  # a folder above it anyone may write to: the file can be swapped
    settings.forget()
    with pytest.raises(SettingsError, match=f"{folder} is writable by group or others"):
        settings.load(folder, env)
    with pytest.raises(SettingsError, match=f"{folder} is writable by group or others"):
        trusting.add(folder, env)  # nor is it trusted again while it is so


def test_a_folder_trusted_by_hand_without_a_pin_is_asked_about(tmp_path: Path) -> None:
    folder = tmp_path / "repo"
    folder.mkdir()
    (folder / "replayer.toml").write_text('upstream = "https://elsewhere.example"\n')
    user = tmp_path / "config" / "replayer" / "config.toml"
    user.parent.mkdir(parents=True)
    user.write_text(f'trusted = ["{folder}"]\n')  # as trust was kept before it was pinned
    with pytest.raises(SettingsError) as caught:
        settings.load(folder, _config(tmp_path))
    assert str(caught.value) == (
        f"{folder / 'replayer.toml'}: its folder is trusted but not this file's content; run "
        f"`replayer trust {folder / 'replayer.toml'}` if it is yours"
    )


def test_a_trusted_project_file_changed_since_is_asked_again(tmp_path: Path, server: socket.socket) -> None:
    folder, env = _trusted_project(tmp_path, 'upstream = "https://mine.example"\n')
    url = f"http://127.0.0.1:{server.getsockname()[1]}"
    (folder / "replayer.toml").write_text(f'upstream = "{url}"\nupstream_key_env = "GITHUB_TOKEN"\n')
    code, err = _cli_in(folder, env, "inspect", str(TRAJ))
    assert code == 13 and len(err.splitlines()) == 1, err
    assert err == (
        f"replayer: settings: {folder / 'replayer.toml'}: changed since you trusted it; run "
        f"`replayer trust {folder / 'replayer.toml'}` again if the change is yours"
    )
    with pytest.raises(BlockingIOError):
        server.accept()
    trusting.add(folder, env)
    settings.forget()
    assert settings.load(folder, env).upstream == url


def _cli_in(cwd: Path, env: dict[str, str], *args: str) -> tuple[int, str]:
    """The real CLI run from `cwd` (where the project file is found)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    proc = subprocess.run(
        [sys.executable, "-m", "replayer.cli", *args], capture_output=True, text=True, env=full, cwd=cwd
    )
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.returncode, proc.stderr.strip()


def test_a_linked_settings_file_in_a_trusted_folder_is_refused(tmp_path: Path) -> None:
    folder, env = _trusted_project(tmp_path, "workers = 1\n")
    elsewhere = tmp_path / "elsewhere.toml"
    elsewhere.write_text("workers = 1\n")  # the very content trusted, through a link
    (folder / "replayer.toml").unlink()
    (folder / "replayer.toml").symlink_to(elsewhere)
    settings.forget()
    with pytest.raises(SettingsError, match="a link; a trusted file is read only as a regular file"):
        settings.load(folder, env)
    with pytest.raises(SettingsError, match="a link"):
        trusting.add(folder, env)  # nor can a link be trusted


def test_an_untrusted_file_cannot_raise_workers(tmp_path: Path) -> None:
    folder = tmp_path / "downloaded"
    folder.mkdir()
    (folder / "replayer.toml").write_text("workers = 24\n")
    env = _config(tmp_path)
    with pytest.raises(SettingsError) as caught:
        settings.load(folder, env)
    ceiling = os.cpu_count()
    assert str(caught.value).startswith(
        f"{folder / 'replayer.toml'}: workers 24 is more than the {ceiling} in force without it; a folder you "
        "have not trusted may only lower it"
    )
    (folder / "replayer.toml").write_text("workers = 1\n")
    settings.forget()
    assert settings.load(folder, env).workers == 1


BAD_CPUS = ("1e-12", "-0.0", "nan", "inf")


@pytest.mark.parametrize("value", BAD_CPUS)
def test_a_limit_below_the_engines_minimum_or_not_finite_is_one_line_from_every_source(
    tmp_path: Path, value: str
) -> None:
    env = _config(tmp_path)
    run = ("run", str(TRAJ), "-n", "1", "-w", str(WORKSPACE), "-o", str(tmp_path / "out"))
    # a flag: a usage error (2)
    proc = replayer(*run, "--limits", f"cpus={value}", env=env)
    err = proc.stderr.strip()
    assert proc.returncode == 2 and "cpus: Input should be" in err and "Traceback" not in err, err
    # the environment and a settings file: a settings error (13), in one line
    proc = replayer(*run, env=env | {"REPLAYER_LIMITS": f"cpus={value}"})
    err = proc.stderr.strip()
    assert proc.returncode == 13 and len(err.splitlines()) == 1 and "REPLAYER_LIMITS: cpus: " in err, err
    user = tmp_path / "config" / "replayer" / "config.toml"
    user.parent.mkdir(parents=True, exist_ok=True)
    user.write_text(f"[limits]\ncpus = {value}\n")
    proc = replayer(*run, env=env)
    err = proc.stderr.strip()
    assert proc.returncode == 13 and len(err.splitlines()) == 1 and f"{user}: limits: cpus: " in err, err
    # the API
    with pytest.raises(ValueError, match="cpus"):
        SandboxLimits(cpus=float(value))
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"continuation": {"upstream": "mock", "idle_timeout_s": -0.0}}, "continuation.idle_timeout_s"),
        ({"continuation": {"upstream": "mock", "max_steps": 0}}, "continuation.max_steps"),
        ({"budgets": {"default_command_timeout_s": -0.0}}, "budgets.default_command_timeout_s"),
        ({"budgets": {"read": {"max_lines": 0}}}, "budgets.read.max_lines"),
    ],
)
def test_a_manifests_limits_are_checked_as_the_flags_are(
    tmp_path: Path, fields: dict[str, object], named: str
) -> None:
    manifest = _manifest(tmp_path / "mine", **fields)
    with pytest.raises(BadInput, match=f"^manifest line 1: {named}: Input should be greater than"):
        read_manifest(manifest, trusted=True)


def test_a_variants_and_the_apis_limits_are_checked_too(tmp_path: Path) -> None:
    for spec in ("v=idle_timeout=nan", "v=idle_timeout=-0.0", "v=max_tokens=0", '{"max_requests": -1}'):
        with pytest.raises(ValueError, match="Input should be"):
            api.parse_variant(spec if spec.startswith("v=") else f"v={spec}")
    assert math.isclose(SandboxLimits(cpus=0.01).cpus, 0.01)  # the engine's minimum itself is taken
    with pytest.raises(BadInput, match="workers: at least 1"):
        api.batch(_manifest(tmp_path / "mine"), tmp_path / "out", workers=-2)


@pytest.mark.parametrize(
    ("verb", "flag", "named"),
    [
        ("run", ("--idle-timeout", "nan"), "idle_timeout_s: Input should be a finite number"),
        ("run", ("--idle-timeout", "-0.0"), "idle_timeout_s: Input should be greater than 0"),
        ("run", ("--max-steps", "0"), "max_steps: Input should be greater than or equal to 1"),
        ("compare", ("--check-timeout", "inf"), "check_timeout_s: Input should be a finite number"),
    ],
)
def test_a_timeout_or_count_flag_is_checked_as_the_model_checks_it(
    tmp_path: Path, verb: str, flag: tuple[str, ...], named: str
) -> None:
    args = [verb, str(TRAJ), "-n", "1", "-w", str(WORKSPACE), "-o", str(tmp_path / "out"), *flag]
    args += ["--continue", "--upstream", "mock"] if verb == "run" else ["--variant", "a="]
    proc = replayer(*args, env=_config(tmp_path))
    err = proc.stderr.strip()
    assert proc.returncode == 3 and err == f"replayer: bad_input: {named}" + err.partition(named)[2], err
    assert len(err.splitlines()) == 1 and not (tmp_path / "out").exists()


def test_a_manifest_of_many_folders_is_held_within_the_open_files_limit_or_refused_in_one_line(
    tmp_path: Path,
) -> None:
    """An untrusted manifest's files are reached through their folders, held open (one descriptor a folder):
    a thousand conversation folders passed a desktop's soft limit of 1,024 midway, an internal error. The
    soft limit is raised to the hard one; beyond that, one line naming the ways out."""
    folder = tmp_path / "downloaded"
    lines = []
    for i in range(100):
        (folder / f"t{i}").mkdir(parents=True)
        (folder / f"t{i}" / TRAJ.name).write_bytes(TRAJ.read_bytes())
        lines.append(orjson.dumps({"trajectory": f"t{i}/{TRAJ.name}", "boundaries": [1], "mode": "prepare"}))
    manifest = folder / "manifest.jsonl"
    manifest.write_bytes(b"\n".join(lines) + b"\n")

    def batch(soft: int, hard: int, out: Path) -> subprocess.CompletedProcess[str]:
        import resource

        def limited() -> None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

        argv = [sys.executable, "-m", "replayer.cli", "batch", str(manifest), "-o", str(out)]
        env = {**os.environ, **_config(tmp_path)}
        return subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT, preexec_fn=limited)

    raised = batch(64, 4096, tmp_path / "raised")
    assert raised.returncode == 0, raised.stderr
    done = orjson.loads((tmp_path / "raised" / "batch.json").read_bytes())["done"]
    assert done == 1, "one content, one job"
    refused = batch(64, 64, tmp_path / "refused")
    err = refused.stderr.strip()
    assert refused.returncode == 3 and len(err.splitlines()) == 1, err
    assert "more folders than this process may hold open (open files are limited to 64" in err, err
    assert "ulimit -n" in err and not (tmp_path / "refused").exists()
