"""`replayer export`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from replayer import api
from replayer.cli.app import command, console
from replayer.cli.options import JsonOpt, emit_json, flag


@command()
def export(
    directory: Annotated[
        Path, typer.Argument(metavar="DIR", help="A batch directory, or one result directory.")
    ],
    out: Annotated[
        Path, typer.Option("--out", "-o", metavar="FILE", help="The JSONL file to write (atomically).")
    ],
    format: Annotated[
        str, typer.Option("--format", metavar="chat|atif", help="Record format: chat or atif (ATIF v1.7).")
    ] = "chat",
    force: Annotated[bool, flag("force", help="Replace an existing output file.")] = False,
    json: JsonOpt = False,
) -> None:
    """Export the prefixes of a batch (or one result directory) as training records.

    Examples:
      replayer export batch/ -o prefixes.jsonl
      replayer export batch/ --format atif -o trajectories.jsonl --force
    """
    if format not in ("chat", "atif"):
        raise typer.BadParameter(f"unknown format {format!r} (supported: chat, atif)", param_hint="--format")
    summary = api.export(directory, out, format, force=force)
    if json:
        emit_json(summary.model_dump())
    else:
        console.print(f"{summary.records} record(s), {summary.redactions} redaction(s): {summary.out}")
        if summary.pinned_tools:
            console.print(
                f"  note: {summary.pinned_tools} record(s) carry the pinned version's tool definitions: the "
                "recording version's could not be had (metadata.tools.note says why)",
                highlight=False,
            )
