"""The command's live progress: the API's events (events.py) rendered on the terminal, each finished item
(a rerun call, the agent's end, a compare run) as a line that stays, the current activity as one status
line with a bar. When the output is not a terminal, only a bundle install is told, as a line once it is in
place; under --quiet / --json nothing is."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from replayer.floor.events import (
    AgentEnded,
    BridgeTraffic,
    Building,
    CallRerun,
    Event,
    Installing,
    JobEnded,
    RunEnded,
    Stage,
)

_DOING = {
    "parse": "parsing the trajectory",
    "sandbox": "starting the sandbox",
    "rerun": "rerunning the prefix",
    "rebuild": "rebuilding the native session",
    "continue": "continuing the agent through the bridge",
    "runs": "running",
}
_STATUS_STYLE = {"exact": "green", "normalized_equal": "green", "different": "yellow"}


class LiveProgress:
    """A callable for `on_event`, used as a context manager around the API call."""

    def __init__(self, console: Console, enabled: bool, lines: bool = False) -> None:
        """`enabled`: at a terminal (a live status line); `lines`: piped, installs told as plain lines."""
        self.enabled = enabled
        self.lines = lines
        self.console = console
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[count]}"),
            TimeElapsedColumn(),
            console=console,
            transient=True,  # the status line goes; the lines printed above it stay
            disable=not enabled,
        )
        self.task = self.progress.add_task("", total=None, count="")
        self.started = time.monotonic()

    def __enter__(self) -> LiveProgress:
        self.progress.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.progress.stop()

    def __call__(self, event: Event) -> None:
        if isinstance(event, Installing) and (self.enabled or self.lines):
            self._installing(event)
            return
        if isinstance(event, Building) and (self.enabled or self.lines):
            if self.enabled:
                self._status(escape(event.what), total=None, count="")
            else:  # piped: a line before the wait
                self.console.print(f"{event.what}...", highlight=False, markup=False, soft_wrap=True)
            return
        if not self.enabled:
            return
        match event:
            case Stage(name=name, total=total):
                self.started = time.monotonic()
                count = f"0/{total}" if total is not None else ""
                self._status(_DOING[name], total=total, completed=0, count=count)
            case CallRerun():
                style = _STATUS_STYLE.get(event.status, "dim")
                self._line(
                    f"  step {event.step:>3}  {escape(event.tool):<16} [{style}]{event.status:<16}[/] "
                    f"{event.seconds:6.1f}s"
                )
                self._status(completed=event.done, count=f"{event.done}/{event.total}")
            case BridgeTraffic():
                tokens = (
                    ""
                    if event.input_tokens is None and event.output_tokens is None
                    else f", tokens {event.input_tokens or 0} in / {event.output_tokens or 0} out"
                )
                self._status(count=f"{event.main_requests} request(s) through the bridge{tokens}")
            case AgentEnded():
                self._line(
                    f"  agent {event.status} after {event.steps_used} request(s), {event.seconds:.1f}s"
                )
            case RunEnded():
                style = "red" if event.failed else "green"
                self._line(f"  run {event.variant}/{event.repeat}: [{style}]{_plain(event.outcome)}[/]")
                self._status(completed=event.done, count=f"{event.done}/{event.total} runs")
            case JobEnded():
                rate = event.done / max(time.monotonic() - self.started, 1e-6)
                self._status(completed=event.done, count=f"{event.done}/{event.total} jobs, {rate:.2f}/s")

    def _installing(self, event: Installing) -> None:
        what = f"{event.agent} {event.version} from {event.source}"
        if event.phase == "done":
            text = f"installed {what} ({megabytes(event.bytes)}, {event.seconds:.1f}s)"
        elif event.phase == "start":
            text = f"installing {what} (the bundle cache lacks it; once)"
        else:
            self._status(f"installing {what}", count=megabytes(event.bytes))
            return
        if not self.enabled:  # piped: a line for each install once it is in place (an error stays one line)
            if event.phase == "done":
                self.console.print(text, highlight=False, markup=False, soft_wrap=True)
            return
        if event.phase == "done":
            self._line(f"  {escape(text)}")
        else:
            self._status(escape(text), total=None, count="")

    def _status(self, description: str | None = None, **fields: object) -> None:
        update: dict[str, object] = dict(fields)
        if description is not None:
            update["description"] = description
        self.progress.update(self.task, **update)  # type: ignore[arg-type]

    def _line(self, text: str) -> None:
        self.progress.console.print(text, highlight=False, soft_wrap=True)


def _plain(text: str) -> str:
    """A run's outcome, which may quote agent output, as text (not markup), on one line."""
    line = " ".join(text.split())
    return escape(line if len(line) <= 200 else line[:199] + "…")


def megabytes(size: int) -> str:
    return f"{size / 1e6:.1f} MB"
