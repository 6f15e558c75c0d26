"""A batch's jobs: each boundary of each manifest line, keyed by a content hash of what determines its
result (so that a batch directory resumes: nothing is computed twice), and the request each runs."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from replayer.floor.errors import BadInput, PlanRefused, ReplayError
from replayer.floor.requests import ContinueSettings, GitWorkspace, ReplayRequest
from replayer.floor.trajectory import Trajectory
from replayer.verbs.batch_manifest import ManifestEntry, Mode
from replayer.verbs.boundaries import pick_boundaries

TOKEN_LEDGER = "token-ledger.json"
"""DIR's ledger of the batch's own token budget (`--max-tokens`), written anew at each start that sets one
(bridges/budget.py): every job's continuation fits its requests within it."""
LINE_LEDGERS = "ledgers"
"""DIR's folder of the ledgers of lines that set their own `continuation.max_tokens` (line-N.json): a line's
budget spans its jobs, across starts too."""


class Job(NamedTuple):
    """One boundary of one manifest line. Its options are the line's entry, shared by the line's jobs, not
    copied into each: a batch holds every job until it has run, so a job is kept small."""

    key: str
    line: int
    boundary: int
    entry: ManifestEntry
    image_id: str | None = None
    """The id of the sandbox image the key was computed with (replay and continue jobs of a named image): a
    node of a cluster runs the job only with that image (`replayer.provision`)."""
    replay: str = ""
    """The key of what the job shares with the other boundaries of its trajectory and options (its key
    without the boundary): replay jobs of one replay key run as one replay (`groups`)."""

    @property
    def trajectory(self) -> Path:
        return self.entry.trajectory

    @property
    def mode(self) -> Mode:
        return self.entry.mode

    def request(
        self, out: Path, labels: dict[str, str] | None = None, force: bool = False, batch: Path | None = None
    ) -> ReplayRequest:
        """`batch`: the batch's output folder; a `max_tokens` the line sets spans all its jobs there."""
        entry = self.entry
        cont = entry.continuation.request() if entry.continuation else None
        if cont is not None and batch is not None and "max_tokens" in cont.model_fields_set:
            cont = cont.model_copy(update={"token_ledger": batch / LINE_LEDGERS / f"line-{self.line}.json"})
        if cont is not None and batch is not None and (batch / TOKEN_LEDGER).is_file():
            cont = cont.model_copy(update={"batch_ledger": batch / TOKEN_LEDGER})
        named: dict[str, object] = {
            field: entry.named(field, None)
            for field in ("trajectory", "workspace")
            if entry.named(field, None)
        }
        cassette = entry.named("continuation.cassette", None)
        if cont is not None and cassette is not None:
            named["continuation"] = cont.model_copy(update={"cassette": cassette})
        return ReplayRequest(
            mode="prepare" if entry.mode == "prepare" else "run",
            trajectory=entry.trajectory,
            after_step=self.boundary,
            out=out,
            workspace=entry.workspace,
            image=entry.image,
            allow_degraded=entry.allow_degraded,
            budgets=entry.budgets,
            continuation=cont,
            agent_env=cont.agent_env if cont else {},
            task=entry.task,
            cwd=entry.cwd,
            session=entry.session,
            labels=labels or {},
            agent_version=entry.agent_version,
            require_verified=entry.require_verified,
            force=force,
        ).naming(named)


def _boundaries(entry: ManifestEntry, traj: Trajectory, number: int) -> list[int]:
    try:
        return pick_boundaries(entry.boundaries, traj)
    except PlanRefused as exc:  # a manifest line is an input: the whole manifest is refused
        raise BadInput(f"manifest line {number}: {exc}") from None


def _each_session(entries: list[tuple[int, ManifestEntry]]) -> Iterator[tuple[int, ManifestEntry]]:
    """An entry without a session, of a file that holds several, stands for one entry per session."""
    from replayer.pipeline import multisession

    for number, entry in entries:
        try:
            held = multisession.held(entry.trajectory) if entry.session is None else []
        except ReplayError as exc:
            raise BadInput(f"manifest line {number}: {exc}") from None
        if not held:
            yield number, entry
        for one in held:
            yield number, entry.model_copy(update={"session": one.id})


