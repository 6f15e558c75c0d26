"""Cassettes on disk: the provider traffic of one continuation, recorded once, replayed offline.

A cassette is a directory: `cassette.json` (schema version, agent and version, boundary, the rebuilt
prefix's hash, the exchanges in order, and an inventory of every other file with role, size and SHA-256),
`exchanges/NNNN-KIND.request.json` (each request body as forwarded, envelope stripped),
`exchanges/NNNN-KIND.answer.body` (each answer as the agent received it: SSE or JSON) and `outcome.json`
(what the recording produced, normalized: replayer/pipeline/oracle.py). Secrets are redacted before anything is
written. A cassette is immutable: loading checks every file against the inventory and refuses an unknown,
missing or changed one before anything starts (docs/cassettes.md).
"""

from __future__ import annotations

import stat
from collections import Counter
from pathlib import Path
from typing import Any, Literal

import orjson
from pydantic import BaseModel, Field, ValidationError

from replayer.bridges.playback import Answer, Exchange, Kind
from replayer.floor.errors import BadInput, CassetteError, SandboxError, excerpt
from replayer.floor.foreign import Folder
from replayer.floor.io import OutputDir, sha256_hex, write_bytes_atomic
from replayer.floor.model_base import Frozen
from replayer.floor.redact import redact, redact_text
from replayer.floor.release import __version__
from replayer.floor.safecopy import shown, walk
from replayer.floor.trajectory import Trajectory

SCHEMA = 1
MANIFEST = "cassette.json"
OUTCOME = "outcome.json"
EXCHANGES = "exchanges"
Role = Literal["request", "answer", "outcome"]
SUFFIXES: dict[Role, str] = {"request": ".request.json", "answer": ".answer.body", "outcome": ".json"}
"""The only file kinds a cassette holds: no databases, logs, credentials or workspaces."""
MAX_FILE_BYTES = 64 << 20
MAX_TOTAL_BYTES = 1 << 30
MAX_FILES = 20_000
MAX_EXCHANGES = 5_000
MAX_PARSED_BYTES = 128 << 20
"""The JSON a load parses (request files and the outcome): parsing costs about four times the bytes in
memory, so this bounds what a cassette someone else wrote can make the host hold."""


class CassetteFile(Frozen):
    path: str
    role: Role
    size: int
    sha256: str


class RecordedExchange(Frozen):
    seq: int
    kind: Kind
    method: str
    path: str
    status: int
    headers: dict[str, str] = Field(default_factory=dict)
    request: str
    answer: str


class Origin(Frozen):
    """Which continuation a cassette holds; a replay must start from the same trajectory and boundary."""

    agent: str
    agent_version: str
    """The version that ran the recording (another version may replay it: its requests are compared)."""
    after_step: int
    source_sha256: str
    session_id: str | None
    prefix_sha256: str
    """SHA-256 of the rebuilt prefix (expected_prefix.json, keys sorted)."""
    input_condition: str


class CassetteManifest(Frozen):
    schema_version: int
    recorded_by: str
    origin: Origin
    redactions: int
    exchanges: list[RecordedExchange]
    outcome: str = OUTCOME
    files: list[CassetteFile]


class Cassette(BaseModel):
    manifest: CassetteManifest
    exchanges: list[Exchange]
    outcome: dict[str, Any]


def prefix_sha256(expected_prefix: list[dict[str, Any]]) -> str:
    return sha256_hex(orjson.dumps(expected_prefix, option=orjson.OPT_SORT_KEYS))


def origin_of(
    traj: Trajectory, agent_version: str, after_step: int, prefix: list[dict[str, Any]], condition: str
) -> Origin:
    return Origin(
        agent=traj.agent,
        agent_version=agent_version,
        after_step=after_step,
        source_sha256=traj.source_sha256,
        session_id=traj.session_id,
        prefix_sha256=prefix_sha256(prefix),
        input_condition=condition,
    )


def refuse_existing(dest: Path) -> None:
    """Before a recording starts: a cassette is never replaced."""
    if dest.exists() or dest.is_symlink():
        raise CassetteError(f"{dest} exists: a cassette is written once, into a new directory")


def unrecordable(exchanges: list[Exchange], upstream_errors: int) -> str | None:
    """Why a continuation cannot be kept as a cassette, or None."""
    if upstream_errors or not all(e.complete for e in exchanges):
        return "the upstream failed during the recording; a cassette holds complete answers only"
    if not any(e.kind == "main" for e in exchanges):
        return "no main-thread request reached the upstream"
    return None


