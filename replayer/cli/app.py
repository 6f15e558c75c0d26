"""The typer app every command registers on, its help layout and the consoles."""

from __future__ import annotations

import functools
import importlib
import inspect
import typing
from collections.abc import Callable
from typing import Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from replayer.cli import docs
from replayer.floor.options import EngineName
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
            from replayer.floor import settings  # not for `--version` or help

            settings.load()
        return super().invoke(ctx)


class Group(TyperGroup):
    def get_params(self, ctx: Any) -> list[Any]:
        return _plain_flags(super().get_params(ctx))


VERBS = (
    "batch",
    "bundles",
    "compare",
    "export",
    "gc",
    "inspect",
    "prepare",
    "run",
    "setup",
    "trust",
    "verify",
    "view",
)
"""The commands, each registered on `app` by importing its module `replayer.cli.<verb>`."""


class _App(typer.Typer):
    """The typer app. A command is registered by importing its module, which imports what the command runs
    (the engine, the bridges, the adapters): the entry point imports only the one a command line names
    (`main.register`); whoever else reads the commands (a test's CliRunner) gets every one."""

    every_command = True
    """Import every command's module when the commands are first read (`main.register` says otherwise)."""

    @property
    def registered_commands(self) -> list[Any]:
        if self.every_command:
            self.every_command = False
            for verb in VERBS:
                importlib.import_module(f"replayer.cli.{verb}")
        return self._commands

    @registered_commands.setter
    def registered_commands(self, commands: list[Any]) -> None:
        self._commands = commands


app = _App(
    cls=Group,
    add_completion=True,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="Replay coding-agent trajectories in containers.\n\n"
    "Shell completion: replayer --install-completion (bash, zsh, fish, PowerShell).\n\n" + docs.where(),
)


EngineOpt = Annotated[
    EngineName | None,
    typer.Option(
        "--engine",
        metavar="ENGINE",
        help="The container engine: docker or podman (default: the engine setting, else docker).",
        show_default=False,
    ),
]


def _with_engine(func: Callable[..., Any]) -> Callable[..., Any]:
    """`func` as a command that also takes `--engine`: the one flag that picks the engine of every command
    (sandboxes/engines.py), used before the command's own code runs."""
    signature = inspect.signature(func, eval_str=True)
    engine = inspect.Parameter("engine", inspect.Parameter.KEYWORD_ONLY, default=None, annotation=EngineOpt)

    @functools.wraps(func)
    def run(*args: Any, engine: str | None = None, **kwargs: Any) -> Any:
        if engine is not None:
            from replayer import api

            api.use_engine(engine)
        return func(*args, **kwargs)

    params = list(signature.parameters.values())
    run.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*(p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params), engine]
    )
    run.__annotations__ = {**typing.get_type_hints(func, include_extras=True), "engine": EngineOpt}
    return run


def command(*args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Any]:
    """The decorator of every command: the app's, with the help layout and `--engine`."""
    register = app.command(*args, cls=Command, epilog=docs.where(), **kwargs)
    return lambda func: register(_with_engine(func))


console = Console(soft_wrap=True)  # a path or a command line is never broken across lines


err_console = Console(stderr=True, soft_wrap=True)


_MESSAGE_CHARS = 500


def one_line(message: str) -> str:
    """An error message as one bounded line: a refusal never echoes a huge input back."""
    line = " ".join(message.split())
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 1] + "…"


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
