"""A batch's manifest: JSONL, one job source per line, every line validated up front, and the fields a
manifest the user has not trusted may not set (docs/batch.md, "Trust")."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator

from replayer.floor import settings
from replayer.floor.errors import BadInput
from replayer.floor.foreign import MAX_FILE_BYTES, Folder, hold
from replayer.floor.io import open_input
from replayer.floor.limits import Budgets
from replayer.floor.requests import ContinueSettings, GitWorkspace, WorkspaceSpec
from replayer.pipeline.mock import MOCK
from replayer.verbs.boundaries import Sample

Mode = Literal["prepare", "replay", "continue"]


class ManifestEntry(BaseModel):
    """One line of the manifest."""

    model_config = ConfigDict(extra="forbid")
    trajectory: Path
    boundaries: Literal["all"] | list[int] | Sample = "all"
    """"all" (every valid boundary), a list, or {"sample": k, "seed": s}."""

    @field_validator("boundaries", mode="wrap")
    @classmethod
    def _one_of(cls, value: Any, handler: Any) -> Any:
        if isinstance(value, dict):
            return Sample.model_validate(value)  # its own errors name the bad field
        if value == "all" or (isinstance(value, list) and all(type(v) is int and v >= 0 for v in value)):
            return handler(value)
        raise ValueError('must be "all", a list of boundaries (integers >= 0), or {"sample": k, "seed": s}')

    @field_validator("mode", mode="before")
    @classmethod
    def _verb(cls, value: Any) -> Any:
        return "replay" if value == "run" else value

    mode: Mode = "prepare"
    """`replay` may be written `run`, the verb it runs (the job key and results say `replay`)."""
    task: str | None = None
    """The first user prompt, for a native form that does not store it (an OpenCode event log)."""
    cwd: str | None = None
    """The working directory, for a file that records none (--cwd); refused when the file records another."""
    session: str | None = None
    """The session to replay, for a file that holds several (an OpenHands evaluation output's instance_id,
    an OpenCode session id); for any other file, its own session id or nothing."""
    workspace: WorkspaceSpec | None = None
    image: str | None = None
    allow_degraded: bool = False
    budgets: Budgets = Field(default_factory=Budgets)
    continuation: ContinueSettings | None = None
    """The options of `run --continue` (docs/cli.md, "One vocabulary"); `cassette`: a cassette, or a folder
    of them (each job takes the one recorded from its trajectory and boundary)."""
    agent_version: str | None = None
    """As `--agent-version`: the version to run instead of the one the file records or implies."""
    require_verified: bool = False
    _names: dict[str, Path] = PrivateAttr(default_factory=dict)
    """Each path field (`trajectory`, `workspace`, `continuation.cassette`) as the manifest names it, where
    the field holds the name held for it (`_check_inside`): what the user sees and the job keys hold."""

    def named(self, field: str, held: Any) -> Any:
        """`held` (the value of `field`), or the name the manifest gave for it."""
        return self._names.get(field, held)

    @property
    def shown(self) -> Path:
        """The trajectory's name for the user."""
        return Path(self.named("trajectory", self.trajectory))


def read_manifest(path: Path, trusted: bool = False) -> list[tuple[int, ManifestEntry]]:
    """Every line validated up front; the first invalid one is a one-line BadInput naming it. A manifest is
    someone else's (a downloaded one) unless the user says it is theirs (`trusted`: `--trust-manifest`) or
    trusted it (`replayer trust MANIFEST`: its folder trusted and its content pinned, `floor/pinned.py`):
    until then none of its lines may choose where traffic or the key goes, the image, a repository to clone
    with the user's credentials, or looser budgets (`untrusted_field`). docs/batch.md, "Trust"."""
    if not trusted:
        content = settings.read_if_trusted(path, MAX_FILE_BYTES)
        if content is not None:
            return _read_manifest(path, iter(content.splitlines(keepends=True)), trusted=True)
    with contextlib.ExitStack() as stack:
        try:  # a FIFO or a device is refused before any read, never waited on
            fh = stack.enter_context(open_input(path))
        except BadInput as exc:
            reason = str(exc).removesuffix(", not a trajectory file")
            raise BadInput(f"the manifest: {reason}") from None
        try:
            entries = _read_manifest(path, fh, trusted)
        except OSError as exc:
            raise BadInput(f"cannot read the manifest {path}: {exc.strerror}") from None
    return entries


