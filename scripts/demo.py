"""`make demo`: replay the bundled real Claude Code trajectory in a fresh container and say where the result is.

The trajectory is the `write_edit` recording (made by tests/recorder.py with the pinned CLI). Its
workspace is copied and one file is changed, so the rerun shows a divergence at that call.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
RECORDING = ROOT / "tests" / "fixtures" / "claude_code" / "write_edit"
OUT = ROOT / "demo-out"


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        workspace = Path(tmp) / "workspace"
        shutil.copytree(RECORDING / "workspace", workspace)
        (workspace / "hello.py").write_text("def greet():\n    print('hello, world')\n\ngreet()\n")
        cmd = [
            sys.executable,
            "-m",
            "replayer.cli",
            "run",
            str(RECORDING / "session.jsonl"),
            "--after-step",
            "5",
        ]
        cmd += ["--workspace", str(workspace), "--out", str(OUT), "--force", "--json"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            return proc.returncode
    result = orjson.loads(proc.stdout)
    print(f"replayed {result['agent']} {result['agent_version']} session {result['session_id']}")
    print(f"boundary: after step {result['after_step']} in image {result['image']}")
    for d in result["divergences"]:
        print(
            f"  step {d['step']} {d['tool']:<5} {d['status']}"
            + (f"  (at offset {d['first_difference']})" if d["status"] == "different" else "")
        )
    print(f"rebuilt session: {OUT / result['native_files'][0]}")
    print(f"expected prefix: {OUT / 'expected_prefix.json'}")
    print(f"result: {OUT / 'result.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
