"""The one pin file (sandboxes/images/pins.toml), loaded once."""

from __future__ import annotations

import functools
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict

PIN_FILE = Path(__file__).resolve().parent.parent / "sandboxes" / "images" / "pins.toml"


class AgentPin(BaseModel):
    model_config = ConfigDict(extra="forbid")
    npm: str
    version: str
    bin: str


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
