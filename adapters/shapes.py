"""Checking native records against typed shapes where they are read, and refusing one that does not fit.

An adapter declares the fields it (and the pinned agent) reads as pydantic models that let every other
field pass (other versions of an agent add fields), validates each record where it knows the record's
place (a line, a row, a message), and goes on with the record as read: the models only validate, so a
record is kept and written back exactly as it was. A record that does not fit is refused with
`replayer.floor.errors.bad_record`, naming the place and the field, with a short excerpt of what was there.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError
from pydantic_core import SchemaValidator

from replayer.floor.errors import bad_record


class Open(BaseModel):
    """A record's typed fields (strict: no coercion, as JavaScript reads JSON); other fields pass."""

    model_config = ConfigDict(extra="allow", strict=True)


def check(model: Any, value: Any, source: str, where: str, field: str = "") -> None:
    """Validate `value` (the record at `where`, or its field `field`) against `model` (a model class or
    any type pydantic validates), or refuse it. Validated first with the models' fields read into plain
    dicts (`_dicts`: the same checks, without building a model instance per object, several times
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
    """`value` is valid as `model`, checked as typed dicts (`_dicts`, no model instance built); False also
    for a value only an "other" member of a union takes (its tag named by no member): where the models are
    not kept, only a value that does not fit need be validated as them, to accept it or explain why not."""
    compiled = _compiled(model)
    if compiled is not None and compiled(value):
        return True
    validator = _dicts(model)
    if validator is None:
        return False
    try:
        validator.validate_python(value)
    except ValidationError:
        return False
    return True


@functools.cache
def _adapter(model: Any) -> TypeAdapter[Any]:
    return TypeAdapter(model)


@functools.cache
def _dicts(model: Any) -> SchemaValidator | None:
    """`model`'s validator with every model read as a typed dict of the same fields, extra fields and config:
    it accepts what `model` accepts, except a value of an "other" union member (`Member`), and refuses the
    rest (its messages differ: a refusal is explained by `model`). None when a model runs code of its own
    on its instance (a validator): only the model validates it."""
    try:
        return SchemaValidator(_as_typed_dicts(_adapter(model).core_schema))
    except _OwnCode:
        return None


class _OwnCode(Exception):
    pass


@functools.cache
def _compiled(model: Any) -> Callable[[Any], bool] | None:
    """`model`'s typed-dict schema (`_dicts`) as Python code: one compiled check per record kind, several
    times cheaper than the validator, which builds a copy of every object it checks. It accepts only what
    the validator accepts (stricter where unsure: the exact JSON types), so a value it does not accept is
    not refused for that: `fits` asks the validator. None when the schema holds a kind of check it does not
    compile (a constraint, a validator of another kind)."""
    try:
        schema = _as_typed_dicts(_adapter(model).core_schema)
        return _Compiler().compile(schema)
    except (_OwnCode, _Uncompiled):
        return None


class _Uncompiled(Exception):
    pass


_PLAIN = {"type", "strict", "ref", "metadata", "serialization"}
"""Keys of a schema that add no check."""
_SCALARS = {
    "str": "type({v}) is str",
    "int": "type({v}) is int",
    "bool": "type({v}) is bool",
    "float": "(type({v}) is float or type({v}) is int)",
    "none": "{v} is None",
    "any": "True",
}


class _Compiler:
    """Python source from a core schema: an expression per scalar, a function per container."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.scope: dict[str, Any] = {}
        self.refs: dict[str, str] = {}
        self.count = 0

    def compile(self, schema: Any) -> Callable[[Any], bool]:
        self._collect_refs(schema)
        top = self._function(schema)
        exec("\n".join(self.lines), self.scope)
        checker: Callable[[Any], bool] = self.scope[top]
        return checker

    def _collect_refs(self, schema: Any) -> None:
        if isinstance(schema, list):
            for item in schema:
                self._collect_refs(item)
        elif isinstance(schema, dict):
            if isinstance(schema.get("ref"), str) and isinstance(schema.get("type"), str):
                self.refs.setdefault(schema["ref"], self._name())
            for value in schema.values():
                if isinstance(value, (dict, list)):
                    self._collect_refs(value)

    def _name(self) -> str:
        self.count += 1
        return f"_check_{self.count}"

    def _only(self, schema: dict[str, Any], *keys: str) -> None:
        if not set(schema) <= _PLAIN | set(keys):
            raise _Uncompiled(schema.get("type"))

    def _expr(self, schema: dict[str, Any], v: str) -> str:
        kind = schema.get("type")
        if kind in _SCALARS and "ref" not in schema:
            if kind == "str" and "pattern" in schema:
                # only a literal prefix (`^abc`): what `re` and pydantic-core's regex engine agree on
                self._only(schema, "pattern")
                found = _PREFIX.fullmatch(schema["pattern"])
                if found is None:
                    raise _Uncompiled("pattern")
                return f"(type({v}) is str and {v}.startswith({found.group(1)!r}))"
            if kind == "int" and set(schema) & {"ge", "le"}:
                self._only(schema, "ge", "le")
                bounds = [f"{schema['ge']!r} <= {v}" for _ in [0] if "ge" in schema]
                bounds += [f"{v} <= {schema['le']!r}" for _ in [0] if "le" in schema]
                return f"(type({v}) is int and {' and '.join(bounds)})"
            self._only(schema)
            return _SCALARS[kind].format(v=v)
        if kind == "custom-error" and "ref" not in schema:
            self._only(schema, "schema", "custom_error_type", "custom_error_message", "custom_error_context")
            return self._expr(schema["schema"], v)
        if kind == "chain" and "ref" not in schema:
            # each step gets the value the one before returns: only checks that return it unchanged
            self._only(schema, "steps")
            steps = [self._expr(step, v) for step in schema["steps"]]
            if not all(_UNCHANGED.fullmatch(_innermost(step)) for step in schema["steps"]):
                raise _Uncompiled("chain")
            return f"({' and '.join(steps)})"
        if kind == "literal" and "ref" not in schema:
            self._only(schema, "expected")
            if not all(type(e) is str for e in schema["expected"]):
                raise _Uncompiled("literal")
            return f"(type({v}) is str and {v} in {self._const(frozenset(schema['expected']))})"
        if kind == "union" and "ref" not in schema:
            self._only(schema, "choices", "mode", "custom_error_type", "custom_error_message")
            choices = [c[0] if isinstance(c, tuple) else c for c in schema["choices"]]
            return f"({' or '.join(self._expr(c, v) for c in choices)})"
        if kind == "function-plain" and "ref" not in schema:
            self._only(schema, "function")
            return f"{self._function(schema)}({v})"
        if kind == "nullable" and "ref" not in schema:
            self._only(schema, "schema")
            return f"({v} is None or {self._expr(schema['schema'], v)})"
        return f"{self._function(schema)}({v})"

    def _function(self, schema: dict[str, Any]) -> str:
        kind = schema.get("type")
        if kind == "definition-ref":
            self._only(schema, "schema_ref")
            if schema["schema_ref"] not in self.refs:
                raise _Uncompiled(kind)
            return self.refs[schema["schema_ref"]]
        if kind == "definitions":
            self._only(schema, "schema", "definitions")
            for definition in schema["definitions"]:
                self._function(definition)
            return self._function(schema["schema"])
        name = self.refs.get(schema["ref"]) if "ref" in schema else None
        if name is not None and f"def {name}(v):" in self.lines:
            return name
        name = name or self._name()
        body = self._body(schema, kind)
        self.lines.append(f"def {name}(v):")
        self.lines.extend(f"    {line}" for line in body)
        return name

    def _body(self, schema: dict[str, Any], kind: Any) -> list[str]:
        if kind in _SCALARS or kind == "nullable":
            return [f"return {self._expr({k: x for k, x in schema.items() if k != 'ref'}, 'v')}"]
        if kind == "default":
            self._only(
                schema,
                "schema",
                "default",
                "default_factory",
                "default_factory_takes_data",
                "validate_default",
            )
            return [f"return {self._expr(schema['schema'], 'v')}"]
        if kind == "list":
            self._only(schema, "items_schema")
            item = self._expr(schema.get("items_schema", {"type": "any"}), "x")
            if item == "True":
                return ["return type(v) is list"]
            return [
                "if type(v) is not list: return False",
                "for x in v:",
                f"    if not {item}: return False",
                "return True",
            ]
        if kind == "dict":
            self._only(schema, "keys_schema", "values_schema")
            keys = schema.get("keys_schema", {"type": "any"})
            if keys.get("type") not in ("str", "any") or not set(keys) <= _PLAIN:
                raise _Uncompiled("dict keys")
            value = self._expr(schema.get("values_schema", {"type": "any"}), "x")
            return [
                "if type(v) is not dict: return False",
                "for k, x in v.items():",
                f"    if type(k) is not str or not {value}: return False",
                "return True",
            ]
        if kind == "literal":
            self._only(schema, "expected")
            expected = schema["expected"]
            if not all(type(e) is str for e in expected):
                raise _Uncompiled("literal")
            const = self._const(frozenset(expected))
            return [f"return type(v) is str and v in {const}"]
        if kind == "union":
            self._only(schema, "choices", "mode", "custom_error_type", "custom_error_message")
            choices = [c[0] if isinstance(c, tuple) else c for c in schema["choices"]]
            return [f"return {' or '.join(self._expr(c, 'v') for c in choices)}"]
        if kind == "tagged-union":
            self._only(
                schema,
                "choices",
                "discriminator",
                "custom_error_type",
                "custom_error_message",
                "from_attributes",
            )
            key = schema["discriminator"]
            if not isinstance(key, str):
                raise _Uncompiled("discriminator")
            body = [
                "if type(v) is not dict: return False",
                f"t = v.get({key!r})",
                "if type(t) is not str: return False",
            ]
            for tag, choice in schema["choices"].items():
                if isinstance(tag, str):  # another tag's value falls to the validator
                    body.append(f"if t == {tag!r}: return {self._function(choice)}(v)")
            return [*body, "return False"]
        if kind == "function-plain":
            function = schema["function"]
            if function.get("type") != "no-info":
                raise _Uncompiled(kind)
            const = self._const(function["function"])
            return ["try:", f"    {const}(v)", "except Exception:", "    return False", "return True"]
        if kind == "function-before":
            self._only(schema, "function", "schema")
            function = schema["function"]
            if function.get("type") != "no-info":
                raise _Uncompiled(kind)
            const = self._const(function["function"])
            return [
                "try:",
                f"    v = {const}(v)",
                "except Exception:",
                "    return False",
                f"return {self._expr(schema['schema'], 'v')}",
            ]
        if kind == "typed-dict":
            return self._typed_dict(schema)
        raise _Uncompiled(kind)

    def _typed_dict(self, schema: dict[str, Any]) -> list[str]:
        self._only(schema, "fields", "config", "extra_behavior", "total", "computed_fields")
        if schema.get("computed_fields"):
            raise _Uncompiled("computed fields")
        config = schema.get("config") or {}
        extra = schema.get("extra_behavior") or config.get("extra_fields_behavior") or "ignore"
        body = ["if type(v) is not dict: return False"]
        for name, field in schema["fields"].items():
            if not set(field) <= {
                "type",
                "schema",
                "required",
                "metadata",
                "serialization_alias",
                "serialization_exclude",
            }:
                raise _Uncompiled("field")
            inner = field["schema"]
            if inner.get("type") == "default":
                self._only(
                    inner,
                    "schema",
                    "default",
                    "default_factory",
                    "default_factory_takes_data",
                    "validate_default",
                )
                inner = inner["schema"]
            expr = self._expr(inner, "x")
            if field.get("required", True):
                body.append(f"if {name!r} not in v: return False")
                if expr != "True":
                    body += [f"x = v[{name!r}]", f"if not {expr}: return False"]
            elif expr != "True":
                body += [f"if {name!r} in v:", f"    x = v[{name!r}]", f"    if not {expr}: return False"]
        if extra == "forbid":
            known = self._const(frozenset(schema["fields"]))
            body.append(f"if not {known}.issuperset(v): return False")
        elif extra not in ("allow", "ignore"):
            raise _Uncompiled("extra")
        body.append("return True")
        return body

    def _const(self, value: Any) -> str:
        name = f"_const_{self._name()}"
        self.scope[name] = value
        return name


