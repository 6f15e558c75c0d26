"""What `run -n all` writes: a long Claude Code session whose every step prints about 30 KB, every boundary
of it in one replay; the bytes on disk (each inode once: a shared file is not a second copy) against the
bytes of every file of every boundary (what writing each boundary whole, as before sharing, writes), and
how the total grows from the first half of the boundaries to all of them (2: linear, 4: quadratic)."""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path

import orjson

from bench import long_sessions
from replayer import api
from replayer.floor.models import ReplayResult

OUTPUT_HEADING = "## Output of many boundaries: shared files and growth"
COPIES = 60
"""Two steps a copy: 120 steps."""
PRINTED = 29_000
"""Bytes each step prints (under Claude Code's 30,000-character cut of a Bash output)."""


def _session(tmp: Path) -> tuple[Path, Path]:
    """The long session with each Bash call printing PRINTED bytes and each Read reading as many; its
    workspace."""
    path = long_sessions.claude_code(tmp, COPIES)
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    for record in records:
        content = (record.get("message") or {}).get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use" and block.get("name") == "Bash":
                block["input"]["command"] = "cat printed.txt"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    ws = tmp / "workspace"
    shutil.copytree(long_sessions.FIXTURES / "claude_code" / "parallel" / "workspace", ws)
    line = "0123456789" * 5 + "\n"
    (ws / "printed.txt").write_text(line * (PRINTED // len(line)))
    (ws / "hello.py").write_text(("print('hello')  # " + "x" * 40 + "\n") * (PRINTED // 60))
    return path, ws


def _sizes(out: Path, boundaries: list[int]) -> tuple[list[int], list[int]]:
    """Per boundary, in order: the bytes of all its files, and the bytes of the inodes it adds."""
    whole, added, seen = [], [], set()
    for k in boundaries:
        total = new = 0
        for folder, _, names in os.walk(out / f"after-{k}"):
            for name in names:
                st = os.lstat(os.path.join(folder, name))
                if not stat.S_ISREG(st.st_mode):
                    continue
                size = min(st.st_size, st.st_blocks * 512)
                total += size
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    new += size
        whole.append(total)
        added.append(new)
    return whole, added


def bench_output(tmp: Path) -> dict[str, object]:
    session, ws = _session(tmp)
    out = tmp / "out"
    started = time.monotonic()
    outcomes = api.run_boundaries(session, "all", ws, out, limits="disk=8g,output=64g")
    wall = time.monotonic() - started
    assert all(isinstance(r, ReplayResult) for r in outcomes.values()), outcomes
    boundaries = sorted(outcomes)
    whole, added = _sizes(out, boundaries)
    half = len(boundaries) // 2
    return {
        "steps": boundaries[-1],
        "boundaries": len(boundaries),
        "wall_s": wall,
        "whole": sum(whole),
        "on_disk": sum(added),
        "growth_whole": sum(whole) / max(sum(whole[:half]), 1),
        "growth_on_disk": sum(added) / max(sum(added[:half]), 1),
        "last_boundary": whole[-1],
    }


def output_section(row: dict[str, object]) -> str:
    mib = 1 << 20
    whole, disk = int(row["whole"]), int(row["on_disk"])  # type: ignore[call-overload]
    return f"""{OUTPUT_HEADING}

`run -n all` of a Claude Code session of {row["steps"]} steps, each printing about {PRINTED // 1000} KB
(`bench/output_bytes.py`, `python -m bench output`): {row["boundaries"]} boundaries in one replay
({float(row["wall_s"]):.0f} s). "Every file of every boundary" is what writing each boundary's directory whole
writes (the code before unchanged files were shared); "on disk" counts each inode once. Growth: the total of
all boundaries over the total of their first half (2 is linear in the steps, 4 quadratic).

| | bytes | / every file of every boundary | growth, all / first half |
|---|---|---|---|
| every file of every boundary | {whole / mib:.0f} MiB | 1.00 | {float(row["growth_whole"]):.2f} |
| on disk | {disk / mib:.0f} MiB | {disk / max(whole, 1):.2f} | {float(row["growth_on_disk"]):.2f} |

The last boundary alone holds {int(row["last_boundary"]) / mib:.1f} MiB (its session, its reruns and its
agent home hold every step so far). Files that did not change between two boundaries (the workspace, the
agent home's other files) are shared; the files that hold every step so far (the rebuilt session, the
driven CLI's own session, `reruns.json`) are new at every boundary, so the total stays quadratic in the
steps: a boundary's session is not a prefix of the next one's on disk (a rebuild rewrites it whole).
`--limits output=` (default 4 x `disk`) bounds it.
"""
