"""`make demo`: replay the bundled real Claude Code trajectory in a fresh container, continue the real
pinned CLI from the boundary through the bridge, and say where the result is.

The trajectory is the `write_edit` recording (made by tests/recorder.py with the pinned CLI). Its
workspace is copied and one file is changed, so the rerun shows a divergence at that call. The
model service is the scripted upstream of the test suite (no model service is reachable here): it
answers the continuation with one Bash call and a final text.
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
sys.path.insert(0, str(ROOT))

from bridges.scripted import Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn  # noqa: E402

SCRIPT = Script(
    message_id_prefix="msg_demo",
    turns=[
        Turn(
            blocks=[
                TextBlock(text="Let me check the result."),
                ToolUseBlock(id="toolu_demo_1", name="Bash", input={"command": "cat hello.py"}),
            ]
        ),
        Turn(blocks=[TextBlock(text="hello.py prints 'rewritten'; the task is done.")]),
    ],
)
DEMO_KEY = "sk-demo-upstream-key"
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
        with ScriptedUpstream(SCRIPT, expected_key=DEMO_KEY) as upstream:
            cmd += ["--continue", "--upstream", upstream.url, "--max-steps", "10"]
            env = {**os.environ, "ANTHROPIC_API_KEY": DEMO_KEY}
            proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
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
    print(f"  {cont['steps_used']} main-thread request(s) through the bridge, model {cont['model']}")
    print(f"continued session (envelope removed): {OUT / cont['files']['continued_session']}")
    print(f"expected prefix: {OUT / 'expected_prefix.json'}")
    print(f"result: {OUT / 'result.json'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
