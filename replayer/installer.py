"""The bundle installer: a bundle the cache (floor/bundles.py) lacks installed on demand from npm or PyPI,
safely when several runs ask at once (a lock per bundle; npm folders are built aside and renamed into place,
virtual environments, which cannot move, are built in place and marked complete last), and checked before
it is used (its owner, its digest manifest)."""

from __future__ import annotations

import datetime
import os
import re
import shutil
import stat
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Literal

from replayer.floor import bundletrust, hostproc, registry
from replayer.floor.bundles import (
    BYTECODE,
    INSTALLED,
    BundleUnavailable,
    agent_pin,
    bundle_dir,
    cache_lock,
    checked_version,
    tree_size,
)
from replayer.floor.errors import excerpt, last_line
from replayer.floor.events import Installing, OnEvent, ignore
from replayer.floor.pins import AgentPin, bundles_root

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


def ensure(agent: str, version: str, adopt: bool = False, on_event: OnEvent = ignore) -> Path:
    """The bundle of `agent` at `version`, installed first if the cache does not hold it, for the sandbox
    (mounted read-only): refused unless it and its parents are owned by root or this user and writable by
    nobody else, and it has its digest manifest. `adopt` (`bundles add`, `setup`): a bundle an earlier
    replayer installed without a manifest gets one, if nothing in it is someone else's. `on_event` hears
    the install (`Installing`)."""
    version = checked_version(agent, version)
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


def verified(agent: str, version: str) -> Path:
    """`ensure`, and every file as its manifest says: before anything from the bundle runs outside a run (an
    OpenCode import, in a sandbox of its own).
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
    return bool(agent_pin(agent).npm) or (path / BYTECODE).is_file()


def _compile(path: Path) -> None:
    """Compile a cached bundle's modules once (uv installs them compiled; a bundle an older replayer cached
    may not be). A module that does not compile (a test file in an older syntax) is left as it is, as uv
    leaves it."""
    hostproc.run(
        hostproc.python(path / "bin" / "python", "-m", "compileall", "-q", "-j", "0", str(path / "lib")),
        capture_output=True,
    )
    (path / BYTECODE).touch()


def _install_heard(agent: str, version: str, path: Path, on_event: OnEvent) -> None:
    """`_install`, telling `on_event` what, from where, how big so far (every second) and in the end."""
    pin = agent_pin(agent)
    source = f"npm {pin.npm}" if pin.npm else f"PyPI {pin.pypi}"
    started = time.monotonic()

    def heard(size: int, phase: Literal["start", "progress", "done"]) -> None:
        on_event(Installing(agent, version, source, size, time.monotonic() - started, phase))

    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(_WATCH_S):
            heard(sum(tree_size(p) for p in path.parent.glob(f"*{path.name}*")), "progress")

    heard(0, "start")
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        _install(agent, version, path)
    finally:
        stop.set()
        watcher.join()
    heard(tree_size(path), "done")


_WATCH_S = 1.0


def _install(agent: str, version: str, path: Path) -> None:
    pin = agent_pin(agent)
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
                # no package's install script runs on the host: the version is the trajectory's choice (the
                # CLIs' own scripts only copy or link the platform package's binary, which cli_path finds)
                "--ignore-scripts",
                # npm's own two retries, after 1 s and 4 s rather than 10 s and 60 s: a registry that cannot
                # be reached is said in 5 s, not 70
                "--fetch-retry-mintimeout=1000",
                "--fetch-retry-maxtimeout=4000",
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
    """uv's virtual environment and install, wheels only but for the pin's `builds`, compiled; a version
    other than the pin resolved as of its release (`_released_after`)."""
    assert pin.pypi and pin.python and pin.uv
    requirement = f"{pin.pypi}=={version}"
    extra = [f"{name}=={version}" for name in pin.with_] + pin.undeclared
    shutil.rmtree(path, ignore_errors=True)
    try:
        uv = _uv(pin.uv, agent, version)
        exclude = pin.exclude_newer if version == pin.version else _released_after(pin.pypi, version)
        env = _uv_env()
        try:  # the interpreter the user's PATH names (uv's own search, in the fixed PATH, finds the system's)
            python = hostproc.program(pin.python)
        except FileNotFoundError:
            raise _not_installed(agent, version, pin.python) from None
        _run(
            agent,
            version,
            "PyPI",
            [str(uv), "venv", "--no-config", "-q", "--python", python, str(path)],
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
    """pip of the virtual environment `venv` (uv's own), reading no configuration, installing wheels only."""
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


APT = ("apt", "host")
"""The cache lock (`cache_lock(*APT)`) held while this machine's apt runs: an `apt-get update` fails while
another apt holds its lists, and `replayer setup` builds the base image while it installs bundles."""


def _unpack_debs(agent: str, version: str, debs: list[str], path: Path) -> None:
    """Tools the agent's runtime calls that the base image lacks: unpacked into debs/, never installed."""
    download = path / "debs.download"
    download.mkdir()
    try:
        argv = ["apt-get", "download", "-q", *debs]
        env = hostproc.passed(*hostproc.NETWORK)
        with cache_lock(*APT):
            if hostproc.run(argv, env=env, cwd=download, capture_output=True).returncode != 0:
                hostproc.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
                _run(agent, version, "Debian", argv, env=env, cwd=download)
        for deb in sorted(download.glob("*.deb")):
            _run(agent, version, "Debian", ["dpkg-deb", "-x", str(deb), str(path / "debs")])
    finally:
        shutil.rmtree(download, ignore_errors=True)


def _not_installed(agent: str, version: str, program: str) -> BundleUnavailable:
    return BundleUnavailable(f"cannot install {agent}@{version}: {program} is not installed")


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
        raise _not_installed(agent, version, argv[0]) from None
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
