"""Any released version: the version a replay runs (recorded, inferred, stated or the pinned default) and
the bundle cache that installs any version from npm / PyPI on demand, with the CLI found per version."""

from __future__ import annotations

import datetime
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import pytest

from replayer import installer
from replayer.adapters.codex import bundle as codex_bundle
from replayer.floor import bundles, hostproc, registry, settings
from replayer.floor.bundletrust import MANIFEST
from tests.conftest import QUICK_INSTALL, ROOT, bundle_cache, replayer

CLAUDE_SINGLE = ROOT / "tests" / "fixtures" / "claude_code" / "single" / "session.jsonl"
PI_SESSION = next((ROOT / "tests" / "fixtures" / "pi" / "two_runs").glob("*.jsonl"))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A bundle cache of its own: every install below is a real one, from the registry."""
    return bundle_cache(tmp_path_factory.mktemp("bundles"))


def _bundles(cache: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return replayer("bundles", *args, env={"REPLAYER_BUNDLES": str(cache), **(env or {})})


def _result(out: Path) -> dict:
    return orjson.loads((out / "result.json").read_bytes())


def test_the_recorded_version_is_kept_and_a_stated_one_wins(tmp_path: Path) -> None:
    out = tmp_path / "recorded"
    replayer("prepare", str(CLAUDE_SINGLE), "-n", "1", "-o", str(out), check=True)
    recorded = _result(out)["version"]
    assert (recorded["version"], recorded["source"], recorded["status"]) == (
        "2.1.197",
        "recorded",
        "verified",
    )
    assert recorded["reruns"] == "claude_code 2.1.197, its own code", "the pinned CLI itself, driven"
    out = tmp_path / "stated"
    replayer(
        "prepare", str(CLAUDE_SINGLE), "-n", "1", "-o", str(out), "--agent-version", "2.0.64", check=True
    )
    stated = _result(out)["version"]
    assert (stated["version"], stated["source"], stated["status"]) == ("2.0.64", "stated", "unverified")
    assert stated["in_file"] == "2.1.197" and stated["reruns"] == "claude_code 2.0.64, its own code"
    assert (out / "expected_prefix.json").read_bytes() == (
        tmp_path / "recorded" / "expected_prefix.json"
    ).read_bytes()


def test_a_file_without_a_version_runs_the_pinned_one_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "out"
    replayer("prepare", str(PI_SESSION), "-n", "1", "-o", str(out), check=True)
    version = _result(out)["version"]
    assert (version["source"], version["status"], version["in_file"]) == ("default", "verified", None)
    assert version["reruns"].startswith("pi ") and "own code" in version["reruns"]


def test_require_verified_refuses_an_unverified_version_in_one_line(tmp_path: Path) -> None:
    args = ["prepare", str(CLAUDE_SINGLE), "-n", "1", "-o", str(tmp_path / "out")]
    proc = replayer(*args, "--agent-version", "2.0.64", "--require-verified")
    assert proc.returncode == 4 and "not verified" in proc.stderr and "2.1.197" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("spec", "cli", "needs_node"),
    [
        ("claude_code@2.0.64", "node_modules/@anthropic-ai/claude-code/cli.js", True),
        ("codex@0.77.0", "node_modules/@openai/codex/vendor/x86_64-unknown-linux-musl/codex/codex", False),
        (
            "codex@0.125.0",
            "node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/codex/codex",
            False,
        ),
    ],
)
def test_any_version_installs_and_its_cli_is_found_where_that_release_put_it(
    cache: Path, spec: str, cli: str, needs_node: bool
) -> None:
    proc = _bundles(cache, "add", spec)
    assert proc.returncode == 0, proc.stderr
    agent, version = spec.split("@")
    # piped, the install is told in one line once it is in place (what, from where, size)
    package = bundles.agent_pin(agent).npm
    [told] = proc.stderr.splitlines()
    assert told.startswith(f"installed {agent} {version} from npm {package} (") and " MB, " in told
    listed = orjson.loads(_bundles(cache, "list", "--json").stdout)
    assert {"agent": agent, "version": version} in [{k: b[k] for k in ("agent", "version")} for b in listed]
    os.environ["REPLAYER_BUNDLES"] = str(cache)
    try:
        found = codex_bundle.cli(version) if agent == "codex" else bundles.cli_path(agent, version)
    finally:
        del os.environ["REPLAYER_BUNDLES"]
    assert (found.path, found.needs_node) == (cli, needs_node)
    runner = [shutil.which("node") or "node"] if needs_node else []
    printed = subprocess.run(
        [*runner, str(cache / f"{agent}-{version}" / cli), "--version"], capture_output=True, text=True
    )
    assert version in printed.stdout, printed.stderr


def test_concurrent_adds_install_once_and_both_succeed(cache: Path) -> None:
    env = {**os.environ, "REPLAYER_BUNDLES": str(cache)}
    argv = [sys.executable, "-m", "replayer.cli", "bundles", "add", QUICK_INSTALL]
    procs = [
        subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for _ in range(2)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err.decode()
    agent, version = bundles.parse_spec(QUICK_INSTALL)
    installed = cache / f"{agent}-{version}"
    assert (installed / bundles.INSTALLED).read_text() == f"{bundles.agent_pin(agent).npm}@{version}\n"
    assert (installed / MANIFEST).is_file()  # written at installation, before the marker
    assert not [p.name for p in cache.iterdir() if "partial" in p.name]
    assert _bundles(cache, "rm", QUICK_INSTALL).returncode == 0 and not installed.exists()


def test_setup_installs_two_bundles_at_once_and_reports_them_in_order(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from replayer.floor.events import Installing
    from replayer.verbs import setup as machine

    wanted = [("codex", "0.171.0"), ("codex", "0.142.5")]  # one native binary each: quick to unpack
    heard: list[tuple[str, str]] = []
    monkeypatch.setenv("REPLAYER_BUNDLES", str(cache))
    settings.forget()
    try:
        found = machine.install_bundles(
            wanted,
            on_event=lambda e: heard.append((e.version, e.phase)) if isinstance(e, Installing) else None,
        )
        assert [(b.agent, b.version, b.status) for b in found] == [(a, v, "installed") for a, v in wanted]
        began = {v: heard.index((v, "start")) for _, v in wanted}
        ended = {v: heard.index((v, "done")) for _, v in wanted}
        assert max(began.values()) < min(ended.values()), ("one began before the other ended", heard)
        again = machine.install_bundles(wanted)
        assert [b.status for b in again] == ["present", "present"]
    finally:
        settings.forget()


def test_a_version_the_registry_lacks_is_refused_naming_the_ways_out(cache: Path) -> None:
    proc = _bundles(cache, "add", "claude_code@0.0.999")
    assert proc.returncode == 10 and "not in the npm registry" in proc.stderr
    assert "--agent-version" in proc.stderr and "replayer bundles" in proc.stderr
    # `bundles add` takes no --agent-version: the message says which verbs do
    assert "`run` and `compare` take it as --agent-version" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not list(cache.glob("claude_code-0.0.999*"))


def test_an_unreachable_registry_names_the_offline_command(cache: Path, tmp_path: Path) -> None:
    # npm takes no configuration but the replayer's, and of the user's variables only the network's (a proxy)
    env = {"HTTPS_PROXY": "http://127.0.0.1:9/", "https_proxy": "http://127.0.0.1:9/"}
    proc = _bundles(tmp_path, "add", "opencode@1.0.1", env=env)
    assert proc.returncode == 10 and "cannot reach the npm registry" in proc.stderr, proc.stderr
    assert "replayer bundles add opencode@1.0.1" in proc.stderr and not list(tmp_path.glob("opencode-1.0.1*"))


def test_a_dependency_with_no_wheel_is_not_called_a_missing_version(tmp_path: Path) -> None:
    """uv says "No solution found" both for a version the index lacks and for a dependency published as a
    source distribution only (the replayer builds none but those a pin names): the real uv, the real index."""
    uv = str(installer._uv(next(p.uv for p in bundles.load_pins().agents.values() if p.uv)))
    env = {"UV_NO_CONFIG": "1", "UV_CACHE_DIR": str(tmp_path / "cache"), **hostproc.passed(*hostproc.NETWORK)}
    installer._run("x", "1", "PyPI", [uv, "venv", "--no-config", "-q", str(tmp_path / "venv")], env=env)
    venv = str(tmp_path / "venv")
    install = [uv, "pip", "install", "--no-config", "--only-binary", ":all:", "--python", venv]
    with pytest.raises(bundles.BundleUnavailable) as no_wheel:
        installer._run("openhands_v0", "0.35.0", "PyPI", [*install, "func-timeout==4.3.5"], env=env)
    assert "func-timeout==4.3.5 publishes no wheel" in str(no_wheel.value)
    assert "not in the PyPI registry" not in str(no_wheel.value) and "`builds`" in str(no_wheel.value)
    with pytest.raises(bundles.BundleUnavailable) as missing:
        installer._run("openhands_v0", "99.0.0", "PyPI", [*install, "openhands-ai==99.0.0"], env=env)
    assert "openhands_v0 99.0.0 is not in the PyPI registry" in str(missing.value)


def test_bundles_come_from_the_registry_the_users_settings_name(tmp_path: Path) -> None:
    """A user behind a mirror names it once (REPLAYER_NPM_REGISTRY / REPLAYER_PYPI_INDEX, or their own
    settings file): versions are asked of it and npm, uv and pip install from it. Here the mirror is an
    empty one on loopback that answers 404 to everything (npm retries a refused connection for a minute)."""
    asked: list[str] = []

    class Empty(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            asked.append(self.path)
            self.send_error(404)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Empty)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    mirror = f"http://127.0.0.1:{server.server_port}"
    try:
        npm = {"REPLAYER_NPM_REGISTRY": mirror + "/"}
        tag = _bundles(tmp_path, "add", "claude_code@latest", env=npm)
        assert tag.returncode == 3 and "the npm registry cannot be asked what latest names" in tag.stderr
        added = _bundles(tmp_path, "add", "opencode@1.0.1", env=npm)
        assert added.returncode == 10, added.stderr
        assert f"opencode 1.0.1 is not in the npm registry at {mirror}:" in added.stderr
        assert "/-/package/@anthropic-ai%2Fclaude-code/dist-tags" in asked and "/opencode-ai" in asked, asked
    finally:
        server.shutdown()
    pypi = {"REPLAYER_PYPI_INDEX": "http://127.0.0.1:9/simple"}
    agent, pin = next((a, p) for a, p in bundles.load_pins().agents.items() if p.uv)
    (tmp_path / f".uv-{pin.uv}" / "bin").mkdir(parents=True)  # uv itself present: the agent's install asks
    shutil.copy2(bundles.bundles_root() / f".uv-{pin.uv}" / "bin" / "uv", tmp_path / f".uv-{pin.uv}" / "bin")
    added = _bundles(tmp_path, "add", f"{agent}@{pin.version}", env=pypi)
    assert added.returncode == 10, added.stderr
    assert f"cannot reach the PyPI registry at http://127.0.0.1:9/simple to install {agent}@" in added.stderr
    assert len(added.stderr.strip().splitlines()) == 1 and not list(tmp_path.glob(f"{agent}-*"))


def test_a_uv_bundle_cached_without_bytecode_is_compiled_once(tmp_path: Path) -> None:
    """The sandbox mounts a bundle read-only: modules not compiled in the cache are compiled at every start."""
    folder = tmp_path / "openhands_v0-0.0.1"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(folder)], check=True)
    module = next((folder / "lib").glob("python3*")) / "site-packages" / "agent_module.py"
    module.write_text("VALUE = 1\n")
    (folder / bundles.INSTALLED).write_text("openhands-ai==0.0.1\n")
    assert _bundles(tmp_path, "add", "openhands_v0@0.0.1").returncode == 0
    assert list((module.parent / "__pycache__").glob("agent_module.*.pyc"))
    assert (folder / bundles.BYTECODE).is_file() and module.read_text() == "VALUE = 1\n"
    assert (folder / MANIFEST).is_file()  # its digests recorded, the compiled modules with them


def test_an_older_python_agent_resolves_its_dependencies_as_of_its_release() -> None:
    """The upload day comes from the index itself (its JSON form), so an old openhands-ai gets the
    daytona / grep-ast of its time rather than today's, which it cannot import."""
    assert installer._released_after("openhands-ai", "0.35.0") == "2025-05-01"  # uploaded 2025-04-29
    assert installer._released_after("openhands-ai", "0.0.0-never") is None
    assert registry.file_version("openhands_ai-0.35.0-py3-none-any.whl") == "0.35.0"
    assert registry.file_version("openhands_ai-0.35.0.tar.gz") == "0.35.0"
    assert registry.file_version("openhands_ai-0.35.0.tar.bz2") is None


