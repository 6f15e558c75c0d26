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
    serve: Annotated[
        bool,
        typer.Option("--serve", help="Then serve DIR read-only on 127.0.0.1 (its page at /) until Ctrl-C."),
    ] = False,
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="--serve's port (0: a free one).")
    ] = api.VIEW_PORT,
) -> None:
    """Write DIR/report.html: the prefix, each rerun's historical and fresh observation side by side, the
    continuation, versions and degradations. On a folder of results (batch, compare, verify outputs, or
    several runs), write DIR/index.html: every run found, filterable, each with its report.

    With --serve, DIR is then served read-only on 127.0.0.1 (no link followed, only DIR's own files; the
    pages as HTML, every other file as plain text) until Ctrl-C.

    Examples:
      replayer view out/
      replayer view batch-out/
      replayer view out/ --serve --port 7575
    """
    if serve:
        api.serve_view(
            directory,
            port,
            lambda url: console.print(f"serving {directory} at {url} (Ctrl-C stops)", highlight=False),
        )
        return
    shown = api.view(directory)
    if json:
        emit_json(shown.model_dump(exclude_none=True, exclude={"skipped"} if shown.report else set()))
    elif shown.report:
        console.print(f"report: {shown.report}", highlight=False)
    else:
        console.print(f"{shown.runs} run(s): {shown.index}", highlight=False)
        for note in shown.skipped:
            console.print(f"  note: {note}", markup=False, highlight=False)
