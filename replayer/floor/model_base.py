"""The two bases of every record that crosses a boundary or lands on disk, and the schema version of
the files written."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, ValidationError

SCHEMA_VERSION = 1


class Strict(BaseModel):
    """Unknown fields refused; fields assignable (a record filled in as things happen)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)


class Frozen(Strict):
    """Unknown fields refused; immutable once built (a changed copy: `model_copy(update=...)`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


def first_error(exc: ValidationError) -> str:
    """A model's first validation error in one line: `where: why (got VALUE)`."""
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"]) or "value"
    return f"{where}: {error['msg']} (got {error['input']!r})"
