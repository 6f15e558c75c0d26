"""Files that hold several sessions, read line by line: each agent whose files may hold several says,
through `Reader.sessions_held`, what a line's session is; this reads the file once and lists them
(replayer/pipeline/multisession.py extracts one). A file of one session holds none here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from replayer.floor.errors import BadInput, excerpt
from replayer.floor.io import read_input
from replayer.floor.trajectory import HeldSession

SessionOf = Callable[[Any], "str | None"]
"""A parsed line -> the session it belongs to (None: not a line of this form)."""


def by_line(
    path: Path, form: str, what: str, session_of: SessionOf, first_prompt: Callable[[Any], str | None]
) -> list[HeldSession]:
    """The sessions of a JSON-lines file whose first line is of `form`: every line must be one (`what`
    names such a line in the refusal). Fewer than two sessions: []."""
    found: dict[str, list[int]] = {}
    prompts: dict[str, str | None] = {}
    for number, line in enumerate(read_input(path).splitlines(), 1):
        if not line.strip():
            continue
        try:
            value = orjson.loads(line)
        except orjson.JSONDecodeError:
            raise BadInput(
                f"{path}: line {number} is not JSON ({excerpt(line.decode(errors='replace'))})"
            ) from None
        session = session_of(value)
        if session is None:
            raise BadInput(f"{path}: line {number} is not {what} like line 1")
        found.setdefault(session, []).append(number)
        prompts.setdefault(session, first_prompt(value))
    return several(form, found, prompts)


def several(
    form: str, found: dict[str, list[int]], prompts: dict[str, str | None], event_end: bytes = b"\n"
) -> list[HeldSession]:
    """The sessions found (id -> its line numbers), or [] when the file holds fewer than two."""
    if len(found) < 2:
        return []
    return [
        HeldSession(id=s, form=form, lines=lines, first_prompt=prompts.get(s), event_end=event_end)
        for s, lines in found.items()
    ]


def first_json_line(first_line: bytes) -> Any:
    """The first line's JSON value (None when it is not JSON)."""
    try:
        return orjson.loads(first_line)
    except orjson.JSONDecodeError:
        return None
