"""`replayer view DIR`: one replay's output directory as DIR/report.html: the prefix as a conversation, each
rerun call's historical and fresh observation side by side, the continuation after the boundary, versions
and degradations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from replayer import adapters
from replayer.adapters.base import Adapter
from replayer.floor.errors import BadInput, OutputError
from replayer.floor.foreign import Folder
from replayer.floor.io import write_bytes_atomic
from replayer.floor.pins import pinned_version, running_version
from replayer.floor.results import ReplayResult, RerunRecord, TimelineEntry
from replayer.pipeline import timeline
from replayer.pipeline.steps import RERUNS
from replayer.verbs.report import render_view

PAGE = "report.html"
TEXT_CHARS = 64 * 1024
"""A message or observation longer than this is cut on the page (the files hold it whole)."""


class ViewRerun(RerunRecord):
    excerpts: bool = False
    """The directory predates reruns.json: the divergence's excerpts stand in for the observations."""


class ViewData(BaseModel):
    model_config = ConfigDict(extra="forbid")
    result: ReplayResult
    prefix: list[TimelineEntry]
    reruns: list[ViewRerun]
    continuation: list[TimelineEntry]


def _read(directory: Path, name: str) -> bytes:
    """DIR/NAME, a name relative to the result directory (the result names its files), read the foreign way
    (no link followed, regular files only, bounded)."""
    with Folder.open(directory, given=True) as folder:
        return folder.read(name)


def _json(directory: Path, name: str) -> Any:
    with Folder.open(directory, given=True) as folder:
        return folder.json(name)


def _cut(text: str) -> str:
    return text if len(text) <= TEXT_CHARS else text[:TEXT_CHARS] + "\n[... cut ...]"


def _shown(adapter: Adapter, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages with each tool message's text out of its wire wrapper (`observation_text`)."""
    return [
        {**m, "content": adapter.observation_text(m["content"])}
        if m.get("role") == "tool" and isinstance(m.get("content"), str)
        else m
        for m in messages
    ]


def _reruns(directory: Path, result: ReplayResult, adapter: Adapter) -> list[ViewRerun]:
    path = directory / RERUNS
    if path.is_file():
        records = [RerunRecord.model_validate(r) for r in _json(directory, RERUNS)]
        return [
            ViewRerun(
                **r.model_dump(exclude={"historical", "fresh"}),
                historical=None if r.historical is None else _cut(adapter.observation_text(r.historical)),
                fresh=_cut(adapter.observation_text(r.fresh)),
            )
            for r in records
        ]
    return [
        ViewRerun(
            step=d.step,
            call_id=d.call_id,
            tool=d.tool,
            historical=d.historical_excerpt,
            fresh=d.fresh_excerpt or "",
            excerpts=True,
        )
        for d in result.divergences
        if d.status != "historical_kept"
    ]


def load(directory: Path) -> ViewData:
    if not directory.is_dir():
        raise BadInput(f"{directory} is not a directory")
    path = directory / "result.json"
    if not path.is_file():
        hint = (
            " (a compare output: its report is report.html)" if (directory / "compare.json").is_file() else ""
        )
        raise BadInput(f"{directory} is not a replay output directory: it has no result.json{hint}")
    try:
        result = ReplayResult.model_validate_json(_read(directory, "result.json"))
    except ValidationError as exc:
        raise BadInput(f"{path} is not a replay result: {exc.errors()[0]['msg']}") from None
    adapter = adapters.by_name(result.agent)
    expected = _json(directory, result.expected_prefix)
    dialect = adapter.dialect()
    version = result.version.version if result.version else pinned_version(result.agent)
    with running_version(result.agent, version):  # the continued session in the form of the version that ran
        cont = result.continuation
        after = timeline.continued(adapter, directory, expected, cont.model, TEXT_CHARS) if cont else []
    return ViewData(
        result=result,
        prefix=timeline.entries(_shown(adapter, dialect.to_chat(expected)), TEXT_CHARS),
        reruns=_reruns(directory, result, adapter),
        continuation=after,
    )


def write(directory: Path) -> Path:
    """DIR/report.html, written atomically."""
    page = render_view(load(directory).model_dump(mode="json"))
    out = directory / PAGE
    try:
        write_bytes_atomic(out, page.encode())
    except OSError as exc:
        raise OutputError(f"cannot write {out}: {exc.strerror}") from None
    return out
