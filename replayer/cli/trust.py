"""`replayer trust`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from replayer.cli.app import command, console, err_console
from replayer.cli.options import JsonOpt, emit_json
from replayer.floor import settings


@command()
def trust(
    folder: Annotated[
        Path | None,
        typer.Argument(
            metavar="DIR|FILE",
            help="A folder whose replayer.toml may set every setting, or a file (a batch manifest) that may "
            "set every field; pinned to its content as it is now.",
        ),
    ] = None,
    remove: Annotated[
        bool, typer.Option("--remove", help="Trust DIR (and its files) or FILE no more.")
    ] = False,
    list_: Annotated[bool, typer.Option("--list", help="The folders trusted now.")] = False,
    json: JsonOpt = False,
) -> None:
    """Trust a folder's replayer.toml, or a manifest: kept in your own settings file (`trusted`, and the
    file's content in `pinned`: a file that changes is asked about again). Until then a project file may set
    only fewer `workers` and tighter `[limits]`, a manifest no upstream, key variable, image or git workspace
    (docs/cli.md, "Project files").

    Examples:
      replayer trust ~/work/my-repo
      replayer trust ~/work/my-repo/jobs.jsonl
      replayer trust --list
      replayer trust --remove ~/work/my-repo
    """
    from replayer.floor import trust as trusting

    if list_ == (folder is not None) or (remove and folder is None):
        raise typer.BadParameter(
            "name DIR or FILE (with or without --remove), or give --list", param_hint="DIR|FILE"
        )
    if folder is None:
        found = settings.trusted_folders()
    else:
        found = trusting.remove(folder) if remove else trusting.add(folder)
    if json:
        emit_json(
            {
                "user_file": str(settings.user_file()),
                "trusted": [str(f) for f in found],
                "pinned": settings.pins(),
            }
        )
        return
    for each in found:
        console.print(str(each), highlight=False, markup=False)
    if folder is not None:
        err_console.print(f"({settings.user_file()})", highlight=False, markup=False)
