"""A Codex continuation against the built-in mock, with the sandbox's resolv.conf (`options timeout:0
attempts:1`) against the one before it (no name server, no options), run side by side in alternating
rounds. Codex is a musl binary: its look-ups of its own services (api.github.com, ab.chatgpt.com), sent to
a name server that is not there, waited out musl's timeout (5 s, 2 attempts) on every start."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from unittest import mock

import orjson

from replayer import api
from replayer.sandboxes import docker as docker_engine

NAME_LOOKUPS_HEADING = "## Name look-ups in the sandbox"
ROUNDS = 3
FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "codex" / "exec"
BEFORE = "# no network in the sandbox: no name server\n"


def _continue(tmp: Path, engine_files: Path) -> float:
    script = tmp / "script.json"
    script.write_bytes(orjson.dumps({"turns": [{"blocks": [{"type": "text", "text": "Ok."}]}]}))
    out = Path(tempfile.mkdtemp(dir=tmp)) / "out"
    with mock.patch.object(docker_engine, "ENGINE_FILES", engine_files):
        t0 = time.perf_counter()
        result = api.run(
            FIXTURE / "rollout.jsonl",
            1,
            FIXTURE / "workspace",
            out,
            continue_agent=True,
            upstream=f"mock:{script}",
        )
        wall = time.perf_counter() - t0
    assert result.continuation is not None and result.continuation.agent_status == "completed"
    return wall


def bench_name_lookups(tmp: Path) -> dict[str, float]:
    before = tmp / "etc-before"
    shutil.copytree(docker_engine.ENGINE_FILES, before)
    (before / "resolv.conf").write_text(BEFORE)
    samples: dict[str, list[float]] = {"before": [], "now": []}
    for _ in range(ROUNDS):
        samples["before"].append(_continue(tmp, before))
        samples["now"].append(_continue(tmp, docker_engine.ENGINE_FILES))
    return {way: statistics.median(s) for way, s in samples.items()}


def name_lookups_section(m: dict[str, float]) -> str:
    load = os.getloadavg()[1]
    return f"""{NAME_LOOKUPS_HEADING}

`python -m bench name-lookups`: `run -n 1 --continue` of the Codex fixture against the built-in mock (a
fresh container, the rerun, the continuation through the bridge), with the sandbox's `/etc/resolv.conf`
as it is and as it was before, {ROUNDS} alternating rounds, medians of wall time, load average {load:.1f}
over 5 minutes at the end (a shared machine).

| sandbox resolv.conf | wall | ratio |
|---|---|---|
| baseline: no name server, no options (musl waits 5 s, 2 attempts, for a server that is not there) | {m["before"]:.1f} s | 1.00 |
| the replayer: no name server, `options timeout:0 attempts:1` | {m["now"]:.1f} s | **{m["now"] / m["before"]:.2f}** |

A name look-up fails in the sandbox either way (it has no network), with the same error; only the wait
before it goes. glibc programs (Node, Python) were not waiting: a connected UDP socket to the absent
server is refused at once. Every Codex start in a sandbox (each continuation, each step of a rerun driven
through the CLI) saved about 5 s.
"""


if __name__ == "__main__":  # `python -m bench.name_lookups`: this section alone, printed
    with tempfile.TemporaryDirectory() as tmp:
        print(name_lookups_section(bench_name_lookups(Path(tmp))))
