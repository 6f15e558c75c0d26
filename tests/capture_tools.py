"""Store, per pinned CLI version, the tool definitions the real CLI sent on the wire (from the recordings).

`python -m tests.capture_tools` (run by `make record` after recording) writes
adapters/<agent>/data/<version>/tools.json: native sessions do not store tool definitions, and
exported training records need them.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from replayer.floor.pins import load_pins

ROOT = Path(__file__).resolve().parent.parent
SOURCES = {
    "claude_code": ("tests/fixtures/claude_code/parallel/upstream.jsonl", "adapters/claude_code/data"),
    "codex": ("tests/fixtures/codex/exec/upstream.jsonl", "adapters/codex/data"),
    "mini_swe_agent": (
        "tests/fixtures/mini_swe_agent/toolcall/upstream.jsonl",
        "adapters/mini_swe_agent/data",
    ),
    "opencode": ("tests/fixtures/opencode/tools/upstream.jsonl", "adapters/opencode/data"),
    "pi": ("tests/fixtures/pi/tools/upstream.jsonl", "adapters/pi/data"),
    "openhands": ("tests/fixtures/openhands/v1/upstream.jsonl", "adapters/openhands/data"),
    "openhands_v0": ("tests/fixtures/openhands/v0/upstream.jsonl", "adapters/openhands/data"),
    "gemini_cli": ("tests/fixtures/gemini_cli/tools/upstream.jsonl", "adapters/gemini_cli/data"),
}


def capture() -> list[Path]:
    written = []
    for agent, (log, data) in SOURCES.items():
        requests = [orjson.loads(line) for line in (ROOT / log).read_bytes().splitlines()]
        main = [r for r in requests if r["main_thread"] and (r["body"] or {}).get("tools")]
        dest = ROOT / data / load_pins().agents[agent].version / "tools.json"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(orjson.dumps(main[-1]["body"]["tools"], option=orjson.OPT_INDENT_2) + b"\n")
        written.append(dest)
    return written


if __name__ == "__main__":
    for path in capture():
        print("captured", path)
