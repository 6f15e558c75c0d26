"""A record model's checks compiled to Python: one function per record kind, read from the model's annotations.

pydantic's validator builds a copy of every object it checks; these checks copy nothing and test the exact
JSON types (a field typed `str` holds a `str`), which is as strict as the models read JSON or stricter. A
check accepts only what its model accepts (a property test holds it against the models on mutated records),
so a value it does not accept is not refused for that: `shapes.check` asks the model, whose error names the
field. They read only public typing: a model's fields (`model_fields`), its config, `Annotated` metadata
(`BeforeValidator`, a `Discriminator` by `Member`, a `Rule`), unions, literals, lists and dicts. What they do
not know (a constraint, another validator) is checked by pydantic's own validator of that annotation alone.

Why source text and `exec`, not closures: a check written as closures that interpret the fields (a loop
over (key, types) pairs, a call per nested value) was measured at 1.7 to 2.5 times the compiled one on
the recorded records, and the checks are a third of OpenCode's parse (docs/benchmarks.md); the source is
made only from the names of fields and of the constants it refers to (`repr` of a key, a constant by name).
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, BeforeValidator, Discriminator, Tag, TypeAdapter, ValidationError
from pydantic_core import CoreSchema

Check = Callable[[Any], bool]


@dataclass(frozen=True, eq=False)  # hashed by identity: a schema is a dict
class Rule:
    """A check of one value written twice, as plain Python (`test`, what the record checks call) and as the
    validator's schema (`schema`, whose error message explains a refusal): the two accept the same values
    (the property test holds them together on mutated records)."""

    test: Check | frozenset[type]
    """A check, or the exact types a value may have; a `Prefix` and the types are written inline."""
    schema: CoreSchema

    def __get_pydantic_core_schema__(self, _source: Any, _handler: Any) -> CoreSchema:
        return self.schema


@dataclass(frozen=True)
class Member:
    """A callable discriminator's tag: `value[key]` when it names a known member, else "other"; with a
    suffix no field is named, so that an error's field path leaves the tag out. Its members are known, so
    a record check looks the tag up itself; a value of the "other" member is left to the model."""

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


@functools.cache
def record_check(model: Any) -> Check | None:
    """`model`'s check, or None when the model runs code of its own on its instance (a validator): only the
    model checks it. True means valid; False means "ask the model" (also for a value only an "other" member
    of a union takes)."""
    if isinstance(model, type) and issubclass(model, BaseModel) and _own_code(model):
        return None
    return _Compiler().compile(model)


class _Unknown(Exception):
    """An annotation the compiler does not read: pydantic's validator of it checks it."""


_SCALARS: dict[Any, str] = {
    str: "type({v}) is str",
    int: "type({v}) is int",
    bool: "type({v}) is bool",
    float: "(type({v}) is float or type({v}) is int)",
    type(None): "{v} is None",
    None: "{v} is None",
    Any: "True",
    object: "True",
    list: "type({v}) is list",
}