@pytest.mark.docker
@pytest.mark.agent
def test_a_run_that_installs_says_so_and_counts_the_install_in_its_timings(tmp_path: Path) -> None:
    cache = tmp_path / "bundles"
    out = tmp_path / "out"
    args = [
        "run",
        str(CLAUDE_SINGLE),
        "-n",
        "0",
        "-w",
        str(CLAUDE_SINGLE.parent / "workspace"),
        "-o",
        str(out),
    ]
    proc = replayer(*args, "--agent-version", "2.0.64", env={"REPLAYER_BUNDLES": str(cache)})
    assert proc.returncode == 0, proc.stderr
    assert "installed claude_code 2.0.64 from npm @anthropic-ai/claude-code (" in proc.stderr
    assert "  installed claude_code 2.0.64 from npm @anthropic-ai/claude-code first (" in proc.stdout
    result = _result(out)
    [installed] = result["installed"]
    assert (installed["agent"], installed["version"]) == ("claude_code", "2.0.64")
    assert installed["bytes"] == bundles.tree_size(cache / "claude_code-2.0.64") > 1_000_000
    timings = result["timings"]
    assert timings["install_s"] >= installed["seconds"] > 0
    parts = ("parse_s", "install_s", "workspace_s", "sandbox_start_s", "rerun_s", "rebuild_s", "continue_s")
    assert sum(timings[k] for k in parts) <= timings["total_s"]
    # the second run finds it in the cache: nothing installed, nothing said
    again = replayer(
        *args[:-1], str(tmp_path / "again"), "--agent-version", "2.0.64", env={"REPLAYER_BUNDLES": str(cache)}
    )
    said = again.stdout + again.stderr
    assert (
        again.returncode == 0 and "installing claude_code" not in said and "installed claude_code" not in said
    )
    assert _result(tmp_path / "again")["installed"] == []


