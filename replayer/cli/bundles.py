"""`replayer bundles`."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table

from replayer import api
from replayer.cli.app import Command, Group, app, console
from replayer.cli.options import JsonOpt, _progress, emit_json

bundles_app = typer.Typer(
    cls=Group,
    no_args_is_help=True,
    help="The versioned agent bundle cache (any released version, for offline use).",
)


app.add_typer(bundles_app, name="bundles")


@bundles_app.command("list", cls=Command)
def bundles_list(json: JsonOpt = False) -> None:
    """The installed bundles: agent, version, whether it is the pinned (verified) one, size, folder.

    Examples:
      replayer bundles list
      replayer bundles list --json
    """
    found = api.bundles_list()
    if json:
        emit_json([b.model_dump(mode="json") for b in found])
        return
    table = Table("agent", "version", "pinned", "size", "folder")
    for b in found:
        table.add_row(
            b.agent, b.version, "yes" if b.pinned else "", f"{b.size_bytes / 2**20:.0f} MiB", str(b.path)
        )
    console.print(table)


@bundles_app.command("add", cls=Command)
def bundles_add(
    specs: Annotated[
        list[str] | None,
        typer.Argument(metavar="AGENT@VERSION", help="e.g. claude_code@2.0.64 (repeatable)."),
    ] = None,
    pinned: Annotated[
        bool, typer.Option("--pinned", help="Also every pinned version (and the pin file's `also`).")
    ] = False,
) -> None:
    """Install bundles from npm / PyPI at exact versions (nothing happens for one already installed; one an
    earlier replayer installed without a digest manifest gets one, if nothing in it is someone else's).

    Examples:
      replayer bundles add claude_code@2.0.64 codex@0.125.0
      replayer bundles add --pinned
    """
    if not specs and not pinned:
        raise typer.BadParameter("name AGENT@VERSION or give --pinned", param_hint="SPECS")
    with _progress(False, False, False) as progress:
        added = api.bundles_add(specs or [], pinned, on_event=progress)
    for spec, path in added:
        console.print(f"{spec}: {path}", highlight=False)


@bundles_app.command("rm", cls=Command)
def bundles_rm(
    specs: Annotated[list[str], typer.Argument(metavar="AGENT@VERSION", help="Repeatable.")],
) -> None:
    """Remove bundles from the cache (a run needing one installs it again).

    Examples:
      replayer bundles rm claude_code@2.0.64
    """
    for spec, gone in api.bundles_rm(specs):
        console.print(f"{spec}: {'removed' if gone else 'not installed'}", highlight=False)
