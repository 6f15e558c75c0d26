"""The entry point: every command registered, each `ReplayError` mapped to one line and its exit code."""

from __future__ import annotations

import logging
import sys

from replayer import api
from replayer.cli import (
    batch,  # noqa: F401  (registers the command)
    bundles,  # noqa: F401  (registers the command)
    compare,  # noqa: F401  (registers the command)
    export,  # noqa: F401  (registers the command)
    gc,  # noqa: F401  (registers the command)
    inspect,  # noqa: F401  (registers the command)
    prepare,  # noqa: F401  (registers the command)
    run,  # noqa: F401  (registers the command)
    setup,  # noqa: F401  (registers the command)
    trust,  # noqa: F401  (registers the command)
    verify,  # noqa: F401  (registers the command)
    view,  # noqa: F401  (registers the command)
)
from replayer.cli.app import app, err_console
from replayer.cli.options import one_line
from replayer.floor import signals
from replayer.floor.errors import Interrupted, ReplayError


def main() -> None:
    # Interrupted, not KeyboardInterrupt: typer would turn that into a silent exit; the `finally`
    # blocks on the way up remove containers and partial outputs, and the live-sandbox sweep below
    # removes one that an interruption caught between its creation and its owner's `try`.
    signals.install()
    # aiohttp logs a handler's failure with its traceback (a client gone while the bridge answered, at an
    # interruption); the bridge records what matters, and stderr keeps its one line per error
    logging.getLogger("aiohttp").addHandler(logging.NullHandler())
    logging.getLogger("aiohttp").propagate = False
    try:
        app(
            prog_name="replayer"
        )  # standalone: usage errors exit 2 with click's message; our errors propagate to here
    except Interrupted:
        with signals.deferred():
            api.stop_sandboxes()
        err_console.print("replayer: interrupted", highlight=False)
        sys.exit(Interrupted.exit_code)
    except ReplayError as exc:
        # markup=False: the reason quotes input and agent output, where "[/x]" is text, not a style
        err_console.print(
            f"replayer: {exc.kind}: {one_line(str(exc))}", highlight=False, soft_wrap=True, markup=False
        )
        sys.exit(exc.exit_code)
    except Exception as exc:
        err_console.print(
            f"replayer: internal error: {type(exc).__name__}: {one_line(str(exc))}",
            highlight=False,
            soft_wrap=True,
            markup=False,
        )
        sys.exit(1)
