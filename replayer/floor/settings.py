"""What users set once instead of at every command: `replayer.toml` (the project's, found from the working
directory upward), `~/.config/replayer/config.toml` (the user's; `$XDG_CONFIG_HOME/replayer/config.toml`)
and `REPLAYER_*` environment variables. Precedence: a flag or API argument > the environment > the
project file > the user file > the built-in default. docs/cli.md, "Settings".

A project file is someone else's until the user trusts it (`replayer trust DIR`: its folder in `trusted`,
its content pinned in `pinned` of the user's file; `pinned.py` says when a trusted file is honoured): until
then it may set only what can neither run nor write anything on the host, send traffic or the key
elsewhere, nor loosen a limit (`PROJECT_KEYS`: tighter `[limits]`, fewer `workers`, a lower `max_tokens`); any other key refuses
every command (exit 13). docs/reliability.md, "Trust model"."""

from __future__ import annotations

import functools
import os
import stat
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from replayer.floor import pinned
from replayer.floor.errors import SettingsError
from replayer.floor.limits import Count, Cpus, SandboxLimits, parse_size
from replayer.floor.options import EngineName, RegistryUrl, layered
from replayer.floor.requests import DEFAULT_MAX_TOKENS

PROJECT_FILE = "replayer.toml"
MAX_FILE_BYTES = 1 << 20
"""A settings file is a few lines; a bigger one is refused before it is read."""
_LAYERED = layered()
PROJECT_KEYS = tuple(name for name, how in _LAYERED.items() if how.untrusted != "never")
"""What a project file in a folder the user has not trusted may set (limits only tighter than the user's)."""
WHY_NOT = {name: how.why for name, how in _LAYERED.items() if how.untrusted == "never"}
"""Why a project file of a folder the user has not trusted may not set the other settings."""


class LimitSettings(BaseModel):
    """`[limits]`: any of the `--limits` keys (the rest keep their defaults)."""

    model_config = ConfigDict(extra="forbid")
    memory: str | None = None
    pids: Count | None = None
    cpus: Cpus | None = None
    disk: str | None = None
    files: Count | None = None
    output: str | None = None

    def spec(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.model_dump().items() if v is not None}


class Settings(BaseModel):
    """One layer of settings, or all of them merged, as a file or the environment gives them (None: not set
    here). Each field is an option whose declaration (`options.py`: help, variable, trust) has `layers`."""

    model_config = ConfigDict(extra="forbid")
    upstream: str | None = None
    upstream_key_env: str | None = None
    image: str | None = None
    limits: LimitSettings = Field(default_factory=LimitSettings)
    """A `[limits]` table; a flag's keys replace these key by key."""
    workers: Count | None = None
    max_tokens: Count | None = None
    """`run`'s and `compare`'s continuation budget, and the whole batch's (`replayer batch --max-tokens`)."""
    bundles: Path | None = None
    npm_registry: RegistryUrl | None = None
    pypi_index: RegistryUrl | None = None
    workspaces: Path | None = None
    verdicts: Path | None = None
    trusted: list[Path] | None = None
    pinned: dict[str, str] | None = None
    engine: EngineName | None = None

    def sandbox_limits(self, flag: str | None = None) -> SandboxLimits:
        """These limits with a `--limits` spec's keys over them (a bad flag value raises ValueError)."""
        return SandboxLimits.parse(_joined({**self.limits.spec(), **limit_items(flag or "")}))


_ENV = {env: name for name in Settings.model_fields if (env := _LAYERED[name].env)}
"""Environment variable -> setting; an empty variable is an unset one."""
_PATHS = ("bundles", "workspaces", "verdicts")


