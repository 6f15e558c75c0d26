"""Recorded sessions changed for a test: a call's input replaced (a hostile, slow or malformed prefix)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tests.conftest import CLAUDE


def patched_session(dest: Path, call_id: str, change: dict[str, Any], scenario: str = "single") -> Path:
    """The recorded Claude Code `scenario` session with `change` merged into one tool_use's input."""
    lines = []
    for line in (CLAUDE.fixture(scenario) / "session.jsonl").read_bytes().splitlines():
        record = orjson.loads(line)
        content = (record.get("message") or {}).get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use" and block.get("id") == call_id:
                block["input"].update(change)
        lines.append(orjson.dumps(record))
    dest.write_bytes(b"\n".join(lines) + b"\n")
    return dest
