"""`replayer export DIR --format chat --out FILE`: one training record per prefix, in OpenAI chat form.

A record is {"messages", "tools", "metadata"}: the rebuilt prefix (expected_prefix.json) through the
agent's dialect, the tool definitions the pinned CLI sent on the wire (recorded data), and provenance.
Secret-looking strings are redacted; the count is in the metadata. Records are sorted, so the same
jobs give the same bytes.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict

import adapters
from replayer.errors import BadInput
from replayer.io import write_bytes_atomic
from replayer.models import ReplayResult

SECRETS = [
    re.compile(r"\bsk-(?:ant-)?[A-Za-z0-9_-]{16,}"),
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"),
    re.compile(r"(?i)(?<=bearer )[A-Za-z0-9._~+/=-]{12,}"),
    re.compile(r"(?<=://)[^/\s:@]+:[^/\s@]+(?=@)"),
]
REDACTED = "[REDACTED]"


class ExportSummary(BaseModel):
    model_config = ConfigDict(extra="forbid")
    records: int
    redactions: int
    out: str


def result_dirs(root: Path) -> list[Path]:
    """A batch directory's finished jobs, or one result directory."""
    if (root / "result.json").is_file():
        return [root]
    jobs = root / "jobs"
    if not jobs.is_dir():
        raise BadInput(f"{root} is neither a result directory nor a batch directory")
    return sorted(d for d in jobs.iterdir() if not d.name.startswith(".") and (d / "result.json").is_file())


def redact(value: Any) -> tuple[Any, int]:
    if isinstance(value, str):
        count = 0
        for pattern in SECRETS:
            value, n = pattern.subn(REDACTED, value)
            count += n
        return value, count
    if isinstance(value, list):
        pairs = [redact(v) for v in value]
        return [v for v, _ in pairs], sum(n for _, n in pairs)
    if isinstance(value, dict):
        items = {k: redact(v) for k, v in value.items()}
        return {k: v for k, (v, _) in items.items()}, sum(n for _, n in items.values())
    return value, 0


def chat_record(job: Path) -> dict[str, Any]:
    result = ReplayResult.model_validate_json((job / "result.json").read_bytes())
    adapter = adapters.by_name(result.agent)
    prefix = orjson.loads((job / result.expected_prefix).read_bytes())
    messages = adapter.dialect().to_chat(prefix)
    cont = result.continuation
    metadata = {
        "source_sha256": result.source_sha256,
        "boundary": result.after_step,
        "agent": result.agent,
        "agent_version": result.agent_version,
        "pinned_version": result.pins.cli_version,
        "mode": "prepare" if result.request.mode == "prepare" else ("continue" if cont else "replay"),
        "input_condition": cont.input_condition if cont else "replayed_boundary_only",
        "divergences": sum(d.status == "different" for d in result.divergences),
        "historical_kept": sum(d.status == "historical_kept" for d in result.divergences),
        "image": result.image,
        "image_id": result.image_id,
        "job": job.name,
    }
    record, count = redact(
        {"messages": messages, "tools": adapter.chat_tools(job / "native"), "metadata": metadata}
    )
    record["metadata"]["redactions"] = count
    return record


def export_chat(root: Path, out: Path) -> ExportSummary:
    records = [chat_record(job) for job in result_dirs(root)]
    records.sort(
        key=lambda r: (r["metadata"]["source_sha256"], r["metadata"]["boundary"], r["metadata"]["job"])
    )
    write_bytes_atomic(out, b"".join(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) + b"\n" for r in records))
    return ExportSummary(
        records=len(records), redactions=sum(r["metadata"]["redactions"] for r in records), out=str(out)
    )
