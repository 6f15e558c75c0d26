"""Checking native records against typed shapes where they are read, and refusing one that does not fit.

An adapter declares the fields it (and the pinned agent) reads as pydantic models that let every other
field pass (other versions of an agent add fields), validates each record where it knows the record's
place (a line, a row, a message), and goes on with the record as read: the models only validate, so a
record is kept and written back exactly as it was. A record that does not fit is refused with
`replayer.floor.errors.bad_record`, naming the place and the field, with a short excerpt of what was there.
"""

from __future__ import annotations

import functools
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from replayer.adapters.record_checks import Check as Check
from replayer.adapters.record_checks import Member as Member
from replayer.adapters.record_checks import Prefix as Prefix
from replayer.adapters.record_checks import Rule as Rule
from replayer.adapters.record_checks import record_check
from replayer.floor.errors import bad_record


class Open(BaseModel):
    """A record's typed fields (strict: no coercion, as JavaScript reads JSON); other fields pass."""

    model_config = ConfigDict(extra="allow", strict=True, defer_build=True)


def check(model: Any, value: Any, source: str, where: str, field: str = "") -> None:
    """Validate `value` (the record at `where`, or its field `field`) against `model` (a model class or
    any type pydantic validates), or refuse it. Checked first by the model's plain-Python check
    (`record_checks`: the same checks, without building a model instance per object, several times
    cheaper); only a value that does not fit is validated again as the models, whose error names it."""
    if fits(model, value):
        return
    try:
        _adapter(model).validate_python(value)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        path, got = _locate(value, error["loc"], field)
        missing = error["type"] == "missing"
        problem = "missing" if missing else _problem(error["msg"])
        raise bad_record(
            source, f"{where}, field {path or '(the record)'}", problem, None if missing else got
        ) from None


def fits(model: Any, value: Any) -> bool:
    """`value` is valid as `model`, checked in plain Python (`record_checks`, no model instance built);
    False also for a value only an "other" member of a union takes (its tag named by no member), or one
    the check is stricter about than the model: where the models are not kept, only a value that does not
    fit need be validated as them, to accept it or explain why not."""
    checked = record_check(model)
    return checked is not None and checked(value)


@functools.cache
def _adapter(model: Any) -> TypeAdapter[Any]:
    return TypeAdapter(model)


def _problem(message: str) -> str:
    return message.removeprefix("Value error, ").replace("Input should be", "should be")


def _locate(value: Any, loc: tuple[int | str, ...], prefix: str) -> tuple[str, Any]:
    """The field path in the input of a pydantic error location, and the value there. The location also
    names union members and tags, which are no keys of the input: they are left out."""
    path, node = prefix, value
    for at, key in enumerate(loc):
        last = at == len(loc) - 1
        if isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
            path, node = f"{path}[{key}]", node[key]
        elif isinstance(node, dict) and (key in node or last):
            path = f"{path}.{key}" if path else str(key)
            node = node.get(str(key))
    return path, node


def too_deep(value: Any, limit: int) -> bool:
    """`value` nests lists and objects more than `limit` levels deep. orjson writes a value nested at most
    ORJSON_DEPTH levels, in C, several times faster than a walk in Python: `value` inside ORJSON_DEPTH -
    `limit` more lists that orjson writes is no deeper than `limit`. Only when it does not (too deep, or not
    a JSON value: a lone surrogate read by the standard library) is `value` walked, level by level."""
    if 0 <= limit < ORJSON_DEPTH:
        wrapped = value
        for _ in range(ORJSON_DEPTH - limit):
            wrapped = [wrapped]
        try:
            orjson.dumps(wrapped)
        except TypeError:
            pass
        else:
            return False
    level = [value] if isinstance(value, (dict, list)) else []
    depth = 1
    while level:
        if depth > limit:
            return True
        below = []
        for node in level:
            for child in node.values() if isinstance(node, dict) else node:
                if isinstance(child, (dict, list)):
                    below.append(child)
        level, depth = below, depth + 1
    return False


MAX_DEPTH = 100
"""Real native records nest about 10 levels; past this a record is refused (orjson writes 254 at most)."""


