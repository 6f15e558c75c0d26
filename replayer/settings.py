"""What users set once instead of at every command: `replayer.toml` (the project's, found from the working
directory upward), `~/.config/replayer/config.toml` (the user's; `$XDG_CONFIG_HOME/replayer/config.toml`)
and `REPLAYER_*` environment variables. Precedence: a flag or API argument > the environment > the
project file > the user file > the built-in default. docs/cli.md, "Settings"."""

from __future__ import annotations

import functools
import os
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, ValidationError

from replayer.errors import SettingsError
from replayer.models import ContinueSettings, SandboxLimits

PROJECT_FILE = "replayer.toml"


class LimitSettings(BaseModel):
    """`[limits]`: any of the `--limits` keys (the rest keep their defaults)."""

    model_config = ConfigDict(extra="forbid")
    memory: str | None = None
    pids: PositiveInt | None = None
    cpus: float | None = None
    disk: str | None = None
    files: PositiveInt | None = None

    def spec(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.model_dump().items() if v is not None}


class Settings(BaseModel):
    """One layer of settings, or all of them merged. None: not set here."""

    model_config = ConfigDict(extra="forbid")
    upstream: str | None = None
    """The model service base URL of `run --continue` and `compare` (--upstream)."""
    upstream_key_env: str | None = None
    """The host variable holding the upstream key (--upstream-key-env)."""
    image: str | None = None
    """The sandbox image of `run` and `compare` (--image)."""
    limits: LimitSettings = Field(default_factory=LimitSettings)
    """Container limits (--limits); a flag's keys replace these key by key."""
    workers: PositiveInt | None = None
    """Jobs or runs at once of `batch` and `compare` (-j/--workers)."""
    bundles: Path | None = None
    """The versioned agent bundle cache (default: the pin file's, /var/lib/sandbox-replayer/bundles)."""
    workspaces: Path | None = None
    """The clone cache of `--workspace git+URL@REV` (default: workspaces/ beside the bundle cache)."""
    verdicts: Path | None = None
    """Where `verify` stores verdicts and runs read them (default: verdicts/ beside the bundle cache)."""

    def continuation(self) -> ContinueSettings:
        """The continuation settings these set (the layer the flags of `run` and `compare` go over)."""
        return ContinueSettings(upstream=self.upstream, upstream_key_env=self.upstream_key_env)

    def sandbox_limits(self, flag: str | None = None) -> SandboxLimits:
        """These limits with a `--limits` spec's keys over them (a bad flag value raises ValueError)."""
        return SandboxLimits.parse(_joined({**self.limits.spec(), **limit_items(flag or "")}))


_ENV = {
    "REPLAYER_UPSTREAM": "upstream",
    "REPLAYER_UPSTREAM_KEY_ENV": "upstream_key_env",
    "REPLAYER_IMAGE": "image",
    "REPLAYER_LIMITS": "limits",
    "REPLAYER_WORKERS": "workers",
    "REPLAYER_BUNDLES": "bundles",
    "REPLAYER_WORKSPACES": "workspaces",
    "REPLAYER_VERDICTS": "verdicts",
}
"""Environment variable -> setting; an empty variable is an unset one."""
_PATHS = ("bundles", "workspaces", "verdicts")


def user_file(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "replayer" / "config.toml"


def project_file(cwd: Path | None = None) -> Path | None:
    """The nearest replayer.toml from `cwd` upward."""
    here = (cwd or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        if (folder / PROJECT_FILE).is_file():
            return folder / PROJECT_FILE
    return None


def load(cwd: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """The settings in force: environment over project file over user file, merged setting by setting."""
    env = os.environ if environ is None else environ
    project = project_file(cwd)
    layers = [
        _layer(_from_environment(env), "the environment (REPLAYER_*)"),
        *_file_layers(project, user_file(env)),
    ]
    merged: dict[str, Any] = {}
    for layer in reversed(layers):  # the lowest first; each higher layer replaces what it sets
        merged.update(layer.model_dump(exclude_none=True, exclude={"limits"}))
        merged["limits"] = {**merged.get("limits", {}), **layer.limits.model_dump(exclude_none=True)}
    return Settings.model_validate(merged)


def _from_environment(env: Mapping[str, str]) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for var, name in _ENV.items():
        value = env.get(var)
        if not value:
            continue
        if name == "limits":
            try:
                SandboxLimits.parse(value)
            except ValueError as exc:
                raise SettingsError(f"{var}: {exc}") from None
            found[name] = limit_items(value)
        else:
            found[name] = value
    return found


def limit_items(spec: str) -> dict[str, str]:
    """`memory=4g,cpus=2` -> {"memory": "4g", "cpus": "2"} (SandboxLimits.parse checks the values)."""
    items = (part.strip().partition("=") for part in spec.split(","))
    return {key: value for key, _, value in items if key}


def _joined(items: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in items.items())


@functools.cache
def _file_layers(project: Path | None, user: Path) -> tuple[Settings, ...]:
    """The project's and the user's file, read once per process."""
    return tuple(_read(path) for path in (project, user) if path is not None and path.is_file())


def _read(path: Path) -> Settings:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"{path}: not a readable TOML file ({exc})") from None
    for name in _PATHS:  # a relative folder is the file's neighbour, wherever the command runs
        if isinstance(data.get(name), str):
            data[name] = str(path.parent / Path(data[name]).expanduser())
    limits = data.get("limits")
    if isinstance(limits, dict):
        try:
            SandboxLimits.parse(_joined(limits))
        except ValueError as exc:
            raise SettingsError(f"{path}: limits: {exc}") from None
    return _layer(data, str(path))


def _layer(data: dict[str, Any], source: str) -> Settings:
    try:
        return Settings.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            known = ", ".join(Settings.model_fields)
            raise SettingsError(f"{source}: unknown setting {where!r} (known: {known})") from None
        raise SettingsError(f"{source}: {where}: {error['msg']} (got {error['input']!r})") from None
