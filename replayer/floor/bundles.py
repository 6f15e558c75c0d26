"""The versioned bundle cache: one folder per agent and exact version, installed on demand from npm or
PyPI, safely when several runs ask at once (a lock per bundle; npm folders are built aside and renamed
into place, virtual environments, which cannot move, are built in place and marked complete last)."""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import json
import os
import re
import shutil
import stat
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from replayer.floor import bundletrust, hostproc, registry
from replayer.floor.errors import ReplayError, excerpt, last_line, unknown_agent
from replayer.floor.events import Installing, OnEvent, ignore
from replayer.floor.pins import AgentPin, bundles_root, load_pins

INSTALLED = ".installed"
"""Written last into a complete bundle: the exact requirement it holds."""
BYTECODE = ".bytecode"
"""In a bundle uv made: its modules are compiled. uv does not compile by default, and the sandbox mounts
the bundle read-only, so Python compiled every module again at every start (openhands-ai's runtime
starts four interpreters: a minute and more)."""
_NPM_MISSING = ("E404", "ETARGET", "No matching version", "notarget")
_PYPI_MISSING = ("No matching distribution", "No solution found", "not found in the package registry")
_NO_WHEEL = re.compile(r"(\S+) (?:has|have) no usable wheels")
"""uv's resolution that failed on a dependency with source distributions only (not a missing version)."""
_UNREACHABLE = (
    "ENOTFOUND",
    "EAI_AGAIN",
    "ECONNREFUSED",
    "ETIMEDOUT",
    "ECONNRESET",
    "Connection refused",
    "Failed to establish a new connection",
    "dns error",
)
"""An installer's words for a registry it could not connect to (pip then also says the version is missing)."""
_OFFLINE = ("network", "Network")


class BundleUnavailable(ReplayError):
    """The version is not in the registry, or the registry cannot be reached and the bundle is not cached."""

    exit_code = 10
    kind = "bundle"