def _read_manifest(path: Path, lines: Iterator[bytes], trusted: bool) -> list[tuple[int, ManifestEntry]]:
    entries: list[tuple[int, ManifestEntry]] = []
    budgets: dict[bytes, Budgets] = {}  # lines with the same budgets share one (most lines: the default)
    for number, raw in enumerate(lines, 1):
        if not raw.strip() or raw.lstrip().startswith(b"#"):
            continue
        try:
            entry = ManifestEntry.model_validate(orjson.loads(raw))
        except orjson.JSONDecodeError as exc:
            raise BadInput(f"manifest line {number}: not JSON ({exc})") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "line"
            raise BadInput(f"manifest line {number}: {where}: {first['msg']}") from None
        field = None if trusted else untrusted_field(entry)
        if field is not None:
            why = _WHY.get(field, _WHY["budgets"])
            raise BadInput(
                f"manifest line {number}: {field}: a manifest you have not trusted may not set it ({why}); "
                f"trust the file with `replayer trust {path}` or pass --trust-manifest if it is yours"
            )
        base = path.parent
        if not trusted:
            _check_inside(path, number, entry)
        entry.trajectory = (base / entry.trajectory).absolute()
        if isinstance(entry.workspace, Path):
            entry.workspace = (base / entry.workspace).absolute()
        if entry.continuation is not None and entry.continuation.cassette is not None:
            tape = (base / entry.continuation.cassette).absolute()
            entry.continuation = entry.continuation.model_copy(update={"cassette": tape})
        if entry.continuation is not None and entry.continuation.record_cassette is not None:
            raise BadInput(
                f"manifest line {number}: continuation.record_cassette: a batch replays cassettes; "
                "record one with `run --record-cassette`"
            )
        if not entry.trajectory.exists():  # a file, or a directory (an OpenHands V1 conversation)
            raise BadInput(f"manifest line {number}: trajectory {entry.shown} does not exist")
        try:
            check_trajectory(entry.trajectory)
        except BadInput as exc:
            raise BadInput(
                f"manifest line {number}: trajectory {exc}".replace(str(entry.trajectory), str(entry.shown))
            ) from None
        if entry.mode != "prepare" and (
            entry.workspace is None or isinstance(entry.workspace, Path) and not entry.workspace.is_dir()
        ):
            raise BadInput(
                f"manifest line {number}: mode {entry.mode} needs an existing workspace directory or git+URL@REV"
            )
        if entry.mode == "continue" and (
            entry.continuation is None or not (entry.continuation.upstream or entry.continuation.cassette)
        ):
            raise BadInput(
                f"manifest line {number}: mode continue needs continuation.upstream (a URL, or mock for the "
                "built-in offline model) or .cassette"
            )
        entry.budgets = budgets.setdefault(orjson.dumps(entry.budgets.model_dump()), entry.budgets)
        entries.append((number, entry))
    if not entries:
        raise BadInput(f"the manifest {path} has no job sources")
    return entries


_WHY = {
    "continuation.upstream": "it would choose where traffic and the key go; only `mock` is allowed",
    "continuation.upstream_key_env": "it would choose which host variable is sent as the key",
    "image": "it would choose the image that runs (and is pulled)",
    "workspace": "a git+URL workspace is cloned with your git credentials",
    "budgets": "only a tighter one",
}


def _check_inside(path: Path, number: int, entry: ManifestEntry) -> None:
    """The files an untrusted manifest names are its own: relative names inside its folder, reached without
    a link (the foreign-folder rules, floor/foreign.py), else a one-line BadInput naming --trust-manifest. A
    downloaded manifest must not pick a host file (a workspace of ~/.ssh copied into the sandbox and shown
    to the model, a trajectory of /etc/shadow quoted in a report). Each is then named through the folder
    that holds it, kept open as it was checked (`foreign.hold`): a file or folder swapped for a link after
    this check is never followed when a job reads it."""
    cont = entry.continuation
    named = [("trajectory", entry.trajectory)]
    if isinstance(entry.workspace, Path):
        named.append(("workspace", entry.workspace))
    if cont is not None and cont.cassette is not None:
        named.append(("continuation.cassette", cont.cassette))
    held: dict[str, Path] = {}
    with Folder.open(path.parent, given=True) as folder:
        for field, name in named:
            if name.is_absolute() or ".." in name.parts:
                why = "an absolute name" if name.is_absolute() else "a name that leaves the folder (`..`)"
            else:
                try:
                    kind = folder.kind(str(name))
                except BadInput:  # "." and the like: no file of the folder
                    kind = "other"
                why = {"link": "a link, or a link on the way", "other": "not a file or folder"}.get(kind, "")
            if why:
                raise BadInput(
                    f"manifest line {number}: {field}: {name}: {why}; a manifest you have not trusted names only "
                    f"files inside its own folder (pass --trust-manifest if it is yours)"
                )
            if kind == "missing":
                continue  # said below, by its name
            try:
                held[field] = hold(folder, str(name), itself=field == "trajectory")
            except BadInput as exc:  # swapped while it was checked
                raise BadInput(f"manifest line {number}: {field}: {exc}") from None
    entry._names = {field: (path.parent / name).absolute() for field, name in named if field in held}
    entry.trajectory = held.get("trajectory", entry.trajectory)
    if "workspace" in held:
        entry.workspace = held["workspace"]
    if cont is not None and "continuation.cassette" in held:
        entry.continuation = cont.model_copy(update={"cassette": held["continuation.cassette"]})


def untrusted_field(entry: ManifestEntry) -> str | None:
    """The first field of `entry` a manifest the user has not trusted may not set (None: it sets none)."""
    cont = entry.continuation
    if cont is not None and cont.upstream is not None and cont.upstream != MOCK:
        return "continuation.upstream"
    if cont is not None and cont.upstream_key_env is not None:
        return "continuation.upstream_key_env"
    if entry.image is not None:
        return "image"
    if isinstance(entry.workspace, GitWorkspace):
        return "workspace"
    looser = _looser(entry.budgets, Budgets())
    return f"budgets.{looser}" if looser else None


def _looser(given: BaseModel, default: BaseModel) -> str | None:
    """The first budget of `given` above `default`'s (dotted), or None."""
    for name in type(given).model_fields:
        mine, base = getattr(given, name), getattr(default, name)
        found = _looser(mine, base) if isinstance(mine, BaseModel) else (name if mine > base else None)
        if found:
            return f"{name}.{found}" if isinstance(mine, BaseModel) else found
    return None


def check_trajectory(path: Path) -> os.stat_result:
    """The trajectory's stat, opened the way user input is: a FIFO or a device is a BadInput, never a hang
    (a directory is an OpenHands V1 conversation, which its adapter reads file by file)."""
    if path.is_dir():
        return path.stat()
    with open_input(path) as fh:
        return os.fstat(fh.fileno())
