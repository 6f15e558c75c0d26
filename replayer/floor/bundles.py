"""The versioned bundle cache: one folder per agent and exact version, what it holds (listed, removed, where
an npm agent's CLI is in it) and its lock per bundle. The installer that fills it is replayer/installer.py."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from replayer.floor import registry
from replayer.floor.errors import ReplayError, excerpt, unknown_agent
from replayer.floor.pins import AgentPin, bundles_root, load_pins

INSTALLED = ".installed"
"""Written last into a complete bundle: the exact requirement it holds."""
BYTECODE = ".bytecode"
"""In a bundle uv made: its modules are compiled. uv does not compile by default, and the sandbox mounts
the bundle read-only, so Python compiled every module again at every start (openhands-ai's runtime
starts four interpreters: a minute and more)."""


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
    return agent, checked_version(agent, registry.concrete(agent, agent_pin(agent), version))


def pinned_specs() -> list[tuple[str, str]]:
    """(agent, version) of every pinned version and the pin file's `also` versions."""
    return [(agent, v) for agent, pin in load_pins().agents.items() for v in (pin.version, *pin.also)]


def remove(agent: str, version: str) -> bool:
    path = bundle_dir(agent, checked_version(agent, version))
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
                size_bytes=tree_size(path),
                pinned=version == pin.version or version in pin.also,
            )
        )
    return found


def _agent_of(folder: str) -> str | None:
    """The agent a folder belongs to: the longest agent name it starts with (openhands_v0 before openhands)."""
    names = sorted(load_pins().agents, key=len, reverse=True)
    return next((n for n in names if folder.startswith(n + "-")), None)


def agent_pin(agent: str) -> AgentPin:
    pin = load_pins().agents.get(agent)
    if pin is None:
        raise unknown_agent([agent], list(load_pins().agents))
    return pin


def checked_version(agent: str, version: str) -> str:
    """A bundle is named by a released version only: a dist-tag or `v1.2.3` is made concrete first
    (`registry.concrete`), so one release has one folder."""
    agent_pin(agent)
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


def tree_size(path: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_size
    return total


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
    pin = agent_pin(agent)
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
