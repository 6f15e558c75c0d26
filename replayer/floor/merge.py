"""The one place the options meet the settings: each option the caller gave (a flag or an API argument) goes
over what the settings layers set for it (`settings.load`: environment > project file > user file, with the
trust rules of a folder the user has not trusted already applied), which goes over its default; the result
is the request fields the options feed (`options.py`). Limits and the agent's environment merge key by key;
upstream and cassette are one choice (`ContinueSettings.merge`). docs/cli.md, "Settings"."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, get_args, get_origin

from pydantic import BaseModel, TypeAdapter, ValidationError

from replayer.floor.errors import BadInput
from replayer.floor.limits import SandboxLimits
from replayer.floor.model_base import first_error
from replayer.floor.options import Option, declared
from replayer.floor.requests import CompareRequest, ContinueSettings, ReplayRequest
from replayer.floor.settings import Settings

CONTINUATION = "continuation."
"""The feeds of the continuation's fields (ReplayRequest.continuation, CompareRequest.defaults)."""


@dataclass(frozen=True)
class Merged:
    """The options in force, as the request fields they feed."""

    fields: dict[str, Any]
    """The request's own fields (image, limits, task, ...)."""
    continuation: ContinueSettings
    """The continuation's settings: the arguments' over the settings' (`.request()` is what the engine gets)."""

    def fields_of(self, request: type[BaseModel]) -> dict[str, Any]:
        """The fields a request model has (CompareRequest's agent environment is its `defaults`')."""
        return {k: v for k, v in self.fields.items() if k in request.model_fields}


def merge(given: Mapping[str, Any], found: Settings, takes: type) -> Merged:
    """`given` (options of the TypedDict `takes`; another is a TypeError, as for any keyword argument) over
    the settings `found`, over the defaults."""
    options = declared(takes)
    unknown = sorted(set(given) - set(options))
    if unknown:
        raise TypeError(f"unexpected option(s): {', '.join(unknown)}")
    if given.get("cassette") and given.get("upstream"):
        raise BadInput("a cassette answers offline: give no upstream")
    fields: dict[str, Any] = {}
    below: dict[str, Any] = {}  # the continuation's settings layer
    over: dict[str, Any] = {}  # the continuation's arguments layer
    for name, option in options.items():
        value, setting = _given(given, option), _setting(found, option)
        for feed in option.feeds:
            if feed.startswith(CONTINUATION):  # merged as layers below: upstream and cassette are one choice
                field = feed.removeprefix(CONTINUATION)
                if setting is not None:
                    below[field] = setting
                if value is not None:
                    over[field] = _plain(value)
            elif name == "limits":
                fields[feed] = _limits(found, value)
            elif value is not None or setting is not None:
                fields[feed] = _plain(value) if value is not None else setting
    try:
        layers = ContinueSettings.model_validate(below), ContinueSettings.model_validate(over)
    except ValidationError as exc:
        raise BadInput(first_error(exc)) from None
    for feed, value in fields.items():
        _check(feed, value)
    return Merged(fields, layers[0].merge(layers[1]))


def _check(feed: str, value: Any) -> None:
    """A request field's value checked as its model checks it (a limit: finite, at least the minimum), so
    that a bad argument is a one-line BadInput, not a model's error where the request is built."""
    for model in (ReplayRequest, CompareRequest):
        info = model.model_fields.get(feed)
        if info is not None and info.metadata:
            try:
                checked: Any = Annotated[info.annotation, *info.metadata]  # a type built at run time
                TypeAdapter(checked).validate_python(value)
            except ValidationError as exc:
                raise BadInput(f"{feed}: {first_error(exc).partition(': ')[2]}") from None


def _given(given: Mapping[str, Any], option: Option) -> Any:
    """An argument, None when not given; an empty path is no path."""
    value = given.get(option.name)
    paths = any(get_origin(each) is os.PathLike for each in get_args(option.type))
    return None if value == "" and paths else value


def _setting(found: Settings, option: Option) -> Any:
    """What the settings layers set for an option (None: nothing, or no layer may set it)."""
    if option.layers is None or option.name == "limits":
        return None
    return getattr(found, option.name)


def _plain(value: Any) -> Any:
    """An argument as the request field takes it: a path as a Path, a mapping as a dict of its own."""
    if isinstance(value, os.PathLike):
        return Path(value)
    return dict(value) if isinstance(value, Mapping) else value


def _limits(found: Settings, given: SandboxLimits | str | None) -> SandboxLimits:
    """A SandboxLimits as given; a `--limits` spec's keys over the settings' limits, key by key."""
    if isinstance(given, SandboxLimits):
        return given
    try:
        return found.sandbox_limits(given)
    except ValueError as exc:
        raise BadInput(f"limits: {exc}") from None