def test_a_dist_tag_is_resolved_to_the_release_it_names_and_recorded_so(tmp_path: Path) -> None:
    out = tmp_path / "latest"
    replayer(
        "prepare", str(CLAUDE_SINGLE), "-n", "1", "-o", str(out), "--agent-version", "latest", check=True
    )
    version = _result(out)["version"]
    assert version["version"][0].isdigit() and version["version"] != "latest", version
    assert version["source"] == "stated" and f"latest is {version['version']}" in version["note"]
    out = tmp_path / "v"
    replayer(
        "prepare", str(CLAUDE_SINGLE), "-n", "1", "-o", str(out), "--agent-version", "v2.0.64", check=True
    )
    assert _result(out)["version"]["version"] == "2.0.64", "v1.2.3 is read as 1.2.3"


@pytest.mark.parametrize("stated", ["no-such-tag-xyz", "2.1 beta", "../2.1.0", "x" * 80])
def test_what_is_not_a_version_is_refused_in_one_line(tmp_path: Path, stated: str) -> None:
    out = tmp_path / "out"
    proc = replayer("prepare", str(CLAUDE_SINGLE), "-n", "1", "-o", str(out), "--agent-version", stated)
    assert proc.returncode == 3, proc.stderr
    assert "is not a version of claude_code" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not out.exists()


