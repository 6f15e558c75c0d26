"""`replayer export DIR --format chat|atif --out FILE`: one training record per prefix, in OpenAI chat form
or as an ATIF v1.7 trajectory (Harbor's format) built from the same record.

A record is {"messages", "tools", "metadata"}: the rebuilt prefix (expected_prefix.json) through the
agent's dialect, the tool definitions of the version that recorded the session (its CLI's, as sent on the
wire: replayer.tool_capture; the metadata's `tools` says whose, and when the pinned set stands in), and
provenance.
Secret-looking strings are redacted; the count is in the metadata. Records are sorted, so the same
jobs give the same bytes.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from replayer import adapters
from replayer.floor.errors import BadInput, OutputError, ReplayError
from replayer.floor.foreign import Folder
from replayer.floor.io import write_bytes_atomic
from replayer.floor.pins import pinned_version, running_version
from replayer.floor.redact import redact
from replayer.floor.results import ReplayResult
from replayer.verbs import tool_capture


class ExportSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")
    records: int
    redactions: int
    pinned_tools: int = 0
    """Records that carry the pinned version's tool definitions: their own version's could not be had."""
    out: str


def result_folders(root: Path) -> Iterator[Folder]:
    """A batch directory's finished jobs, or one result directory, each opened in turn. DIR may be a
    download: a job is opened below it without following a link (`Folder`), and a job whose result.json is
    there but not a plain file is refused when read, never skipped in silence."""
    with Folder.open(root, given=True) as top:
        if top.kind("result.json") != "missing":
            yield top
            return
        if top.kind("jobs") != "dir":
            raise BadInput(f"{root} is neither a result directory nor a batch directory")
        with top.sub("jobs") as jobs:
            names = [
                n
                for n in jobs.names()
                if not n.startswith(".") and jobs.kind(f"{n}/result.json") != "missing"
            ]
            for name in names:
                with jobs.sub(name) as job:
                    yield job


def _result(job: Folder) -> ReplayResult:
    try:
        return ReplayResult.model_validate_json(job.read("result.json"))
    except ValidationError as exc:
        raise BadInput(
            f"{job.path / 'result.json'} is not a replay result: {exc.errors()[0]['msg']}"
        ) from None


def chat_record(job: Path) -> dict[str, Any]:
    """The chat record of the result directory `job` the user named."""
    with Folder.open(job, given=True) as folder:
        return _chat_record(folder, _result(folder))


@functools.cache
def _tools_source(
    agent: str, recorded: str | None, data_agent: str, model: str | None
) -> tool_capture.ToolsSource:
    """Once per export process: a version whose capture failed is not run again for each of its records."""
    return tool_capture.source_for(agent, recorded, data_agent, model)


@functools.cache
def _session_model(trajectory: Path, source_sha256: str) -> str | None:
    """The model the session records (the capture talks to it), from its file when it is still there: not a
    link, and still the file the result was made from (a downloaded result names a path someone else chose;
    a host file that is not that trajectory is never used)."""
    try:
        with Folder.open(trajectory.parent) as folder:
            if folder.kind(trajectory.name) not in ("file", "dir"):
                return None
        adapter = adapters.detect(trajectory)
        traj = adapter.parse(trajectory)
    except ReplayError:
        return None
    return adapter.default_model(traj) if traj.source_sha256 == source_sha256 else None


def _chat_record(folder: Folder, result: ReplayResult) -> dict[str, Any]:
    job = folder.path
    adapter = adapters.by_name(result.agent)
    prefix = folder.json(result.expected_prefix)  # a name inside the folder, no link, bounded
    dialect = adapter.dialect()
    messages = dialect.to_chat(prefix)
    cont = result.continuation
    ran = (
        result.version.version if result.version else result.pins.cli_version or pinned_version(result.agent)
    )
    with running_version(result.agent, ran):
        continued = (
            adapter.continued_prefix(job, cont.model) if cont else None
        )  # as the version that ran sent it
    metadata = {
        "source_sha256": result.source_sha256,
        "boundary": result.after_step,
        "agent": result.agent,
        "agent_version": result.agent_version,
        "pinned_version": result.pins.cli_version,
        "ran_version": ran,
        "mode": "prepare" if result.request.mode == "prepare" else ("continue" if cont else "replay"),
        "input_condition": cont.input_condition if cont else "replayed_boundary_only",
        "divergences": sum(d.status == "different" for d in result.divergences),
        "historical_kept": sum(d.status == "historical_kept" for d in result.divergences),
        "image": result.image,
        "image_id": result.image_id,
        "job": job.name,
    }
    copied = len(messages)
    metadata["copied_context_messages"] = copied
    if cont is not None:
        metadata["continuation"] = {
            "agent_status": cont.agent_status,
            "steps_used": cont.steps_used,
            "model": cont.model,
            "prefix_messages": len(messages),
        }
        if continued is not None:
            messages = dialect.to_chat(continued)  # the prefix, then what the agent did from the boundary
        elif cont.steps_used or cont.agent_status == "session_unreadable":
            why = next((e for name, e in sorted(cont.files.items()) if name.endswith("_error")), "not there")
            raise BadInput(
                f"{job}: its continuation ({cont.steps_used} step(s)) cannot be read back ({why}): "
                "the prefix alone is not the record"
            )
    metadata["agent_messages"] = len(messages) - copied
    model = _session_model(result.request.trajectory, result.source_sha256)
    tools = _tools_source(result.agent, result.agent_version, adapter.tools_data_name(), model)
    with running_version(result.agent, tools.version):  # the definitions of the version that recorded it
        chat_tools = adapter.chat_tools(job / "native")
    metadata["tools"] = tools.model_dump(mode="json", exclude_none=True)
    record, count = redact({"messages": messages, "tools": chat_tools, "metadata": metadata})
    record["metadata"]["redactions"] = count
    return record


def check_out(out: Path, root: Path, force: bool) -> None:
    """An existing output file is replaced only with --force, and never one of the exported results."""
    if out.is_dir():
        raise OutputError(f"{out} is a directory")
    if not (out.exists() or out.is_symlink()):
        return
    if not force:
        raise OutputError(f"{out} exists (--force replaces it)")
    if root.resolve() in out.resolve().parents:
        raise OutputError(f"{out} is a file of the exported {root} (choose another --out)")


def write_records(out: Path, lines: list[bytes]) -> None:
    try:
        write_bytes_atomic(out, b"".join(lines))
    except OSError as exc:
        raise OutputError(f"cannot write {out}: {exc.strerror}") from None


def export_chat(root: Path, out: Path, force: bool = False) -> ExportSummary:
    check_out(out, root, force)
    records = [_chat_record(job, _result(job)) for job in result_folders(root)]
    records.sort(
        key=lambda r: (r["metadata"]["source_sha256"], r["metadata"]["boundary"], r["metadata"]["job"])
    )
    write_records(out, [orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in records])
    return ExportSummary(
        records=len(records),
        redactions=sum(r["metadata"]["redactions"] for r in records),
        pinned_tools=sum(r["metadata"]["tools"]["source"] == "pinned_fallback" for r in records),
        out=str(out),
    )


ATIF_VERSION = "ATIF-v1.7"


def atif_steps(messages: list[dict[str, Any]], copied: int) -> list[dict[str, Any]]:
    """Chat-form messages as ATIF steps: an agent step carries its tool calls and, as its observation,
    the results that answer them. The steps of the first `copied` messages (the replayed prefix) are copied
    context (`is_copied_context: true`, which Harbor's model reads as "not for training"); the steps after
    them are the continuation's own (`false`)."""
    steps: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        role = message.get("role")
        if role == "tool":
            owner = next((s for s in reversed(steps) if s["source"] == "agent" and s.get("tool_calls")), None)
            ids = {c["tool_call_id"] for c in owner["tool_calls"]} if owner else set()
            if owner is None or message.get("tool_call_id") not in ids:
                continue  # a result without its call: the chat form dropped nothing else
            result = {"source_call_id": message.get("tool_call_id"), "content": message.get("content") or ""}
            owner.setdefault("observation", {"results": []})["results"].append(result)
            continue
        step: dict[str, Any] = {
            "step_id": len(steps) + 1,
            "source": {"assistant": "agent", "system": "system"}.get(str(role), "user"),
            "message": message.get("content") or "",
            "is_copied_context": index < copied,
        }
        calls = message.get("tool_calls") or []
        if role == "assistant" and calls:
            step["tool_calls"] = [
                {
                    "tool_call_id": c.get("id"),
                    "function_name": c.get("function", {}).get("name"),
                    "arguments": _arguments(c.get("function", {}).get("arguments")),
                }
                for c in calls
            ]
        steps.append(step)
    return steps


def _arguments(raw: Any) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = orjson.loads(raw or "{}")
    except orjson.JSONDecodeError:
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_raw": value}


def atif_record(job: Folder) -> dict[str, Any]:
    """One ATIF v1.7 trajectory for one prefix, built from its chat record (same redaction, same provenance)."""
    result = _result(job)
    record = _chat_record(job, result)
    metadata = record["metadata"]
    steps = atif_steps(record["messages"], metadata["copied_context_messages"])
    copied = sum(bool(s.get("is_copied_context")) for s in steps)
    model = (metadata.get("continuation") or {}).get("model")
    for step in steps[copied:]:  # the continuation's own answers: the model that gave them
        if step["source"] == "agent" and model:
            step["model_name"] = model
    return {
        "schema_version": ATIF_VERSION,
        "trajectory_id": metadata["job"],
        "session_id": result.session_id,
        "agent": {
            "name": metadata["agent"],
            "version": metadata["ran_version"],  # the version that ran (metadata.tools: whose definitions)
            "tool_definitions": record["tools"],
        },
        "steps": steps,
        "notes": (
            f"A prefix replayed by sandbox-replayer: steps 1-{copied} are copied context (the prefix), "
            f"{len(steps) - copied} after them are the agent's own (its continuation at {metadata['ran_version']})."
        ),
        "final_metrics": {"total_steps": len(steps)},
        "extra": {"sandbox_replayer": metadata},
    }


def export_atif(root: Path, out: Path, force: bool = False) -> ExportSummary:
    check_out(out, root, force)
    records = [atif_record(job) for job in result_folders(root)]
    records.sort(
        key=lambda r: (
            r["extra"]["sandbox_replayer"]["source_sha256"],
            r["extra"]["sandbox_replayer"]["boundary"],
            r["trajectory_id"],
        )
    )
    write_records(out, [orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in records])
    metadata = [r["extra"]["sandbox_replayer"] for r in records]
    return ExportSummary(
        records=len(records),
        redactions=sum(m["redactions"] for m in metadata),
        pinned_tools=sum(m["tools"]["source"] == "pinned_fallback" for m in metadata),
        out=str(out),
    )
