"""`python -m replayer.verbs.schema` writes the JSON Schemas of the machine outputs into docs/."""

from pathlib import Path

import orjson

from replayer.floor.compare_results import CompareResult
from replayer.floor.results import ReplayResult
from replayer.floor.trajectory import InspectReport

if __name__ == "__main__":
    docs = Path(__file__).resolve().parents[2] / "docs"
    for name, model in (("result", ReplayResult), ("inspect", InspectReport), ("compare", CompareResult)):
        (docs / f"{name}.schema.json").write_bytes(
            orjson.dumps(model.model_json_schema(), option=orjson.OPT_INDENT_2) + b"\n"
        )
