"""Fixture recorder for Gemini CLI's `/export-session FILE` documents.

The command is interactive only; what it writes is `JSON.stringify(sessionData, null, 2)`, where
`sessionData` is the CLI's own `loadConversationRecord` of the session's log with `startTime` and
`lastUpdated` kept (`exportSessionCommand.ts` and `SessionSelector.selectSession`, 0.45 to 0.61). This
runs exactly that code of the pinned bundle with node, on the `tools` scenario's log recorded by the real
CLI (tests/recorder_gemini.py), and writes tests/fixtures/gemini_cli/export/session-export.json.

`python -m tests.recorder_gemini_export`
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from replayer.floor import bundles
from replayer.floor.pins import pinned_version

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gemini_cli"
SCRIPT = """
const {{ loadConversationRecord }} = await import({module});
const sessionData = await loadConversationRecord(process.argv[2]);
const normalized = {{ ...sessionData, startTime: sessionData.startTime, lastUpdated: sessionData.lastUpdated }};
process.stdout.write(JSON.stringify(normalized, null, 2));
process.exit(0);
"""


def export(log: Path) -> bytes:
    """The `/export-session` document of the session `log`, made by the pinned bundle's own code."""
    bundle = (
        bundles.bundle_dir("gemini_cli", pinned_version("gemini_cli")) / "node_modules/@google/gemini-cli"
    )
    # the bundle repeats the module in several chunks (one per entry point): any of them is the code
    chunks = sorted(
        p
        for p in (bundle / "bundle").glob("chunk-*.js")
        if "async function loadConversationRecord(" in p.read_text()
    )
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "export.mjs"
        script.write_text(SCRIPT.format(module=repr(chunks[0].as_uri())))  # the first that defines it
        done = subprocess.run(["node", str(script), str(log)], capture_output=True, check=True, timeout=120)
    return done.stdout


def main() -> None:
    dest = FIXTURES / "export" / "session-export.json"
    dest.parent.mkdir(exist_ok=True)
    dest.write_bytes(export(FIXTURES / "tools" / "session.jsonl"))
    print("recorded", dest)


if __name__ == "__main__":
    main()
