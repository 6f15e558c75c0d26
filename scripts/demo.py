"""`make demo`: replay the bundled real Claude Code trajectory in a fresh container, continue the real
pinned CLI from the boundary through the bridge, and say where the result is.

The trajectory is the `write_edit` recording (made by tests/recorder_claude_code.py with the pinned CLI). Its
workspace is copied and one file is changed, so the rerun shows a divergence at that call. The model is
the replayer's built-in mock (`--upstream mock:FILE`, no key): it answers the continuation with one Bash
call and a final text, from the script written below (docs/cli.md, "The mock model").
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = {
    "turns": [
        {
            "blocks": [
                {"type": "text", "text": "Let me check the result."},
                {
                    "type": "tool_use",
                    "id": "toolu_demo_1",
                    "name": "Bash",
                    "input": {"command": "cat hello.py"},
                },
            ]
        },
        {"blocks": [{"type": "text", "text": "hello.py prints 'rewritten'; the task is done."}]},
    ]
}
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
        script = Path(tmp) / "turns.json"
        script.write_bytes(orjson.dumps(SCRIPT))
        cmd += ["--workspace", str(workspace), "--out", str(OUT), "--force", "--json"]
        cmd += ["--continue", "--upstream", f"mock:{script}", "--max-steps", "10"]
        env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}  # the mock needs no key
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        if proc.returncode != 0:
            sys.stderr.write(proc.stderr)
            return proc.returncode
    result = orjson.loads(proc.stdout)
    print(f"replayed {result['agent']} {result['agent_version']} session {result['session_id']}")
    print(f"boundary: after step {result['after_step']} in image {result['image']}")
    for d in result["divergences"]:
        print(
            f"  step {d['step']} {d['tool']:<5} {d['status']}"
            + (f"  (at line {d['line']}, column {d['column']})" if d["status"] == "different" else "")
        )
    print(f"rebuilt session: {OUT / result['native_files'][0]}")
    cont = result["continuation"]
    print(
        f"continuation: input condition {cont['input_condition']}, gate {cont['gate']}, agent_status {cont['agent_status']}"
    )
    print(
        f"  {cont['steps_used']} main-thread request(s) through the bridge, model {cont['model']}"
        + (" (answered by the built-in mock model)" if cont["mock"] else "")
    )
    print(f"continued session (envelope removed): {OUT / cont['files']['continued_session']}")
    print(f"expected prefix: {OUT / 'expected_prefix.json'}")
    print(f"result: {OUT / 'result.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
