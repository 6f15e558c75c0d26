"""`replayer batch`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from replayer import api
from replayer.cli.app import command, console
from replayer.cli.options import JsonOpt, Quiet, Verbose, _progress, emit_json, flag
from replayer.floor.limits import parse_size


@command()
def batch(
    manifest: Annotated[
        Path, typer.Argument(metavar="MANIFEST", help="JSONL, one job source per line (docs/batch.md).")
    ],
    out: Annotated[
        Path,
        typer.Option("--out", "-o", metavar="DIR", help="Batch directory (resumable: reuse it to resume)."),
    ],
    workers: Annotated[
        int,
        flag(
            "workers",
            help="Jobs at once (default: the workers setting, else the core count).",
            min=None,
            show_default=False,  # 0 stands for that default
        ),
    ] = 0,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray", metavar="ADDRESS", help="Run on Ray: an address, 'auto', or 'local' (a local cluster)."
        ),
    ] = None,
    retry_failed: Annotated[
        bool, typer.Option("--retry-failed", help="Rerun jobs that were refused or failed before.")
    ] = False,
    trust_manifest: Annotated[
        bool,
        typer.Option(
            "--trust-manifest",
            help="The manifest is yours: its lines may choose the upstream, key variable, image and git "
            "workspaces (else only one trusted with `replayer trust MANIFEST` may).",
        ),
    ] = False,
    max_output: Annotated[
        str | None,
        typer.Option(
            "--max-output",
            metavar="SIZE",
            help="The most every job together writes (default: the [limits] output setting, else 4 x disk); "
            "the jobs past it fail with kind output.",
        ),
    ] = None,
    max_tokens: Annotated[
        int | None,
        flag(
            "max_tokens",
            help="Tokens every job's continuation together may be billed (one budget for the whole batch, "
            "besides each line's own; default: the max_tokens setting); a continuation it ends is counted as cut.",
        ),
    ] = None,
    json: JsonOpt = False,
    quiet: Quiet = False,
    verbose: Verbose = False,
) -> None:
    """Run every job of a JSONL manifest with the ordinary engine; finished jobs are never recomputed.

    Examples:
      replayer batch manifest.jsonl -o batch/ -j 8
      replayer batch manifest.jsonl -o batch/ --ray auto --retry-failed
    """
    with _progress(json, quiet, verbose) as progress:
        summary = api.batch(
            manifest,
            out,
            workers=workers or None,
            ray=ray,
            retry_failed=retry_failed,
            trust_manifest=trust_manifest,
            on_event=progress,
            max_output=_size(max_output),
            max_tokens=max_tokens,
        )
    if json:
        emit_json({"out": str(out.absolute()), **summary.model_dump(mode="json")})
        return
    refused = sum(summary.refused.values())
    console.print(
        f"{summary.jobs} job(s): {summary.done} done, {summary.skipped} skipped, {refused} refused, "
        f"{summary.failed} failed"
        + (f", {summary.cut} cut by a token budget" if summary.cut else "")
        + (f", {summary.interrupted} interrupted" if summary.interrupted else "")
        + f"; summary: {out / 'batch.json'}"
    )
    for reason, count in sorted(summary.refused.items()):
        console.print(f"  refused x{count}: {reason}", highlight=False, markup=False)


def _size(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_size(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--max-output") from None