def expand(entries: list[tuple[int, ManifestEntry]], image_ids: dict[str, str]) -> list[Job]:
    """Every job, keyed by a content hash of what determines its result."""
    from replayer.floor.pins import load_pins
    from replayer.pipeline.engine import load
    from replayer.pipeline.result import pins_for

    unique: dict[str, Job] = {}  # the same job listed twice runs once
    for number, entry in _each_session(entries):
        try:
            adapter, traj = load(entry.trajectory, entry.task, entry.cwd, entry.session)
        except ReplayError as exc:
            raise BadInput(f"manifest line {number}: {exc}") from None
        image = entry.image or load_pins().base_image.tag
        for boundary in _boundaries(entry, traj, number):
            identity: dict[str, Any] = {
                "trajectory": traj.source_sha256,
                "boundary": boundary,
                "mode": entry.mode,
                "image": image_ids.get(image) if entry.mode != "prepare" else None,
                "pins": pins_for(adapter).model_dump(),
                "options": {
                    **({"task": entry.task} if entry.task is not None else {}),
                    **({"cwd": entry.cwd} if entry.cwd is not None else {}),
                    **({"session": entry.session} if entry.session is not None else {}),
                    "workspace": _workspace_key(entry.named("workspace", entry.workspace)),
                    "allow_degraded": entry.allow_degraded,
                    **({"agent_version": entry.agent_version} if entry.agent_version else {}),
                    **({"require_verified": True} if entry.require_verified else {}),
                    "budgets": entry.budgets.model_dump(),
                    "continuation": _continuation_key(
                        entry.continuation, entry.named("continuation.cassette", None)
                    ),
                },
            }
            key = hashlib.sha256(orjson.dumps(identity, option=orjson.OPT_SORT_KEYS)).hexdigest()[:24]
            shared = {k: v for k, v in identity.items() if k != "boundary"}
            replay = hashlib.sha256(orjson.dumps(shared, option=orjson.OPT_SORT_KEYS)).hexdigest()[:24]
            unique[key] = Job(key, number, boundary, entry, identity["image"], replay)
    return list(unique.values())


_KEYED_CONTINUATION = (
    "upstream",
    "cassette",
    "upstream_key_env",
    "boundary_prompt",
    "max_steps",
    "idle_timeout_s",
    "model",
    "agent_env",
)
"""The continuation fields a manifest had before ContinueSettings: always in a job's key."""


def _continuation_key(cont: ContinueSettings | None, cassette: Path | None = None) -> dict[str, Any] | None:
    """The continuation as job keys have always held it, so that a batch directory resumes across versions:
    no upstream is "", a setting added since is in the key only when it is set. `cassette`: the name the
    manifest gave the one held."""
    if cont is None:
        return None
    fields = cont.model_dump(mode="json")
    if cassette is not None:
        fields["cassette"] = str(cassette)
    fields["upstream"] = fields["upstream"] or ""
    return {k: v for k, v in fields.items() if k in _KEYED_CONTINUATION or v is not None}


def _workspace_key(workspace: Path | GitWorkspace | None) -> str | None:
    if isinstance(workspace, GitWorkspace):
        return workspace.spec
    return str(workspace) if workspace else None


def image_ids(tags: set[str | None]) -> dict[str, str]:
    """Image tag -> id, for the job keys of replay and continue jobs (the default image when None)."""
    if not tags:
        return {}
    from replayer.floor.pins import load_pins
    from replayer.sandboxes import engines

    engine = engines.chosen()
    engine.check()
    ids = {}
    for tag in tags - {"auto"}:  # auto: the image each trajectory names; the trajectory's hash keys it
        name = tag or load_pins().base_image.tag
        found = engine.image_attrs(name)
        if found is None:
            raise engine.missing_image(name)
        ids[name] = str(found["Id"])
    return ids
