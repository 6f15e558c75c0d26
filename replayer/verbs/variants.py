"""`--variant NAME=SPEC`: SPEC is empty (the shared settings), a JSON object, or comma-separated key=value
pairs. A key is named as its option is (`boundary_prompt` for `--boundary-prompt`, `agent_env.KEY=VALUE`
for `--agent-env KEY=VALUE`), with `-` or `_`; the short names of VariantSpec (`prompt`, `key_env`,
`env.KEY`, ...) are accepted too. docs/cli.md has the table."""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError

from replayer.floor.requests import Variant, VariantSpec

KEYS = {
    "agent_version": "version",
    "version": "version",
    "model": "model",
    "boundary_prompt": "prompt",
    "prompt": "prompt",
    "upstream": "upstream",
    "upstream_key_env": "upstream_key_env",
    "key_env": "upstream_key_env",
    "patch": "patch",
    "cassette": "cassette",
    "max_steps": "max_steps",
    "max_requests": "max_requests",
    "max_tokens": "max_tokens",
    "end_leftovers": "end_leftovers",
    "idle_timeout": "idle_timeout_s",
    "idle_timeout_s": "idle_timeout_s",
}
"""A key (option name or short name, `-` read as `_`) -> its VariantSpec field."""
ENV_KEYS = ("agent_env", "env")
"""`agent_env.KEY=VALUE` (or `env.KEY=VALUE`) adds KEY to the agent's environment."""
_KNOWN = (
    "agent_version (version), model, boundary_prompt (prompt), upstream, upstream_key_env (key_env), "
    "patch, cassette, max_steps, max_requests, max_tokens, end_leftovers, idle_timeout, agent_env.KEY (env.KEY)"
)


def parse_variant(text: str) -> Variant:
    """Raises ValueError with a one-line reason."""
    name, sep, spec = text.partition("=")
    if not sep:
        raise ValueError(f"expected NAME=SPEC, got {text!r}")
    fields: dict[str, Any] = {}
    if spec.lstrip().startswith("{"):
        try:
            given = orjson.loads(spec)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"variant {name}: the JSON spec does not parse ({exc})") from None
        for key, value in given.items():
            _set(fields, name, _field(name, str(key), env_dict=True), value)
    else:
        for pair in filter(None, spec.split(",")):
            key, eq, value = pair.partition("=")
            if not eq:
                raise ValueError(f"variant {name}: expected key=value, got {pair!r}")
            head, dot, env_name = key.strip().partition(".")
            if dot and head.replace("-", "_") in ENV_KEYS and env_name:
                fields.setdefault("agent_env", {})[env_name] = value
            else:
                _set(fields, name, _field(name, key.strip(), env_dict=False), value)
    try:
        return Variant(name=name, spec=VariantSpec.model_validate(fields))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "name"
        raise ValueError(f"variant {name!r}: {where}: {first['msg']}") from None


def _field(variant: str, key: str, env_dict: bool) -> str:
    """The VariantSpec field a key names; a JSON spec gives the environment as one object."""
    normal = key.replace("-", "_")
    if env_dict and normal in ENV_KEYS:
        return "agent_env"
    if normal in KEYS:
        return KEYS[normal]
    raise ValueError(f"variant {variant}: unknown key {key!r} (known: {_KNOWN})")


def _set(fields: dict[str, Any], variant: str, field: str, value: Any) -> None:
    if field in fields:
        raise ValueError(f"variant {variant}: {field} is given twice")
    fields[field] = value
