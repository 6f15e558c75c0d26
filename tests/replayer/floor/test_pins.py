"""The pin file's agents (replayer/floor/pins.py): each from one registry; a PyPI one installed by a pinned
uv (the one PyPI installer: its resolution bounded by a date, about a third of pip's CPU)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from replayer.floor.pins import AgentPin, load_pins


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"pypi": "mini-swe-agent", "python": "python3.11"}, "the uv that installs it"),
        ({"pypi": "mini-swe-agent", "uv": "0.13.9"}, "names its python"),
        ({"pypi": "a", "npm": "b", "python": "python3.11", "uv": "0.13.9"}, "not both"),
        ({}, "not both"),
    ],
)
def test_a_pin_that_cannot_be_installed_is_refused_as_the_file_loads(fields: dict, said: str) -> None:
    with pytest.raises(ValidationError, match=said):
        AgentPin(version="1.0.0", **fields)


def test_every_pypi_agent_of_the_pin_file_is_installed_by_uv_as_of_a_date() -> None:
    pypi = {name: pin for name, pin in load_pins().agents.items() if pin.pypi}
    assert {"mini_swe_agent", "openhands", "openhands_v0"} <= set(pypi)
    assert all(pin.uv and pin.exclude_newer for pin in pypi.values())