def user_file(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    base = env.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "replayer" / "config.toml"


def project_file(cwd: Path | None = None) -> Path | None:
    """The nearest replayer.toml from `cwd` upward (a link is found, not followed: `_read` decides)."""
    here = (cwd or Path.cwd()).absolute()
    for folder in (here, *here.parents):
        try:
            mode = os.lstat(folder / PROJECT_FILE).st_mode
        except OSError:
            continue
        if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            return folder / PROJECT_FILE
    return None


def load(cwd: Path | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """The settings in force: environment over project file over user file, merged setting by setting. A
    project file of a folder the user has not trusted that sets more than it may is refused here, so every
    command and API call that reads settings refuses it alike."""
    env = os.environ if environ is None else environ
    layers = [
        _layer(_from_environment(env), "the environment (REPLAYER_*)"),
        *_file_layers(project_file(cwd), user_file(env)),
    ]
    merged: dict[str, Any] = {}
    for layer in reversed(layers):  # the lowest first; each higher layer replaces what it sets
        merged.update(layer.model_dump(exclude_none=True, exclude={"limits"}))
        merged["limits"] = {**merged.get("limits", {}), **layer.limits.model_dump(exclude_none=True)}
    return Settings.model_validate(merged)


def trusted_folders(environ: Mapping[str, str] | None = None) -> list[Path]:
    """The folders the user's file trusts, as written there."""
    return list(_user_settings(environ).trusted or [])


def pins(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The files the user trusted (`pinned.key` of each) -> the sha256 of the content they trusted."""
    return dict(_user_settings(environ).pinned or {})


def read_if_trusted(path: Path, max_bytes: int, environ: Mapping[str, str] | None = None) -> bytes | None:
    """The bytes of `path` (a manifest) if it is a file the user trusted, its folder trusted and its content
    pinned; None if it is not one. A pinned file that no longer holds the trusted content, or that someone
    else could change, is refused (SettingsError, one line), not taken as untrusted: its owner is asked again."""
    mine = _user_settings(environ)
    known = mine.pinned or {}
    if not is_trusted(path.parent, mine.trusted or []) or pinned.key(path) not in known:
        return None
    return pinned.read_trusted(path, known, max_bytes)


def _user_settings(environ: Mapping[str, str] | None) -> Settings:
    path = user_file(environ)
    return _read(path, trusted=True) if _present(path) else Settings()


def is_trusted(folder: Path, trusted: list[Path]) -> bool:
    """`folder` is one the user trusts: the same folder, links resolved on both sides (a folder below a
    trusted one is not trusted by it, as with git's safe.directory)."""
    real = os.path.realpath(folder)
    return any(os.path.realpath(each) == real for each in trusted)


def forget() -> None:
    """Read the settings files again at the next `load` (after `replayer trust` changed the user's file)."""
    _file_layers.cache_clear()


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
    """The project's and the user's file, read once per process; the project's checked against the trust
    the user's gives."""
    mine = _read(user, trusted=True) if _present(user) else Settings()
    if project is None:
        return (mine,)
    trusted = is_trusted(project.parent, mine.trusted or [])
    if trusted:
        theirs = _parse(project, pinned.read_trusted(project, mine.pinned or {}, MAX_FILE_BYTES))
    else:
        theirs = _read(project, trusted=False)
    for name in ("trusted", "pinned"):
        if name in theirs.model_fields_set:
            raise SettingsError(f"{project}: sets {name!r}: {WHY_NOT[name]} ({user})")
    if not trusted:
        _check_untrusted(project, theirs, mine)
    return theirs, mine


def _present(path: Path) -> bool:
    return os.path.lexists(path)


def _check_untrusted(path: Path, theirs: Settings, mine: Settings) -> None:
    """Refuse what a project file of a folder the user has not trusted may not set: any key but
    `PROJECT_KEYS`, and a limit looser than the one the user's file (or the default) sets."""
    hint = f"trust its folder with `replayer trust {path.parent}` if it is yours, or remove the key"
    forbidden = sorted(theirs.model_fields_set - set(PROJECT_KEYS))
    if forbidden:
        name = forbidden[0]
        raise SettingsError(
            f"{path}: sets {name!r}, which a folder you have not trusted may not set "
            f"({WHY_NOT.get(name, 'it is not one of ' + ', '.join(PROJECT_KEYS))}); {hint}"
        )
    ceiling = mine.workers or os.cpu_count() or 1
    if theirs.workers is not None and theirs.workers > ceiling:
        raise SettingsError(
            f"{path}: workers {theirs.workers} is more than the {ceiling} in force without it; a folder you "
            f"have not trusted may only lower it; {hint}"
        )
    most = (
        mine.max_tokens or DEFAULT_MAX_TOKENS
    )  # a batch sets none by default: it may only go below this too
    if theirs.max_tokens is not None and theirs.max_tokens > most:
        raise SettingsError(
            f"{path}: max_tokens {theirs.max_tokens} is more than the {most} in force without it; a folder you "
            f"have not trusted may only lower it; {hint}"
        )
    below, asked = mine.sandbox_limits(), theirs.sandbox_limits()
    for key in sorted(theirs.limits.model_fields_set):
        field = _LIMIT_FIELDS[key]
        if _limit(asked, field) > _limit(below, field):
            allowed = getattr(mine.limits, key) or getattr(SandboxLimits(), field) or "the default"
            raise SettingsError(
                f"{path}: limits: {key} {getattr(theirs.limits, key)} is looser than the {allowed} in force "
                f"without it; a folder you have not trusted may only tighten a limit; {hint}"
            )


_LIMIT_FIELDS = {
    "memory": "memory",
    "pids": "pids",
    "cpus": "cpus",
    "disk": "disk_bytes",
    "files": "copy_files",
    "output": "output_bytes",
}
"""A `[limits]` key -> the SandboxLimits field it sets."""


def _amount(value: str | int | float) -> float:
    return parse_size(value) if isinstance(value, str) else value


def _limit(limits: SandboxLimits, field: str) -> float:
    if field == "output_bytes":  # unset: derived from disk
        return limits.output_total()
    return _amount(getattr(limits, field))


def _read(path: Path, trusted: bool) -> Settings:
    """A settings file: a regular file of at most MAX_FILE_BYTES; a link only for the user's own file
    (`trusted`; a trusted folder's project file is read by `pinned`)."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if trusted else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if not trusted and os.path.islink(path):
            raise SettingsError(
                f"{path}: a symbolic link; in a folder you have not trusted a settings file is read only "
                f"as a regular file (`replayer trust {path.parent}` if it is yours)"
            ) from None
        raise SettingsError(f"{path}: not a readable TOML file ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_FILE_BYTES:
            raise SettingsError(f"{path}: not a regular file of at most {MAX_FILE_BYTES} bytes")
        raw = fh.read(MAX_FILE_BYTES + 1)
    return _parse(path, raw[:MAX_FILE_BYTES])


def _parse(path: Path, raw: bytes) -> Settings:
    """The settings a file read from `path` holds."""
    try:
        data = tomllib.loads(raw.decode())
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SettingsError(f"{path}: not a readable TOML file ({exc})") from None
    for name in _PATHS:  # a relative folder is the file's neighbour, wherever the command runs
        if isinstance(data.get(name), str):
            data[name] = str(path.parent / Path(data[name]).expanduser())
    folders = data.get("trusted")
    if isinstance(folders, list):
        if not all(isinstance(f, str) and Path(f).expanduser().is_absolute() for f in folders):
            raise SettingsError(f"{path}: trusted: a list of absolute folders (got {folders!r})")
        data["trusted"] = [str(Path(f).expanduser()) for f in folders]
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
