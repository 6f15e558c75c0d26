"""The one pin file (sandboxes/images/pins.toml), loaded once."""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict

PIN_FILE = Path(__file__).resolve().parent.parent / "sandboxes" / "images" / "pins.toml"


class AgentPin(BaseModel):
    """One agent, from npm (a CLI and its `bin`) or from PyPI (a package in its own virtual environment)."""

    model_config = ConfigDict(extra="forbid")
    npm: str | None = None
    pypi: str | None = None
    version: str
    bin: str | None = None
    """npm: the CLI inside the bundle."""
    python: str | None = None
    """PyPI: the host interpreter the virtual environment is made with."""
    node: str | None = None
    """npm packages run by Node.js: the host's `node`, mounted read-only into the sandbox."""

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
        pin = self.agents[agent]
        return Path(self.bundles["root"]) / f"{agent}-{pin.version}"


@functools.cache
def load_pins() -> Pins:
    return Pins.model_validate(tomllib.loads(PIN_FILE.read_text()))
