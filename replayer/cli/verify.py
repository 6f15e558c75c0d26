"""`replayer verify`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from replayer import api
from replayer.floor.determinism import summary

if TYPE_CHECKING:
    from replayer.floor.verdicts import Verdict
from replayer.cli.app import command, console
from replayer.cli.options import JsonOpt, Repeat, emit_json


@command()
def verify(
    specs: Annotated[
        list[str],
        typer.Argument(metavar="AGENT@VERSION", help="e.g. claude_code@2.0.64 (repeatable)."),
    ],
    verdicts: Annotated[
        Path | None,
        typer.Option(
            "--verdicts",
            metavar="DIR",
            help="Store verdicts here (default: REPLAYER_VERDICTS, else beside the bundles).",
        ),
    ] = None,
    repeat: Repeat = 1,
    json: JsonOpt = False,
) -> None:
    """Probe a version: record, replay at every boundary and continue a session; store the verdict.

    The probe session is recorded with that version's real CLI against a scripted model; a passing
    verdict makes the version verified.

    Examples:
      replayer verify claude_code@2.0.64 codex@0.125.0
      replayer verify codex@0.140.0 --verdicts verdicts/ --json
      replayer verify codex@0.171.0 --repeat 3   # and its determinism rate
    """

    def told(verdict: Verdict, path: Path) -> None:
        if json:
            return
        mark = "verified" if verdict.passed else "NOT verified"
        console.print(f"{verdict.agent}@{verdict.version}: {mark} ({path})", highlight=False)
        for c in verdict.checks:
            console.print(f"  {'ok ' if c.passed else 'BAD'} {c.name}: {c.detail}", highlight=False)
        if verdict.determinism is not None:
            console.print(f"  determinism: {summary(verdict.determinism)}", highlight=False, markup=False)

    found = api.verify(specs, verdicts, on_verdict=told, repeats=repeat)
    if json:
        emit_json([v.model_dump(mode="json") for v in found])
    failed = api.not_verified(found)
    if failed is not None:
        raise failed
