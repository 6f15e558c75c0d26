"""The one pin file (sandboxes/images/pins.toml), loaded once."""

from __future__ import annotations

import contextlib
import functools
import importlib.resources
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from replayer.floor import settings

PIN_FILE = importlib.resources.files("replayer.sandboxes") / "images" / "pins.toml"
"""Package data of `sandboxes`: the same file in a clone and in an installed wheel."""


class AgentPin(BaseModel):
    """One agent, from npm (a CLI and its `bin`) or from PyPI (a package in its own virtual environment)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    npm: str | None = None
    pypi: str | None = None
    version: str
    bin: str | None = None
    """npm: the CLI inside the pinned version's bundle (other versions': found by `bundles.cli_path`)."""
    python: str | None = None
    """PyPI: the host interpreter the virtual environment is made with."""
    node: str | None = None
    """npm packages run by Node.js: the host's `node`, mounted read-only into the sandbox."""
    also: list[str] = []
    """Other versions installed besides `version`, for compare variants (`version=...`)."""
    with_: list[str] = Field(default=[], alias="with")
    """PyPI: further distributions installed into the same environment, at the agent's version."""
    undeclared: list[str] = []
    """PyPI: distributions the agent's own runtime starts but its package does not declare (a development
    install's), installed unversioned into the same environment, resolved with it (as of its release)."""
    uv: str | None = None
    """PyPI: install with this uv version (a resolver that does not backtrack for minutes; its install
    takes about a third of pip's CPU)."""
    exclude_newer: str | None = None
    """PyPI: ignore releases after this date, so a resolution made today is made again later (another
    version than the pin is resolved as of its own release)."""
    builds: list[str] = []
    """PyPI: the only distributions built from source (they publish no wheel); every other one is installed
    from a wheel, so that no build backend runs on the host but these."""
    debs: list[str] = []
    """Debian packages (name=version) unpacked into the bundle's debs/ folder: tools the agent calls."""

    @model_validator(mode="after")
    def _one_registry(self) -> AgentPin:
        if bool(self.npm) == bool(self.pypi):
            raise ValueError("a pin names its npm or its PyPI package, not both")
        if self.pypi and not (self.python and self.uv):
            raise ValueError(f"{self.pypi}: a PyPI pin names its python and the uv that installs it")
        return self

    @property
    def package(self) -> str:
        name = self.npm or self.pypi
        assert name, "a pin names its npm or PyPI package"
        return name


class BaseImagePin(BaseModel):
    model_config = ConfigDict(extra="forbid")
    suite: str
    mirror: str
    packages: list[str]
    tag: str


class Pins(BaseModel):
    model_config = ConfigDict(extra="forbid")
    base_image: BaseImagePin
    agents: dict[str, AgentPin]
    bundles: dict[str, str]

    def bundle_dir(self, agent: str) -> Path:
        """The bundle of the version this process runs (`replayer.floor.bundles` installs it)."""
        return bundles_root() / f"{agent}-{self.agents[agent].version}"


def bundles_root() -> Path:
    """The versioned bundle cache: the `bundles` setting (REPLAYER_BUNDLES, replayer.toml), else the pin
    file's `bundles.root`."""
    return settings.load().bundles or Path(_pin_file().bundles["root"])


@functools.cache
def load_pins() -> Pins:
    """The pins this process runs with (`running_version` changes an agent's version for a while)."""
    return _pin_file().model_copy(deep=True)


@contextlib.contextmanager
def running_version(agent: str, version: str) -> Iterator[None]:
    """Inside it, this process runs `agent` at `version`: every pin lookup (bundle folder, mounts, the CLI
    inside the bundle) sees that version. `pinned_version` still answers the pin file's."""
    pins = load_pins()
    before = pins.agents[agent]
    if version != before.version:
        pins.agents[agent] = before.model_copy(update={"version": version, "bin": None})
    try:
        yield
    finally:
        pins.agents[agent] = before


def pinned_version(agent: str) -> str:
    """The version the pin file names: verified, and the one whose semantics the hand-written reruns follow."""
    return _pin_file().agents[agent].version


@functools.cache
def _pin_file() -> Pins:
    return Pins.model_validate(tomllib.loads(PIN_FILE.read_text()))


def release(version: str) -> tuple[int, ...]:
    """The leading numbers of a version (2.0.64 -> (2, 0, 64), 1.0.0rc1 -> (1, 0, 0))."""
    numbers = []
    for part in version.split("."):
        match = re.match(r"\d+", part)
        if match is None:
            break
        numbers.append(int(match.group()))
        if match.end() != len(part):
            break
    return tuple(numbers)