_PREFIX = re.compile(r"\^([A-Za-z0-9_-]+)")
_UNCHANGED = re.compile("str|int|float|bool|none|any")
"""Checks that return the value they were given (a chain's step)."""


def _innermost(schema: dict[str, Any]) -> str:
    while schema.get("type") == "custom-error":
        schema = schema["schema"]
    return str(schema.get("type"))


def _as_typed_dicts(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_as_typed_dicts(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    if schema.get("type") == "model":
        inner = schema["schema"]
        decorators = schema["cls"].__pydantic_decorators__
        own_code = decorators.model_validators or decorators.field_validators or schema.get("post_init")
        if own_code or schema.get("root_model") or inner.get("type") != "model-fields":
            raise _OwnCode(schema["cls"])
        fields = {
            name: {
                "type": "typed-dict-field",
                "schema": _as_typed_dicts(field["schema"]),
                "required": field["schema"].get("type") != "default",
                **{k: field[k] for k in ("validation_alias",) if k in field},
            }
            for name, field in inner["fields"].items()
        }
        typed = {"type": "typed-dict", "fields": fields, "config": schema.get("config", {})}
        typed.update({k: inner[k] for k in ("extra_behavior", "extras_schema") if k in inner})
        typed.update({k: schema[k] for k in ("ref", "strict") if k in schema})
        return typed
    tag = schema.get("discriminator")
    if schema.get("type") == "tagged-union" and isinstance(tag, Member):
        # the members by their own tag: any other value (an "other" member's) fails here and is
        # validated again by `model`, which accepts it when the "other" member does
        choices = {kind: _as_typed_dicts(schema["choices"][f"{kind} {tag.suffix}"]) for kind in tag.members}
        return {**schema, "choices": choices, "discriminator": tag.key}
    return {key: _as_typed_dicts(value) for key, value in schema.items()}


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


@dataclass(frozen=True)
class Member:
    """A callable discriminator's tag: `value[key]` when it names a known member, else "other"; with a
    suffix no field is named, so that `_locate` leaves the tag out of the field path. Its members are
    known, so the typed-dict validator (`_dicts`) looks the tag up itself, with no call into Python."""

    key: str
    members: frozenset[str]
    suffix: str

    @property
    def __name__(self) -> str:  # pydantic names a callable discriminator in its schema
        return f"{self.key} {self.suffix}"

    def __call__(self, value: Any) -> str:
        kind = value.get(self.key) if isinstance(value, dict) else None
        return (
            f"{kind} {self.suffix}"
            if isinstance(kind, str) and kind in self.members
            else f"other {self.suffix}"
        )


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
