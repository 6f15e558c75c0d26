"""The one pin file (sandboxes/images/pins.toml), loaded once."""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

PIN_FILE = Path(__file__).resolve().parent.parent / "sandboxes" / "images" / "pins.toml"


class AgentPin(BaseModel):
    """One agent, from npm (a CLI and its `bin`) or from PyPI (a package in its own virtual environment)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    npm: str | None = None
    pypi: str | None = None
    version: str
    bin: str | None = None
    """npm: the CLI inside the bundle."""
    python: str | None = None
    """PyPI: the host interpreter the virtual environment is made with."""
    node: str | None = None
    """npm packages run by Node.js: the host's `node`, mounted read-only into the sandbox."""
    also: list[str] = []
    """Other versions installed besides `version`, for compare variants (`version=...`)."""
    with_: list[str] = Field(default=[], alias="with")
    """PyPI: further exact requirements installed into the same environment."""
    uv: str | None = None
    """PyPI: install with this uv version (a resolver that does not backtrack for minutes)."""
    exclude_newer: str | None = None
    """PyPI with uv: ignore releases after this date, so a resolution made today is made again later."""
    debs: list[str] = []
    """Debian packages (name=version) unpacked into the bundle's debs/ folder: tools the agent calls."""

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


def use_agent_version(agent: str, version: str) -> None:
    """From now on this process runs `agent` at `version` (a compare variant's): every pin lookup sees it."""
    pins = load_pins()
    pins.agents[agent] = pins.agents[agent].model_copy(update={"version": version})


def bundle_installed(agent: str, version: str) -> bool:
    """Whether scripts/install_agents.sh has completed the bundle of `agent` at `version`."""
    return (Path(load_pins().bundles["root"]) / f"{agent}-{version}" / ".installed").is_file()
