"""The documents that describe machine output stay true."""

from __future__ import annotations

import orjson

from replayer.floor.compare_results import CompareResult
from replayer.floor.errors import ReplayError
from replayer.floor.results import ReplayResult
from replayer.floor.trajectory import InspectReport
from tests.conftest import ROOT


def _all_errors(cls: type[ReplayError]) -> list[type[ReplayError]]:
    out = [cls]
    for sub in cls.__subclasses__():
        out += _all_errors(sub)
    return out


def test_result_schema_is_current() -> None:
    committed = orjson.loads((ROOT / "docs" / "result.schema.json").read_bytes())
    assert committed == ReplayResult.model_json_schema(), (
        "run: python -m replayer.verbs.schema > docs/result.schema.json"
    )


def test_inspect_schema_is_current() -> None:
    committed = orjson.loads((ROOT / "docs" / "inspect.schema.json").read_bytes())
    assert committed == InspectReport.model_json_schema()


def test_compare_schema_is_current() -> None:
    committed = orjson.loads((ROOT / "docs" / "compare.schema.json").read_bytes())
    assert committed == CompareResult.model_json_schema()


def test_every_exit_code_is_documented() -> None:
    doc = (ROOT / "docs" / "cli.md").read_text()
    for cls in _all_errors(ReplayError):
        assert f"| {cls.exit_code} | `{cls.kind}`" in doc, cls.__name__