def test_a_bundle_is_named_by_its_release_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "bundles"
    cache.mkdir()
    proc = _bundles(cache, "rm", "claude_code@v2.0.64")
    assert proc.returncode == 0 and proc.stdout.strip() == "claude_code@2.0.64: not installed", proc.stdout
    folder = cache / "claude_code-latest"  # what an earlier replayer made of `--agent-version latest`
    folder.mkdir()
    (folder / bundles.INSTALLED).touch()
    monkeypatch.setenv("REPLAYER_BUNDLES", str(cache))
    settings.forget()
    try:
        assert ("claude_code", "latest") not in bundles.installed_specs()
    finally:
        monkeypatch.undo()
        settings.forget()
    shutil.rmtree(folder)


FIELD_GEMINI = ROOT / "tests" / "fixtures" / "field" / "gemini_cli"
AIM_034 = FIELD_GEMINI / "aim-0.34.0-session-2026-03-18T01-56-3afe7bdc.json"
"""Begun 2026-03-18T01:56Z: npm's publish times make 0.34.0 current then (the banner its user's CLI printed)."""
RUN4 = FIELD_GEMINI / "aim-benchmark-control-pro-run4.json"
"""Begun 2026-03-26: 0.35.0 was current then."""
OFFLINE = {"HTTPS_PROXY": "http://127.0.0.1:9/", "https_proxy": "http://127.0.0.1:9/"}
"""The registry cannot be asked (a proxy that refuses every connection)."""


