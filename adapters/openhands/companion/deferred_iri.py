"""Imported first by the V0 companion and its action execution server (v0_server.py): rfc3987_syntax, which
openhands-ai 1.6.0 installs for jsonschema's `iri` and `iri-reference` formats, builds an Earley parser of
RFC 3987's grammar as it is imported, ~1.5 CPU-s in every process that imports jsonschema (the server, and
the continuation's companion through `openhands.core.main`), whether or not an IRI is ever checked. Here
the module is imported where it is first used instead: jsonschema registers the same checks, and the first
check (or any other use of the module) imports the real one and goes on with it. A version without it (0.x)
is left as it is."""

import importlib
import importlib.util
import sys
import types

NAME = "rfc3987_syntax"


def _real():
    """The real module, imported at its first use (the stand-in leaves sys.modules for it)."""
    if isinstance(sys.modules.get(NAME), _Deferred):
        del sys.modules[NAME]
    return importlib.import_module(NAME)


class _Deferred(types.ModuleType):
    def __getattr__(self, attr):
        if attr.startswith("__"):  # the import system's questions (`__path__` of `from ... import`)
            raise AttributeError(attr)
        return getattr(_real(), attr)


def is_valid_syntax(term, value):
    """What jsonschema imports by name (`from rfc3987_syntax import is_valid_syntax`): the real one's."""
    return _real().is_valid_syntax(term, value)


def defer():
    spec = None if NAME in sys.modules else importlib.util.find_spec(NAME)
    if spec is None:
        return
    stand_in = _Deferred(NAME)
    stand_in.__spec__ = spec  # what find_spec answers of a module in sys.modules
    stand_in.__dict__["is_valid_syntax"] = is_valid_syntax
    sys.modules[NAME] = stand_in


defer()
