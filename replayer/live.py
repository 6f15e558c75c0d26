"""The command's live progress: the API's events (events.py) rendered on the terminal, each finished item
(a rerun call, the agent's end, a compare run) as a line that stays, the current activity as one status
line with a bar. Off (every event ignored) when the output is not a terminal, or under --quiet / --json."""

from __future__ import annotations

import time
from types import TracebackType

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from replayer.events import AgentEnded, BridgeTraffic, CallRerun, Event, JobEnded, RunEnded, Stage

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

    def __init__(self, console: Console, enabled: bool) -> None:
        self.enabled = enabled
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
