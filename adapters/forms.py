"""The native forms an agent's trajectories come in (a Codex rollout before and after its envelope, a Pi session
file and its event output, an OpenCode export and its database...): each declared once by its agent, with
the test that tells it from a file's first records and which releases or commands write it.

`detect` (adapters/__init__.py) asks every agent's forms, in the registry's order; `inspect` shows the form a
file was read as. An agent's reader branches on the form where their records differ; a new form is a new
entry in its agent's `forms` and the reading it needs (docs/adapters/writing.md, "A new native form")."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class NativeForm:
    """One native form of an agent's trajectories."""

    name: str
    """As `inspect` shows it (`bare rollout`, `event log`)."""
    detect: Callable[[list[Any]], bool]
    """Whether a file's first parsed records (`adapters.head.read_head`) are of this form."""
    written_by: str
    """Which releases, or which of the agent's commands, write it."""


def form_of(forms: tuple[NativeForm, ...], head: list[Any]) -> NativeForm | None:
    """The first of `forms` the records are of, or None."""
    return next((form for form in forms if form.detect(head)), None)
