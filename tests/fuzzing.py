"""Structure-aware fuzzing of the native parsers: mutate real recorded files, then parse.

A parse of a mutated file must either succeed or raise a `ReplayError` (a refusal with a bounded,
one-line message); any other exception is a crash. `make test` runs a fixed, derandomized budget
(REPLAYER_FUZZ_EXAMPLES, default 40 per parser); `make fuzz` a longer, random one.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from replayer.floor.errors import ReplayError

MAX_MESSAGE_CHARS = 600
"""A refusal names the line and field with a short excerpt; it never echoes the input in full."""

EXAMPLES = int(os.environ.get("REPLAYER_FUZZ_EXAMPLES", "40"))
FUZZ_SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=os.environ.get("REPLAYER_FUZZ_RANDOM") != "1",
    suppress_health_check=[
        HealthCheck.too_slow,
        HealthCheck.function_scoped_fixture,
        HealthCheck.data_too_large,
    ],
    database=None,
)

_ODD_VALUES: list[Any] = [
    None,
    True,
    0,
    -1,
    2**70,
    1.5e308,
    "",
    "x" * 100_000,
    "\x00",
    "\udcff".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
    [],
    {},
    [1, "a", None],
    {"": None},
]


def _paths(value: Any, prefix: tuple[Any, ...] = (), limit: int = 4000) -> list[tuple[Any, ...]]:
    """Paths to the nodes of a JSON value (breadth-first, bounded)."""
    out: list[tuple[Any, ...]] = []
    queue: list[tuple[tuple[Any, ...], Any]] = [(prefix, value)]
    while queue and len(out) < limit:
        path, node = queue.pop(0)
        out.append(path)
        if isinstance(node, dict):
            queue.extend((path + (k,), v) for k, v in node.items())
        elif isinstance(node, list):
            queue.extend((path + (i,), v) for i, v in enumerate(node))
    return out


def _parent(doc: Any, path: tuple[Any, ...]) -> Any:
    node = doc
    for key in path[:-1]:
        node = node[key]
    return node


def _deep(depth: int) -> Any:
    value: Any = "deep"
    for _ in range(depth):
        value = [value]
    return value


@st.composite
def mutated_json(draw: st.DrawFn, doc: Any) -> Any:
    """`doc` with one to three structural mutations: a type flip, a dropped key, a huge or deep value."""
    doc = orjson.loads(orjson.dumps(doc))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        if not paths:
            return copy.deepcopy(draw(st.sampled_from(_ODD_VALUES)))
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        action = draw(st.sampled_from(["flip", "flip", "drop", "deep"]))
        if action == "drop" and isinstance(parent, dict):
            del parent[path[-1]]
        elif action == "drop" and isinstance(parent, list):
            parent.pop(path[-1])
        elif action == "deep":
            parent[path[-1]] = _deep(draw(st.sampled_from([50, 5000])))
        else:
            parent[path[-1]] = copy.deepcopy(draw(st.sampled_from(_ODD_VALUES)))
    return doc


def _is_jsonl(data: bytes) -> bool:
    first = data.lstrip()[:1]
    if first not in (b"{", b"["):
        return False
    try:
        orjson.loads(data)
    except orjson.JSONDecodeError:
        return True
    return False


@st.composite
def mutated_bytes(draw: st.DrawFn, data: bytes) -> bytes:
    """Byte-level damage: truncation, bad UTF-8, a NUL, a line dropped, duplicated or merged."""
    action = draw(st.sampled_from(["truncate", "utf8", "nul", "dup", "merge", "drop"]))
    if not data:
        return b"\xff"
    at = draw(st.integers(0, len(data) - 1))
    if action == "truncate":
        return data[:at]
    if action == "utf8":
        return data[:at] + b"\xff\xfe\xc3" + data[at:]
    if action == "nul":
        return data[:at] + b"\x00" + data[at:]
    lines = data.splitlines(keepends=True)
    i = draw(st.integers(0, max(len(lines) - 1, 0)))
    if action == "dup":
        return b"".join(lines[: i + 1] + lines[i:])
    if action == "merge" and i + 1 < len(lines):
        return b"".join(lines[:i] + [lines[i].rstrip(b"\n") + lines[i + 1]] + lines[i + 2 :])
    return b"".join(lines[:i] + lines[i + 1 :])


def dumps(value: Any) -> bytes:
    """orjson.dumps, and also what orjson refuses to write: ints past 64 bits, nesting past 254 levels."""
    try:
        return orjson.dumps(value)
    except TypeError:
        pass
    out: list[str] = []
    stack: list[Any] = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, _Raw):
            out.append(node.text)
        elif isinstance(node, dict):
            items: list[Any] = [_Raw("{")]
            for n, (k, v) in enumerate(node.items()):
                items += [_Raw(("," if n else "") + json.dumps(str(k)) + ":"), v]
            stack.extend(reversed([*items, _Raw("}")]))
        elif isinstance(node, list):
            items = [_Raw("[")]
            for n, v in enumerate(node):
                items += [_Raw(",")] if n else []
                items.append(v)
            stack.extend(reversed([*items, _Raw("]")]))
        else:
            out.append(json.dumps(node))
    return "".join(out).encode()


class _Raw:
    def __init__(self, text: str):
        self.text = text


@st.composite
def mutated_file(draw: st.DrawFn, data: bytes) -> bytes:
    """A JSON or JSONL file mutated structurally (mostly) or byte-wise."""
    if draw(st.integers(0, 3)) == 0:
        return draw(mutated_bytes(data))
    if _is_jsonl(data):
        records = []
        for line in data.splitlines():
            try:
                records.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                continue
        mutated = draw(mutated_json(records))
        if not isinstance(mutated, list):
            return dumps(mutated) + b"\n"
        return b"".join(dumps(r) + b"\n" for r in mutated)
    return dumps(draw(mutated_json(orjson.loads(data))))


def expect_refusal_or_success(parse: Callable[[], Any]) -> None:
    """Parse; a ReplayError is a refusal (its message bounded, one line); anything else propagates."""
    try:
        parse()
    except ReplayError as exc:
        message = str(exc)
        assert len(message) <= MAX_MESSAGE_CHARS, f"refusal of {len(message)} characters: {message[:200]}..."
        assert "\n" not in message, f"refusal on several lines: {message[:200]!r}"


def copy_tree(src: Path, dest: Path) -> Path:
    """A writable copy of a fixture folder (for formats that are directories)."""
    shutil.copytree(src, dest, dirs_exist_ok=True)
    return dest
