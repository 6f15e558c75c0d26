"""The entry point: every command registered, each `ReplayError` mapped to one line and its exit code."""

from __future__ import annotations

import importlib
import logging
import os
import sys

from replayer.cli.app import VERBS, app, err_console, one_line
from replayer.floor import signals
from replayer.floor.errors import Interrupted, ReplayError


def register(argv: list[str]) -> None:
    """Import the command modules this command line needs: the verb's alone (its module imports what it
    runs: the engine, the bridges, the adapters), none for `--version` alone, every one otherwise (help, a
    usage error that lists the commands, shell completion)."""
    words = [a for a in argv if not a.startswith("-")]
    if words and words[0] in VERBS and not os.environ.get("_REPLAYER_COMPLETE"):
        verbs: tuple[str, ...] = (words[0],)
    elif not words and "--version" in argv and "--help" not in argv:
        verbs = ()
    else:
        return  # typer reads the commands: every one is registered
    app.every_command = False
    for verb in verbs:
        importlib.import_module(f"replayer.cli.{verb}")


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
        register(sys.argv[1:])  # an interruption while the verb's modules import is one too
        app(
            prog_name="replayer"
        )  # standalone: usage errors exit 2 with click's message; our errors propagate to here
    except Interrupted:
        from replayer import api

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
