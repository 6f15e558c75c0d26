#!/usr/bin/env python3
"""Print one value of sandboxes/images/pins.toml: `pin.py base_image.tag`; lists print space-separated."""

import pathlib
import sys
import tomllib

pins = tomllib.loads(
    (pathlib.Path(__file__).resolve().parent.parent / "sandboxes/images/pins.toml").read_text()
)
value = pins
for key in sys.argv[1].split("."):
    value = value[key]
print(" ".join(value) if isinstance(value, list) else value)
