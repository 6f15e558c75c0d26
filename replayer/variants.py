"""`--variant NAME=SPEC`: SPEC is empty (the shared settings), a JSON object of VariantSpec fields, or
comma-separated key=value pairs (keys below; `env.KEY=VALUE` adds to the agent's environment)."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from replayer.models import Variant, VariantSpec

_KEYS = {
    "version": "version",
    "model": "model",
    "prompt": "prompt",
    "upstream": "upstream",
    "key_env": "upstream_key_env",
    "patch": "patch",
    "max_steps": "max_steps",
    "idle_timeout": "idle_timeout_s",
}


def parse_variant(text: str) -> Variant:
    """Raises ValueError with a one-line reason."""
    name, sep, spec = text.partition("=")
    if not sep:
        raise ValueError(f"expected NAME=SPEC, got {text!r}")
    fields: dict[str, Any]
    if spec.lstrip().startswith("{"):
        try:
            fields = orjson.loads(spec)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"variant {name}: the JSON spec does not parse ({exc})") from None
    else:
        fields = {}
        for pair in filter(None, spec.split(",")):
            key, eq, value = pair.partition("=")
            key = key.strip()
            if not eq:
                raise ValueError(f"variant {name}: expected key=value, got {pair!r}")
            if key.startswith("env.") and len(key) > 4:
                fields.setdefault("agent_env", {})[key[4:]] = value
            elif key in _KEYS:
                fields[_KEYS[key]] = value
            else:
                known = ", ".join([*_KEYS, "env.KEY"])
                raise ValueError(f"variant {name}: unknown key {key!r} (known: {known})")
    try:
        return Variant(name=name, spec=VariantSpec.model_validate(fields))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "name"
        raise ValueError(f"variant {name!r}: {where}: {first['msg']}") from None
