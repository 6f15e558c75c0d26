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
        typer.Argument(metavar="DIR", help="The folder whose replayer.toml may set every setting."),
    ] = None,
    remove: Annotated[bool, typer.Option("--remove", help="Trust DIR no more.")] = False,
    list_: Annotated[bool, typer.Option("--list", help="The folders trusted now.")] = False,
    json: JsonOpt = False,
) -> None:
    """Trust a folder's replayer.toml: kept in your own settings file (`trusted`). Until then a project file
    may set only `workers` and tighter `[limits]` (docs/cli.md, "Settings").

    Examples:
      replayer trust ~/work/my-repo
      replayer trust --list
      replayer trust --remove ~/work/my-repo
    """
    from replayer.floor import trust as trusting

    if list_ == (folder is not None) or (remove and folder is None):
        raise typer.BadParameter("name DIR (with or without --remove), or give --list", param_hint="DIR")
    if folder is None:
        found = settings.trusted_folders()
    else:
        found = trusting.remove(folder) if remove else trusting.add(folder)
    if json:
        emit_json({"user_file": str(settings.user_file()), "trusted": [str(f) for f in found]})
        return
    for each in found:
        console.print(str(each), highlight=False, markup=False)
    if folder is not None:
        err_console.print(f"({settings.user_file()})", highlight=False, markup=False)
