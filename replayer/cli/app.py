"""The typer app every command registers on, its help layout and the consoles."""

from __future__ import annotations

import functools
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from replayer.cli import docs
from replayer.floor import settings
from replayer.floor.release import __version__


class _NamedArgument(TyperArgument):
    def display_type_rich(self, ctx: Any) -> str | None:
        return None  # its metavar (TRAJECTORY, AGENT@VERSION) says what it is


def _plain_flags(params: list[Any]) -> list[Any]:
    """Help without typer's type placeholders: none after a flag (typer shows `--json <bool>`; a flag takes
    no value), none after an argument that has a metavar (`AGENT@VERSION <list[str]>`)."""
    for param in params:
        if isinstance(param, TyperOption) and param.is_flag and param.metavar is None:
            param.metavar = ""
        elif type(param) is TyperArgument and param.metavar is not None:
            param.__class__ = _NamedArgument  # typer makes the parameter objects; only their display changes
    return params


class Command(TyperCommand):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))

    def invoke(self, ctx: Any) -> Any:
        # the one place every command reads the settings before it starts: a bad file, or a project file
        # that sets what its folder may not, refuses them all alike (`trust` reads only the user's file)
        if self.name != "trust":
            settings.load()
        return super().invoke(ctx)


class Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))


app = typer.Typer(
    cls=Group,
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Replay coding-agent trajectories in containers.\n\n"
    "Shell completion: replayer --install-completion (bash, zsh, fish, PowerShell).\n\n" + docs.where(),
)


command = functools.partial(app.command, cls=Command, epilog=docs.where())


console = Console(soft_wrap=True)  # a path or a command line is never broken across lines


err_console = Console(stderr=True, soft_wrap=True)


def _print_version(wanted: bool) -> None:
    if not wanted:
        return
    from replayer.floor.pins import load_pins

    pins = load_pins()
    lines = [f"replayer {__version__}", "pinned agents:"]
    for agent, pin in pins.agents.items():
        lines.append(f"  {agent} {pin.version} ({'npm' if pin.npm else 'PyPI'} {pin.package})")
    lines.append(f"base image: {pins.base_image.tag}")
    typer.echo("\n".join(lines))
    raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            is_eager=True,
            callback=_print_version,
            help="Print the replayer's version and the pinned agent versions, and exit.",
        ),
    ] = False,
) -> None:
    pass
