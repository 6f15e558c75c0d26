"""The `replayer` command. Every verb has --json; exit codes are documented in docs/cli.md.

One module a command (`replayer.cli.<verb>`), registered on `app` by importing it: the entry point imports
the one a command line names (main.py), typer reading the commands imports every one (app.py); options
shared by several commands are in options.py."""

from replayer.cli.app import app
from replayer.cli.main import main

__all__ = ["app", "main"]
