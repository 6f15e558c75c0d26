"""`replayer view`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from replayer import api
from replayer.cli.app import command, console
from replayer.cli.options import JsonOpt, emit_json


@command()
def view(
    directory: Annotated[
        Path,
        typer.Argument(
            metavar="DIR", help="A replay's output directory (run, prepare), or any folder of results."
        ),
    ],
    json: JsonOpt = False,
) -> None:
    """Write DIR/report.html: the prefix, each rerun's historical and fresh observation side by side, the
    continuation, versions and degradations. On a folder of results (batch, compare, verify outputs, or
    several runs), write DIR/index.html: every run found, filterable, each with its report.

    Examples:
      replayer view out/
      replayer view batch-out/
    """
    shown = api.view(directory)
    if json:
        emit_json(shown.model_dump(exclude_none=True, exclude={"skipped"} if shown.report else set()))
    elif shown.report:
        console.print(f"report: {shown.report}", highlight=False)
    else:
        console.print(f"{shown.runs} run(s): {shown.index}", highlight=False)
        for note in shown.skipped:
            console.print(f"  note: {note}", markup=False, highlight=False)