class _Compiler:
    """Python source from a model's annotations: an expression per scalar, a function per model/container."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.scope: dict[str, Any] = {}
        self.models: dict[type[BaseModel], str] = {}
        self.count = 0

    def compile(self, annotation: Any) -> Check:
        top = self._function(annotation, strict=False)
        exec("\n".join(self.lines), self.scope)
        checker: Check = self.scope[top]
        return checker

    def _name(self) -> str:
        self.count += 1
        return f"_check_{self.count}"

    def _const(self, value: Any) -> str:
        name = f"_const_{self._name()}"
        self.scope[name] = value
        return name

    def _emit(self, body: list[str]) -> str:
        name = self._name()
        self.lines.append(f"def {name}(v):")
        self.lines.extend(f"    {line}" for line in body)
        return name

    def _expr(self, tp: Any, v: str, strict: bool) -> str:
        """An expression true when `v` is valid as `tp`."""
        try:
            return self._known(tp, v, strict)
        except _Unknown:
            return f"{self._const(_validated(tp, strict))}({v})"

    def _function(self, tp: Any, strict: bool) -> str:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return self._model(tp)
        return self._emit([f"return {self._expr(tp, 'v', strict)}"])

    def _known(self, tp: Any, v: str, strict: bool) -> str:
        if tp in _SCALARS:
            return _SCALARS[tp].format(v=v)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return f"{self._model(tp)}({v})"
        origin, args = get_origin(tp), get_args(tp)
        if origin is Annotated:
            return self._annotated(args[0], args[1:], v, strict)
        if origin is Union or origin is types.UnionType:
            return "(" + " or ".join(self._expr(arg, v, strict) for arg in args) + ")"
        if origin is Literal and all(type(arg) is str for arg in args):
            return f"(type({v}) is str and {v} in {self._const(frozenset(args))})"
        if origin is list:
            item = self._expr(args[0], "x", strict)
            if item == "True":
                return f"type({v}) is list"
            body = ["if type(v) is not list: return False", "for x in v:", f"    if not {item}: return False"]
            return f"{self._emit([*body, 'return True'])}({v})"
        if origin is dict or tp is dict:
            if args and args[0] not in (str, Any):
                raise _Unknown(tp)
            value = self._expr(args[1], "x", strict) if args else "True"
            body = [
                "if type(v) is not dict: return False",
                "for k, x in v.items():",
                f"    if type(k) is not str or not {value}: return False",
                "return True",
            ]
            return f"{self._emit(body)}({v})"
        raise _Unknown(tp)

    def _annotated(self, tp: Any, metadata: tuple[Any, ...], v: str, strict: bool) -> str:
        tagged = [m.discriminator for m in metadata if isinstance(m, Discriminator)]
        if len(tagged) > 1 or tagged and not isinstance(tagged[0], Member):
            raise _Unknown(tp)
        wrappers = [m for m in metadata if not isinstance(m, (Tag, Discriminator))]
        if not all(isinstance(m, (Rule, BeforeValidator)) for m in wrappers):
            raise _Unknown(tp)
        if tagged and isinstance(tagged[0], Member):
            function = self._tagged(tp, tagged[0], strict)
            return self._wrapped(lambda w: f"{function}({w})", wrappers, v)
        return self._wrapped(lambda w: self._expr(tp, w, strict), wrappers, v)

    def _wrapped(self, base: Callable[[str], str], wrappers: list[Any], v: str) -> str:
        """The check of `base` inside `wrappers`, the last the outermost (a `Rule` replaces what it wraps)."""
        if not wrappers:
            return base(v)
        *inner, last = wrappers
        if isinstance(last, BeforeValidator):
            body = ["try:", f"    v = {self._const(last.func)}(v)", "except Exception:", "    return False"]
            checked = self._wrapped(base, inner, "v")
            return f"{self._emit([*body, f'return {checked}'])}({v})"
        test = last.test
        if isinstance(test, Prefix):
            return f"(type({v}) is str and {v}.startswith({test.prefix!r}))"
        if isinstance(test, frozenset):
            return f"type({v}) in {self._const(test)}"
        return f"{self._const(test)}({v})"

    def _tagged(self, tp: Any, member: Member, strict: bool) -> str:
        if get_origin(tp) not in (Union, types.UnionType):
            raise _Unknown(tp)
        body = [
            "if type(v) is not dict: return False",
            f"t = v.get({member.key!r})",
            "if type(t) is not str: return False",
        ]
        for choice in get_args(tp):
            tags = [m for m in get_args(choice)[1:] if isinstance(m, Tag)] if get_origin(choice) else []
            if len(tags) != 1:
                raise _Unknown(choice)
            kind = tags[0].tag.removesuffix(f" {member.suffix}")
            if kind in member.members:  # another tag's value (an "other" member's) is left to the model
                body.append(f"if t == {kind!r}: return {self._expr(get_args(choice)[0], 'v', strict)}")
        return self._emit([*body, "return False"])

    def _model(self, model: type[BaseModel]) -> str:
        if model in self.models:
            return self.models[model]
        if _own_code(model) or "__pydantic_extra__" in model.__annotations__:
            return self._emit([f"return {self._const(_validated(model, False))}(v)"])
        name = self.models[model] = self._name()  # a model that nests itself calls its function by name
        config = model.model_config
        strict = bool(config.get("strict", False))
        body = ["if type(v) is not dict: return False"]
        keys = []
        for field_name, field in model.model_fields.items():
            key = field.validation_alias or field.alias or field_name
            if not isinstance(key, str) or (key != field_name and config.get("populate_by_name")):
                raise _Unknown(model)
            if field.discriminator is not None:
                raise _Unknown(model)
            keys.append(key)
            annotation: Any = field.annotation
            if field.metadata:
                annotation = Annotated[(annotation, *field.metadata)]
            expr = self._expr(annotation, "x", strict)
            if field.is_required():
                body.append(f"if {key!r} not in v: return False")
                if expr != "True":
                    body += [f"x = v[{key!r}]", f"if not {expr}: return False"]
            elif expr != "True":
                body += [f"if {key!r} in v:", f"    x = v[{key!r}]", f"    if not {expr}: return False"]
        if (config.get("extra") or "ignore") == "forbid":
            body.append(f"if not {self._const(frozenset(keys))}.issuperset(v): return False")
        body.append("return True")
        self.lines.append(f"def {name}(v):")
        self.lines.extend(f"    {line}" for line in body)
        return name


def _own_code(model: type[BaseModel]) -> bool:
    decorators = model.__pydantic_decorators__
    own = decorators.model_validators or decorators.field_validators or decorators.validators
    return bool(
        own or decorators.root_validators or model.__pydantic_post_init__ or model.__pydantic_root_model__
    )


@dataclass(frozen=True)
class Prefix:
    """A string starting with `prefix` (a `Rule`'s test the compiled check writes inline)."""

    prefix: str

    def __call__(self, value: Any) -> bool:
        return type(value) is str and value.startswith(self.prefix)


def _validated(annotation: Any, strict: bool) -> Check:
    """pydantic's own validator of `annotation`, as a check."""
    adapter: TypeAdapter[Any] = TypeAdapter(annotation)

    def validated(v: Any) -> bool:
        try:
            adapter.validate_python(v, strict=strict or None)
        except ValidationError:
            return False
        return True

    return validated