def _inspected(path: Path, cache: Path, env: dict[str, str] | None = None) -> dict:
    env = {"REPLAYER_BUNDLES": str(cache), **(env or {})}
    return orjson.loads(replayer("inspect", str(path), "--json", env=env, check=True).stdout)["version"]


def test_a_file_naming_no_version_runs_the_release_current_at_its_first_timestamp(tmp_path: Path) -> None:
    """The real npm registry is asked once; its answer is kept beside the bundle cache, and a later run
    that cannot ask the registry reads the same release from it (the same version offline)."""
    ran = _inspected(AIM_034, tmp_path)
    assert (ran["version"], ran["source"], ran["registry_date"]) == (
        "0.34.0",
        "inferred",
        "2026-03-18T01:56:54.213000Z",
    )
    assert "0.34.0 was gemini_cli's current release on 2026-03-18 (npm)" in ran["note"]
    kept = orjson.loads((tmp_path / ".registry" / "gemini_cli.json").read_bytes())
    assert "0.34.0" in kept["times"] and not [v for v in kept["times"] if not registry.FINAL.match(v)]
    assert _inspected(AIM_034, tmp_path, OFFLINE) == ran
    header = replayer("inspect", str(AIM_034), env={"REPLAYER_BUNDLES": str(tmp_path)}, check=True).stdout
    assert "gemini_cli 0.34.0 would run, the release current on 2026-03-18" in " ".join(header.split())


def test_a_registry_that_cannot_be_asked_runs_the_pin_and_says_so(tmp_path: Path) -> None:
    ran = _inspected(AIM_034, tmp_path, OFFLINE)
    assert (ran["version"], ran["source"], ran["registry_date"]) == ("0.61.0", "default", None)
    assert ran["note"] == (
        "the file records no version, and the npm registry cannot be asked which release was current on "
        "2026-03-18: the pinned 0.61.0 ran"
    )
    assert not (tmp_path / ".registry" / "gemini_cli.json").exists()


def test_a_damaged_or_oversized_kept_answer_is_asked_again(tmp_path: Path) -> None:
    kept = tmp_path / ".registry" / "gemini_cli.json"
    kept.parent.mkdir()
    for damaged in (b'{"asked": "2099-01-01T00:00:00", "times": {"0.61.0": 1}}', b" " * (5 << 20)):
        kept.write_bytes(damaged)
        assert _inspected(AIM_034, tmp_path)["version"] == "0.34.0"
        assert "0.34.0" in orjson.loads(kept.read_bytes())["times"]


def test_a_stated_version_overrides_the_inferred_one(tmp_path: Path) -> None:
    inferred, stated = tmp_path / "inferred", tmp_path / "stated"
    said = replayer("prepare", str(RUN4), "-n", "1", "-o", str(inferred), check=True).stdout
    assert said.startswith("gemini_cli 0.35.0 (inferred as of 2026-03-26, unverified): boundary after step 1")
    replayer("prepare", str(RUN4), "-n", "1", "-o", str(stated), "--agent-version", "0.34.0", check=True)
    assert (
        _result(inferred)["version"]["version"] == "0.35.0" and _result(inferred)["version"]["registry_date"]
    )
    ran = _result(stated)["version"]
    assert (ran["version"], ran["source"], ran["registry_date"], ran["note"]) == (
        "0.34.0",
        "stated",
        None,
        None,
    )


def test_the_current_release_is_the_highest_plain_one_published_by_then() -> None:
    def at(day: str) -> datetime.datetime:
        return datetime.datetime.fromisoformat(day).replace(tzinfo=datetime.UTC)

    times = {
        "0.9.0": at("2026-01-01"),
        "0.10.0": at("2026-02-01"),  # 0.10 > 0.9 by version order, not by text
        "0.11.0-preview.1": at("2026-02-02"),  # a pre-release is never current
        "0.11.0rc1": at("2026-02-02"),
        "0.8.5": at("2026-02-03"),  # a backport published later is not newer
        "0.11.0": at("2026-03-01"),
    }
    assert registry.current_at(times, at("2025-12-31")) is None
    assert registry.current_at(times, at("2026-01-01")) == "0.9.0"  # at the publish time itself
    assert registry.current_at(times, at("2026-02-28")) == "0.10.0"
    assert registry.current_at(times, at("2026-03-02")) == "0.11.0"