def write(dest: Path, origin: Origin, exchanges: list[Exchange], outcome: dict[str, Any], key: str) -> int:
    """Write the cassette atomically; the number of redactions. `key`: the upstream key, redacted by value."""
    out = OutputDir(dest)
    try:
        files: list[CassetteFile] = []
        recorded: list[RecordedExchange] = []
        redactions = 0

        def put(rel: str, role: Role, data: bytes) -> None:
            if len(data) > MAX_FILE_BYTES:
                raise CassetteError(f"{rel} would be {len(data)} bytes, over the {MAX_FILE_BYTES}-byte limit")
            write_bytes_atomic(out.tmp / rel, data)
            files.append(CassetteFile(path=rel, role=role, size=len(data), sha256=sha256_hex(data)))

        for n, e in enumerate(exchanges, 1):
            stem = f"{EXCHANGES}/{n:04d}-{e.kind}"
            body, found = redact(e.body, (key,))
            text, in_answer = redact_text(e.answer.body.decode("utf-8", "surrogateescape"), (key,))
            redactions += found + in_answer
            put(stem + SUFFIXES["request"], "request", orjson.dumps(body, option=orjson.OPT_INDENT_2))
            put(stem + SUFFIXES["answer"], "answer", text.encode("utf-8", "surrogateescape"))
            headers, _ = redact(e.answer.headers, (key,))
            recorded.append(
                RecordedExchange(
                    seq=n,
                    kind=e.kind,
                    method=e.method,
                    path=e.path,
                    status=e.answer.status,
                    headers=headers,
                    request=stem + SUFFIXES["request"],
                    answer=stem + SUFFIXES["answer"],
                )
            )
        put(OUTCOME, "outcome", orjson.dumps(outcome, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
        over = _over_limits(len(recorded), files)
        if over is not None:
            raise CassetteError(f"the cassette would be over its limits: {over}")
        manifest = CassetteManifest(
            schema_version=SCHEMA,
            recorded_by=__version__,
            origin=origin,
            redactions=redactions,
            exchanges=recorded,
            files=files,
        )
        data = orjson.dumps(manifest.model_dump(mode="json"), option=orjson.OPT_INDENT_2)
        write_bytes_atomic(out.tmp / MANIFEST, data)
        out.commit()
    except BaseException:
        out.discard()
        raise
    return redactions


def load(path: Path) -> Cassette:
    """The cassette at `path`, every file checked against the inventory; CassetteError otherwise."""
    if not path.is_dir() or path.is_symlink():
        raise CassetteError(f"{path} is not a cassette directory")
    manifest = _manifest(path)
    found = _walk(path)
    listed = {f.path: f for f in manifest.files}
    for rel in sorted(found - listed.keys() - {MANIFEST}):
        raise CassetteError(f"{path}: unknown file {excerpt(rel)}: a cassette holds only the files it lists")
    data: dict[str, bytes] = {}
    for f in manifest.files:
        if f.path not in found:
            raise CassetteError(f"{path}: {f.path} is missing")
        if not f.path.endswith(SUFFIXES[f.role]) or f.size > MAX_FILE_BYTES:
            raise CassetteError(f"{path}: {f.path} is not an allowed {f.role} file")
        raw = _read(path, f.path)
        if len(raw) != f.size or sha256_hex(raw) != f.sha256:
            raise CassetteError(f"{path}: {f.path} does not match its SHA-256 in {MANIFEST} (changed)")
        data[f.path] = raw
    try:
        exchanges = [
            Exchange(
                seq=e.seq,
                kind=e.kind,
                method=e.method,
                path=e.path,
                body=orjson.loads(data[e.request]),
                answer=Answer(status=e.status, headers=e.headers, body=data[e.answer]),
            )
            for e in manifest.exchanges
        ]
        outcome = orjson.loads(data[manifest.outcome])
    except (KeyError, orjson.JSONDecodeError) as exc:
        raise CassetteError(f"{path}: an exchange or the outcome names no listed file ({exc})") from None
    return Cassette(manifest=manifest, exchanges=exchanges, outcome=outcome)


def select(path: Path, traj: Trajectory, after_step: int) -> Path:
    """`path` itself when it is a cassette; in a folder of cassettes, the one recorded from this trajectory
    and boundary (their manifests are read; the one selected is checked whole when it is loaded)."""
    if (path / MANIFEST).exists() or not path.is_dir():
        return path
    for candidate in sorted(p for p in path.iterdir() if p.is_dir() and (p / MANIFEST).is_file()):
        origin = _manifest(candidate).origin
        if (origin.source_sha256, origin.after_step) == (traj.source_sha256, after_step):
            return candidate
    raise CassetteError(f"no cassette in {path} was recorded from {traj.source} at step {after_step}")


def check_origin(cassette: Cassette, path: Path, traj: Trajectory, after_step: int) -> None:
    """Before the run: the cassette holds a continuation of this trajectory from this boundary."""
    origin = cassette.manifest.origin
    if origin.agent != traj.agent:
        raise CassetteError(f"{path} holds a {origin.agent} continuation, not {traj.agent}")
    if origin.source_sha256 != traj.source_sha256:
        raise CassetteError(
            f"{path} was recorded from another trajectory (SHA-256 {origin.source_sha256[:12]}…)"
        )
    if origin.after_step != after_step:
        raise CassetteError(f"{path} continues from step {origin.after_step}, not {after_step}")


def _manifest(path: Path) -> CassetteManifest:
    if not (path / MANIFEST).is_file():
        raise CassetteError(f"{path} holds no {MANIFEST}: not a cassette")
    try:
        raw = orjson.loads(_read(path, MANIFEST))
    except orjson.JSONDecodeError as exc:
        raise CassetteError(f"{path / MANIFEST} is not JSON ({exc})") from None
    if isinstance(raw, dict) and raw.get("schema_version") != SCHEMA:
        raise CassetteError(
            f"{path}: cassette schema {excerpt(raw.get('schema_version'))}, this replayer reads {SCHEMA}"
        )
    try:
        manifest = CassetteManifest.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise CassetteError(f"{path / MANIFEST}: {where}: {first['msg']}") from None
    over = _over_limits(len(manifest.exchanges), manifest.files)
    if over is not None:
        raise CassetteError(f"{path}: over the cassette limits: {over}")
    # a file named twice would be parsed twice: the bounds above would not hold (the writer never does it)
    named = Counter(name for e in manifest.exchanges for name in (e.request, e.answer))
    named[manifest.outcome] += 1
    twice = [name for name, n in named.items() if n > 1]
    if twice:
        raise CassetteError(
            f"{path}: {excerpt(twice[0])} is named {named[twice[0]]} times in {MANIFEST}: "
            "each exchange has its own files"
        )
    return manifest


def _over_limits(exchanges: int, files: list[CassetteFile]) -> str | None:
    """Which bound a cassette of these exchanges and files is over (docs/cassettes.md, "Limits"), or None."""
    if exchanges > MAX_EXCHANGES:
        return f"{exchanges} exchanges (at most {MAX_EXCHANGES})"
    if len(files) > MAX_FILES:
        return f"{len(files)} files (at most {MAX_FILES})"
    total = sum(f.size for f in files)
    if total > MAX_TOTAL_BYTES:
        return f"{total} bytes (at most {MAX_TOTAL_BYTES})"
    parsed = sum(f.size for f in files if f.role != "answer")
    if parsed > MAX_PARSED_BYTES:
        return f"{parsed} bytes of JSON to parse (at most {MAX_PARSED_BYTES})"
    return None


def _walk(root: Path) -> set[str]:
    """Every regular file under root (relative paths); anything else (a link, a device) is refused."""
    found: set[str] = set()
    try:
        for entry in walk(root):
            rel, mode = shown(entry.path), entry.stat.st_mode
            if stat.S_ISDIR(mode):
                if rel != EXCHANGES:
                    raise CassetteError(f"{root}: unknown directory {excerpt(rel)}")
            elif stat.S_ISREG(mode):
                found.add(rel)
                if len(found) > MAX_FILES + 1:
                    raise CassetteError(f"{root}: over {MAX_FILES} files")
            else:
                raise CassetteError(f"{root}: {excerpt(rel)} is not a regular file")
    except SandboxError as exc:
        raise CassetteError(str(exc)) from None
    return found


def _read(root: Path, name: str) -> bytes:
    """A cassette's file the foreign way: a name inside it, no link followed, a regular file, bounded."""
    try:
        with Folder.open(root) as folder:
            return folder.read(name, MAX_FILE_BYTES)
    except BadInput as exc:
        raise CassetteError(str(exc)) from None