class Bundle(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    agent: str
    version: str
    path: Path
    requirement: str
    """What was installed (`@openai/codex@0.125.0`, `mini-swe-agent==2.2.7`)."""
    size_bytes: int
    pinned: bool


def bundle_dir(agent: str, version: str) -> Path:
    return bundles_root() / f"{agent}-{version}"


def installed(agent: str, version: str) -> bool:
    return (bundle_dir(agent, version) / INSTALLED).is_file()


def parse_spec(spec: str) -> tuple[str, str]:
    """`AGENT@VERSION` (the form every message and `replayer bundles` use)."""
    agent, sep, version = spec.partition("@")
    if not sep or not version:
        raise BundleUnavailable(f"expected AGENT@VERSION (e.g. claude_code@2.0.64), got {excerpt(spec)}")
    return agent, _checked_version(agent, registry.concrete(agent, _pin(agent), version))


def pinned_specs() -> list[tuple[str, str]]:
    """(agent, version) of every pinned version and the pin file's `also` versions."""
    return [(agent, v) for agent, pin in load_pins().agents.items() for v in (pin.version, *pin.also)]


def ensure(agent: str, version: str, adopt: bool = False, on_event: OnEvent = ignore) -> Path:
    """The bundle of `agent` at `version`, installed first if the cache does not hold it, for the sandbox
    (mounted read-only): refused unless it and its parents are owned by root or this user and writable by
    nobody else, and it has its digest manifest. `adopt` (`bundles add`, `setup`): a bundle an earlier
    replayer installed without a manifest gets one, if nothing in it is someone else's. `on_event` hears
    the install (`Installing`)."""
    version = _checked_version(agent, version)
    path = bundle_dir(agent, version)
    if not ((path / INSTALLED).is_file() and bundletrust.has_manifest(path)):
        with cache_lock(agent, version):
            if not (path / INSTALLED).is_file():
                _install_heard(agent, version, path, on_event)
            elif not bundletrust.has_manifest(path):
                if not adopt:
                    raise BundleUnavailable(
                        f"{agent}@{version} at {path} was installed without a digest manifest (by an earlier "
                        f"replayer): if you installed it, `replayer bundles add {agent}@{version}` records "
                        f"its digests; else `replayer bundles rm {agent}@{version}`"
                    )
                _adopt(agent, version, path)
    problem = bundletrust.unsafe_owner(path)
    if problem:
        raise BundleUnavailable(
            f"{agent}@{version}: {problem}, so it may hold code someone else put there; "
            f"`replayer bundles rm {agent}@{version}` (a run installs it again) or fix the owner and mode"
        )
    return path


def for_host(agent: str, version: str) -> Path:
    """`ensure`, and every file as its manifest says: before anything from the bundle runs on the host.
    A file hashed once in this process is not hashed again while its identity and change time hold."""
    path = ensure(agent, version)
    problem = bundletrust.mismatch(path)
    if problem:
        raise BundleUnavailable(
            f"{agent}@{version} at {path}: {problem}; nothing from it runs: "
            f"`replayer bundles rm {agent}@{version}` (a run installs it again)"
        )
    return path


def _adopt(agent: str, version: str, path: Path) -> None:
    """Record the digests of a bundle installed before manifests were, checking first that nothing in it
    is someone else's (compiled first where uv left it uncompiled: its own interpreter runs)."""
    try:
        problem = bundletrust.foreign(path)
    except OSError as exc:
        problem = f"cannot be read whole ({exc})"
    if problem:
        raise BundleUnavailable(
            f"{agent}@{version} at {path}: {problem}, so it may hold code someone else put there: "
            f"`replayer bundles rm {agent}@{version}`"
        )
    if not _compiled(agent, path):  # cached by a replayer that did not compile
        _compile(path)
    _seal(agent, version, path)


def _compiled(agent: str, path: Path) -> bool:
    return not _pin(agent).uv or (path / BYTECODE).is_file()


def _compile(path: Path) -> None:
    """Compile a cached bundle's modules once (pip compiles as it installs; uv with --compile-bytecode).
    A module that does not compile (a test file in an older syntax) is left as it is, as both do."""
    hostproc.run(
        hostproc.python(path / "bin" / "python", "-m", "compileall", "-q", "-j", "0", str(path / "lib")),
        capture_output=True,
    )
    (path / BYTECODE).touch()


def remove(agent: str, version: str) -> bool:
    path = bundle_dir(agent, _checked_version(agent, version))
    with cache_lock(agent, version):
        if not path.exists():
            return False
        doomed = path.with_name(f".{path.name}.removing-{os.getpid()}")
        path.rename(doomed)
        shutil.rmtree(doomed)
    return True


def installed_specs() -> list[tuple[str, str]]:
    """(agent, version) of every bundle the cache holds complete, by agent and version."""
    found: list[tuple[str, str]] = []
    for agent in sorted(load_pins().agents):
        for path in sorted(bundles_root().glob(f"{agent}-*")):
            version = path.name[len(agent) + 1 :]
            if (
                (path / INSTALLED).is_file()
                and registry.RELEASE.match(version)
                and _agent_of(path.name) == agent
            ):
                found.append((agent, version))
    return found


def list_bundles() -> list[Bundle]:
    pins = load_pins()
    found: list[Bundle] = []
    for agent, version in installed_specs():
        pin, path = pins.agents[agent], bundle_dir(agent, version)
        found.append(
            Bundle(
                agent=agent,
                version=version,
                path=path,
                requirement=(path / INSTALLED).read_text().strip(),
                size_bytes=_size(path),
                pinned=version == pin.version or version in pin.also,
            )
        )
    return found


def _agent_of(folder: str) -> str | None:
    """The agent a folder belongs to: the longest agent name it starts with (openhands_v0 before openhands)."""
    names = sorted(load_pins().agents, key=len, reverse=True)
    return next((n for n in names if folder.startswith(n + "-")), None)


def _pin(agent: str) -> AgentPin:
    pin = load_pins().agents.get(agent)
    if pin is None:
        raise unknown_agent([agent], list(load_pins().agents))
    return pin


def _checked_version(agent: str, version: str) -> str:
    """A bundle is named by a released version only: a dist-tag or `v1.2.3` is made concrete first
    (`registry.concrete`), so one release has one folder."""
    _pin(agent)
    if not registry.RELEASE.match(version) or len(version) > 64:
        raise BundleUnavailable(f"{excerpt(version)} is not a released version of {agent}")
    return version


@contextlib.contextmanager
def cache_lock(agent: str, version: str) -> Iterator[None]:
    locks = bundles_root() / ".locks"
    locks.mkdir(parents=True, exist_ok=True)
    with open(locks / f"{agent}-{version}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


def _install_heard(agent: str, version: str, path: Path, on_event: OnEvent) -> None:
    """`_install`, telling `on_event` what, from where, how big so far (every second) and in the end."""
    pin = _pin(agent)
    source = f"npm {pin.npm}" if pin.npm else f"PyPI {pin.pypi}"
    started = time.monotonic()

    def heard(size: int, phase: Literal["start", "progress", "done"]) -> None:
        on_event(Installing(agent, version, source, size, time.monotonic() - started, phase))

    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(_WATCH_S):
            heard(sum(_size(p) for p in path.parent.glob(f"*{path.name}*")), "progress")

    heard(0, "start")
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        _install(agent, version, path)
    finally:
        stop.set()
        watcher.join()
    heard(_size(path), "done")


_WATCH_S = 1.0


def _install(agent: str, version: str, path: Path) -> None:
    pin = _pin(agent)
    path.parent.mkdir(parents=True, exist_ok=True)
    if pin.npm:
        _install_npm(agent, pin, version, path)
    else:
        _install_pypi(agent, pin, version, path)


def _install_npm(agent: str, pin: AgentPin, version: str, path: Path) -> None:
    requirement = f"{pin.npm}@{version}"
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    # npm reads no user or global configuration (two files: it refuses one twice) and no project one but
    # the fresh --prefix folder's
    empty = partial.with_name(partial.name + ".npmrc")
    empty.write_bytes(b"")
    try:
        _run(
            agent,
            version,
            "npm",
            [
                "npm",
                "install",
                "--no-audit",
                "--no-fund",
                "--no-update-notifier",
                "--loglevel=error",
                "--prefix",
                str(partial),
                "--userconfig",
                os.devnull,
                "--globalconfig",
                str(empty),
                "--cache",
                str(bundles_root() / ".npm-cache"),
                "--registry",
                registry.npm() + "/",
                requirement,
            ],
            env=hostproc.passed(*hostproc.NETWORK),
        )
        _seal(agent, version, partial)
        (partial / INSTALLED).write_text(requirement + "\n")
        if path.exists():  # an incomplete earlier attempt (no marker): replaced
            shutil.rmtree(path)
        partial.rename(path)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
        empty.unlink(missing_ok=True)


def _install_pypi(agent: str, pin: AgentPin, version: str, path: Path) -> None:
    assert pin.pypi and pin.python
    requirement = f"{pin.pypi}=={version}"
    extra = [f"{name}=={version}" for name in pin.with_] + pin.undeclared
    shutil.rmtree(path, ignore_errors=True)
    try:
        if pin.uv:
            uv = _uv(pin.uv, agent, version)
            exclude = pin.exclude_newer if version == pin.version else _released_after(pin.pypi, version)
            env = _uv_env()
            _run(
                agent,
                version,
                "PyPI",
                [str(uv), "venv", "--no-config", "-q", "--python", pin.python, str(path)],
                env=env,
            )
            argv = [
                str(uv),
                "pip",
                "install",
                "--no-config",
                "--only-binary",
                ":all:",
                *(f"--no-binary={name}" for name in pin.builds),
                "-q",
                "--compile-bytecode",
                "--default-index",
                registry.pypi(),
                "--python",
                str(path / "bin" / "python"),
            ]
            if exclude:
                argv += ["--exclude-newer", exclude]
            _run(agent, version, "PyPI", [*argv, requirement, *extra], env=env)
            (path / BYTECODE).touch()
        else:
            _run(agent, version, "PyPI", hostproc.python(pin.python, "-m", "venv", str(path)))
            builds = [f"--no-binary={name}" for name in pin.builds]
            _run(agent, version, "PyPI", [*_pip(path), *builds, requirement, *extra], env=_pip_env())
        if pin.debs:
            _unpack_debs(agent, version, pin.debs, path)
        _seal(agent, version, path)
        (path / INSTALLED).write_text(requirement + "\n")
    except BaseException:
        shutil.rmtree(path, ignore_errors=True)
        raise


def _uv_env() -> dict[str, str]:
    """uv reads no uv.toml or pyproject.toml (with `--no-config` on its command line too)."""
    return {
        "UV_NO_CONFIG": "1",
        "UV_CACHE_DIR": str(bundles_root() / ".uv-cache"),
        **hostproc.passed(*hostproc.NETWORK),
    }


def _pip_env() -> dict[str, str]:
    """pip reads no configuration file (with `--isolated`: no PIP_* variable, no user configuration)."""
    return {"PIP_CONFIG_FILE": os.devnull, **hostproc.passed(*hostproc.NETWORK)}


def _pip(venv: Path) -> list[str]:
    """pip of the virtual environment `venv`, reading no configuration, installing wheels only."""
    python = venv / "bin" / "python"
    return hostproc.python(
        python,
        "-m",
        "pip",
        "install",
        "--isolated",
        "-q",
        "--disable-pip-version-check",
        "--only-binary",
        ":all:",
        "--index-url",
        registry.pypi(),
    )


def _seal(agent: str, version: str, path: Path) -> None:
    """Nothing of a bundle this replayer made writable by group or others (whatever the umask or a package
    said), then its digest manifest written."""
    for dirpath, dirs, files in os.walk(path):
        for name in (*dirs, *files):
            st = os.lstat(os.path.join(dirpath, name))
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022:
                os.chmod(os.path.join(dirpath, name), stat.S_IMODE(st.st_mode) & ~0o022)
    os.chmod(path, stat.S_IMODE(os.lstat(path).st_mode) & ~0o022)
    try:
        bundletrust.write(path, bundletrust.build(path))
    except (OSError, ValueError) as exc:
        raise BundleUnavailable(f"installing {agent}@{version}: {exc}") from None


def _uv(version: str, agent: str = "uv", agent_version: str = "") -> Path:
    """uv itself, pinned, in a virtual environment of its own (a resolver that does not backtrack for minutes);
    a failure names the agent install that needed it."""
    agent_version = agent_version or version
    home = bundles_root() / f".uv-{version}"
    uv = home / "bin" / "uv"
    if not uv.is_file():
        with cache_lock("uv", version):
            if not uv.is_file():
                shutil.rmtree(home, ignore_errors=True)
                _run(agent, agent_version, "PyPI", hostproc.python("python3", "-m", "venv", str(home)))
                _run(agent, agent_version, "PyPI", [*_pip(home), f"uv=={version}"], env=_pip_env())
    problem = bundletrust.unsafe_owner(uv)  # it runs on the host, as the installer
    if problem:
        raise BundleUnavailable(f"uv {version}: {problem}, so it may be someone else's; remove {home}")
    return uv


def _released_after(package: str, version: str) -> str | None:
    """The day after `version` was uploaded: resolving its dependencies as of then gives what its users had,
    today and on every later run. None when the index does not say (then today's resolution is taken)."""
    stamps = (registry.pypi_uploads(package) or {}).get(version)
    if not stamps:
        return None
    day = datetime.datetime.fromisoformat(stamps[-1].replace("Z", "+00:00")).date()
    return (day + datetime.timedelta(days=2)).isoformat()


def _unpack_debs(agent: str, version: str, debs: list[str], path: Path) -> None:
    """Tools the agent's runtime calls that the base image lacks: unpacked into debs/, never installed."""
    download = path / "debs.download"
    download.mkdir()
    try:
        argv = ["apt-get", "download", "-q", *debs]
        env = hostproc.passed(*hostproc.NETWORK)
        if hostproc.run(argv, env=env, cwd=download, capture_output=True).returncode != 0:
            hostproc.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
            _run(agent, version, "Debian", argv, env=env, cwd=download)
        for deb in sorted(download.glob("*.deb")):
            _run(agent, version, "Debian", ["dpkg-deb", "-x", str(deb), str(path / "debs")])
    finally:
        shutil.rmtree(download, ignore_errors=True)


def _run(
    agent: str,
    version: str,
    source: str,
    argv: list[str],
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> None:
    """Run an installer step; a failure is one line that says which of the kinds below it is."""
    try:
        proc = hostproc.run(argv, capture_output=True, text=True, env=env, cwd=cwd)
    except FileNotFoundError:
        raise BundleUnavailable(f"cannot install {agent}@{version}: {argv[0]} is not installed") from None
    if proc.returncode == 0:
        return
    output = proc.stderr + proc.stdout
    last = last_line(proc.stderr) or last_line(proc.stdout) or "no output"
    unbuilt = _NO_WHEEL.search(output)
    if unbuilt:
        raise BundleUnavailable(
            f"installing {agent}@{version} failed: {unbuilt[1]} publishes no wheel that fits and the replayer "
            f"builds no source distribution on the host except those the agent's pin names (`builds`)"
        )
    unreachable = any(mark in output for mark in _UNREACHABLE)
    if not unreachable and any(mark in output for mark in (*_NPM_MISSING, *_PYPI_MISSING)):
        raise BundleUnavailable(
            f"{agent} {version} is not in the {_named(source)}: name a published version (`run` and "
            f"`compare` take it as --agent-version) or a cached one (`replayer bundles list`)"
        )
    if unreachable or any(mark in output for mark in _OFFLINE):
        raise BundleUnavailable(
            f"cannot reach the {_named(source)} to install {agent}@{version} ({excerpt(last, 120)}); "
            f"where it can be reached run `replayer bundles add {agent}@{version}` and share the bundle folder"
        )
    raise BundleUnavailable(f"installing {agent}@{version} failed: {excerpt(last, 200)}")


def _named(source: str) -> str:
    """`npm registry`, or with the mirror the user set: `npm registry at https://mirror.example`."""
    where = {"npm": (registry.npm(), registry.NPM), "PyPI": (registry.pypi(), registry.PYPI)}.get(source)
    if where is None or where[0] == where[1]:
        return f"{source} registry"
    parts = urllib.parse.urlsplit(where[0])
    port = f":{parts.port}" if parts.port else ""
    return f"{source} registry at {parts.scheme}://{parts.hostname}{port}{parts.path}"


class Cli(BaseModel):
    """Where an npm agent's CLI is inside its bundle, found per version (the layout moves between releases)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str
    """Relative to the bundle folder."""
    needs_node: bool
    """A JavaScript entry point (run by the host's node, mounted into the sandbox), not a native binary."""


PLACES = ("{c}", "bin/{c}")
"""Where a release puts its native binary, relative to a platform package or to the package itself
(`{c}`: the command's name): the default; an agent whose releases put it elsewhere declares its own."""


def cli_path(
    agent: str,
    version: str,
    places: tuple[str, ...] = PLACES,
    runs_javascript: Callable[[Path], bool] | None = None,
) -> Cli:
    """The package's `bin` entry when it is a native binary; else the native binary its launcher would
    spawn (found at one of the agent's `places` in a platform package beside it, or in the package
    itself); else the JavaScript entry, also when `runs_javascript(package folder)` says the launcher
    of that release runs it."""
    pin = _pin(agent)
    assert pin.npm, f"{agent} is not an npm agent"
    if pin.bin and version == pin.version:  # the pin names where the verified version's CLI is
        return Cli(path=pin.bin, needs_node=pin.node is not None)
    bundle = bundle_dir(agent, version)
    modules = bundle / "node_modules"
    package = modules / pin.npm
    try:
        manifest = json.loads((package / "package.json").read_bytes())
    except (OSError, ValueError):
        raise BundleUnavailable(
            f"{bundle} holds no readable {pin.npm} package; `replayer bundles rm "
            f"{agent}@{version}` and add it again"
        ) from None
    bins = manifest.get("bin")
    if isinstance(bins, str):
        bins = {pin.npm.rsplit("/", 1)[-1]: bins}
    if not isinstance(bins, dict) or not bins:
        raise BundleUnavailable(f"{pin.npm}@{version} declares no executable (package.json `bin`)")
    command, entry = next(iter(bins.items()))
    target = package / str(entry)
    if _is_elf(target):
        return Cli(path=str(target.relative_to(bundle)), needs_node=False)
    javascript = runs_javascript is not None and runs_javascript(package)
    platform = sorted(
        (p for p in [*modules.glob("*linux-x64*"), *modules.glob("@*/*linux-x64*"), package]),
        key=lambda p: ("musl" in p.name, "baseline" in p.name, p.name),
    )
    for folder in [] if javascript else platform:
        for place in places:
            candidate = folder / place.format(c=command)
            if _is_elf(candidate):
                return Cli(path=str(candidate.relative_to(bundle)), needs_node=False)
    if not target.is_file():
        raise BundleUnavailable(f"{pin.npm}@{version}: its executable {entry} is missing from {bundle}")
    return Cli(path=str(target.relative_to(bundle)), needs_node=True)


NODE_MOUNT = "/usr/local/bin/node"
"""Where the host's node is mounted for a CLI that is a JavaScript file (on the sandbox's PATH)."""


def host_node() -> Path:
    found = shutil.which("node")
    if found is None:
        raise BundleUnavailable(
            "this version's CLI is a JavaScript file and the host has no `node` to run it"
        )
    return Path(found).resolve()


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == b"\x7fELF"
    except OSError:
        return False
