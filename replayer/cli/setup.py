"""`replayer setup`."""

from __future__ import annotations

from typing import Annotated

import typer

from replayer import api
from replayer.cli.app import command, console, err_console
from replayer.cli.live import megabytes
from replayer.cli.options import JsonOpt, _progress, emit_json
from replayer.floor.versions import ImageStatus


@command()
def setup(
    agents: Annotated[
        list[str] | None,
        typer.Option(
            "--agents", metavar="AGENT", help="Only these agents' bundles (repeatable, or comma-separated)."
        ),
    ] = None,
    no_bundles: Annotated[bool, typer.Option("--no-bundles", help="No agent bundles.")] = False,
    no_image: Annotated[bool, typer.Option("--no-image", help="No base image.")] = False,
    json: JsonOpt = False,
) -> None:
    """Make this machine ready to run: the Docker engine, the base image, the pinned agent bundles.

    Each part already there is reused, so running it again is quick. Starting the engine and building
    the image need root (sudo) and apt-get for what is missing; bundles come from npm / PyPI.

    Examples:
      replayer setup
      replayer setup --agents claude_code,codex
      replayer setup --no-bundles --json
    """
    if agents is not None and no_bundles:
        raise typer.BadParameter("give --agents or --no-bundles, not both", param_hint="--agents")
    chosen = [a.strip() for s in agents for a in s.split(",")] if agents is not None else None
    with _progress(json, False, False) as progress:
        report = api.setup(chosen, bundles=not no_bundles, image=not no_image, on_event=progress)
    if json:
        emit_json(report.model_dump(mode="json"))
        return
    console.print(f"engine: {report.engine}", highlight=False)
    for note in report.notes:  # e.g. no disk quotas for runs (no loop devices here)
        err_console.print(f"note: {note}", highlight=False, markup=False)
    if report.image:
        console.print(f"base image {report.image.tag}: {image_line(report.image)}", highlight=False)
    for each in report.bundles:
        console.print(
            f"{each.agent}@{each.version}: {each.status} ({each.path})", highlight=False, soft_wrap=True
        )


def image_line(image: ImageStatus) -> str:
    """`present (123.4 MB)`, `built (123.4 MB, 95.0s)`."""
    facts = [megabytes(image.bytes)] if image.bytes is not None else []
    if image.seconds is not None:
        facts.append(f"{image.seconds:.1f}s")
    return image.status + (f" ({', '.join(facts)})" if facts else "")