ORJSON_READ_DEPTH = 1024
"""The deepest nesting orjson reads: it refuses a text nested deeper."""
_WRAP_FROM = 64 * 1024
"""Below this size a text's brackets are counted first (`shallow_text`): cheaper than the wrapped load."""


def loads_within(data: bytes, limit: int = MAX_DEPTH) -> tuple[Any, bool]:
    """`orjson.loads(data)` (raising as it does), and whether the value nests more than `limit` levels, told
    by the load itself, in C: `data` inside ORJSON_READ_DEPTH - `limit` lists loads only if it nests at most
    `limit` levels (no second pass over the value, as `too_deep` makes). A text that does not load so, or
    closes one of those lists early (`1],[2`: each must hold one value), is loaded alone and walked."""
    if len(data) < _WRAP_FROM and shallow_text(data, limit):
        return orjson.loads(data), False
    pad = ORJSON_READ_DEPTH - limit
    try:
        value = orjson.loads(b"[" * pad + data + b"]" * pad)
    except orjson.JSONDecodeError:
        value = None
    else:
        for _ in range(pad):
            if type(value) is not list or len(value) != 1:
                break
            value = value[0]
        else:
            return value, False
    value = orjson.loads(data)
    return value, too_deep(value, limit)


def shallow_text(text: bytes | str, limit: int) -> bool:
    """No JSON value read from `text` nests more than `limit` levels: every level opens and closes with a
    bracket, so a text with at most `limit` opening ones, or too short to hold more, needs no walk."""
    if len(text) <= 2 * limit + 1:
        return True
    if isinstance(text, str):
        return text.count("[") + text.count("{") <= limit
    return text.count(b"[") + text.count(b"{") <= limit


_M = TypeVar("_M", bound=BaseModel)


def _field(value: Any, loc: tuple[int | str, ...], missing: bool) -> str:
    """A pydantic error location as a path into `value` (union member tags dropped)."""
    out, node = "", value
    for n, part in enumerate(loc):
        inside = isinstance(node, dict) and part in node
        inside = inside or isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if inside:
            node = node[part]
        elif not (missing and n == len(loc) - 1):
            continue  # a union member's tag, not a key of the record
        out += f"[{part}]" if isinstance(part, int) else f".{part}" if out else str(part)
    return out


def validated(model: type[_M], value: Any, source: str, where: str) -> _M:
    """`value` as `model`, or a refusal naming `where` and the field (the deepest error is the most telling)."""
    try:
        return model.model_validate(value)
    except ValidationError as exc:
        error = max(exc.errors(), key=lambda e: len(e["loc"]))
        field = _field(value, tuple(error["loc"]), error["type"] == "missing")
        place = f"{where}, field {field}" if field and where else where or f"field {field}"
        got = None if error["type"] == "missing" else error.get("input")
        problem = error["msg"].split(" or instance of ")[0]  # not the name of the model class
        raise bad_record(source, place, problem, got) from None


def deep_place(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """Where `value` nests deeper than `limit` (its first levels), or None; iterative, so no recursion limit."""
    if not too_deep(value, limit):  # cheaper: containers only, no paths (it holds whenever a place is found)
        return None
    stack: list[tuple[Any, int, str]] = [(value, 0, "")]
    while stack:
        node, depth, at = stack.pop()
        if depth > limit:
            return f"{at}..."
        if isinstance(node, dict):
            stack.extend(
                (v, depth + 1, at if depth >= 4 else f"{at}.{k}" if at else str(k)) for k, v in node.items()
            )
        elif isinstance(node, list):
            stack.extend((v, depth + 1, at if depth >= 4 else f"{at}[{i}]") for i, v in enumerate(node))
    return None


ORJSON_DEPTH = 254
"""The deepest nesting orjson writes back (a rebuild writes every record it read)."""


def unwritable(record: Any, line: bytes) -> bool:
    """`record` (read from `line`) nests deeper than orjson writes; cheap: only a line with that many
    brackets is tried."""
    if shallow_text(line, ORJSON_DEPTH):
        return False
    try:
        orjson.dumps(record)
    except TypeError:
        return True
    return False
