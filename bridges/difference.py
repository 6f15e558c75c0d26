"""Where two JSON values first differ: the gate's and the cassette's one way of saying what differs."""

from __future__ import annotations

import os
from typing import Any

import orjson

from replayer.floor.results import GateMismatch as Mismatch

_EXCERPT = 240


def first_difference(expected: Any, actual: Any, path: str = "") -> Mismatch | None:
    """The first path at which two JSON values differ, with truncated excerpts."""
    if type(expected) is not type(actual):
        return mismatch_at(path, expected, actual)
    if isinstance(expected, dict):
        for key in list(expected) + [k for k in actual if k not in expected]:
            if key not in expected or key not in actual:
                return mismatch_at(
                    f"{path}.{key}", expected.get(key, "<absent>"), actual.get(key, "<absent>")
                )
            found = first_difference(expected[key], actual[key], f"{path}.{key}")
            if found:
                return found
        return None
    if isinstance(expected, list):
        for i, (a, b) in enumerate(zip(expected, actual, strict=False)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found:
                return found
        if len(expected) != len(actual):
            i = min(len(expected), len(actual))
            return mismatch_at(
                f"{path}[{i}]",
                expected[i] if i < len(expected) else "<absent>",
                actual[i] if i < len(actual) else "<absent>",
            )
        return None
    return None if expected == actual else mismatch_at(path, expected, actual)


def mismatch_at(path: str, expected: Any, actual: Any) -> Mismatch:
    """A mismatch at `path` with both sides shown as truncated excerpts."""

    texts = [v if isinstance(v, str) else orjson.dumps(v).decode() for v in (expected, actual)]
    # two long texts that differ far in are shown from a little before where they differ
    long = max(map(len, texts)) > _EXCERPT
    start = max(0, len(os.path.commonprefix(texts)) - _EXCERPT // 4) if long else 0

    def show(text: str) -> str:
        rest = f"... ({len(text)} chars)" if start + _EXCERPT < len(text) else ""
        return ("…" if start else "") + text[start : start + _EXCERPT] + rest

    return Mismatch(path=path.lstrip("."), expected=show(texts[0]), actual=show(texts[1]))
