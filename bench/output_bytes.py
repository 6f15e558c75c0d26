"""What `run -n all` writes: a long Claude Code session whose every step prints about 30 KB, every boundary
of it in one replay; the bytes on disk (each inode once: a shared file is not a second copy) against the
bytes of every file of every boundary (what writing each boundary whole, as before sharing, writes), and
how the total grows from the first half of the boundaries to all of them (2: linear, 4: quadratic)."""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import struct
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from bench import long_sessions
from replayer import api
from replayer.floor.results import ReplayResult
from replayer.sandboxes.btrfs import FS_ROOT, is_btrfs

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


FS_IOC_FIEMAP = 0xC020660B
_EXTENTS = 256
_INLINE = 0x200


def _extents(path: str) -> list[tuple[int, int]]:
    """The physical (start, end) of the file's data (FIEMAP): a reflinked or deduplicated block is at the
    same place in every file that shares it."""
    found, start = [], 0
    with open(path, "rb") as fh:
        while True:
            arg = bytearray(
                struct.pack("=QQIIII", start, 2**64 - 1, 1, 0, _EXTENTS, 0) + bytes(56 * _EXTENTS)
            )
            fcntl.ioctl(fh.fileno(), FS_IOC_FIEMAP, arg)
            mapped = struct.unpack_from("=I", arg, 20)[0]
            last = False
            for i in range(mapped):
                logical, physical, length, _, _, flags = struct.unpack_from("=QQQQQI", arg, 32 + 56 * i)
                if flags & _INLINE:  # inside the metadata: its own bytes
                    physical = -(os.stat(path).st_ino << 20) - logical - 1
                found.append((physical, physical + length))
                start, last = logical + length, bool(flags & 1)
            if last or mapped == 0:
                return found


def _sizes(out: Path, boundaries: list[int]) -> tuple[list[int], list[int]]:
    """Per boundary, in order: the bytes of all its files, and the bytes on disk it adds (each physical
    block once, whatever shares it)."""
    whole, added, blocks = [], [], set()
    for k in boundaries:
        total = new = 0
        for folder, _, names in os.walk(out / f"after-{k}"):
            for name in names:
                path = os.path.join(folder, name)
                st = os.lstat(path)
                if not stat.S_ISREG(st.st_mode):
                    continue
                total += min(st.st_size, st.st_blocks * 512)
                for lo, hi in _extents(path):
                    for block in range(lo // 4096, -(-hi // 4096)):
                        if block not in blocks:
                            blocks.add(block)
                            new += 4096
        whole.append(total)
        added.append(new)
    return whole, added


def _measure(session: Path, ws: Path, out: Path) -> dict[str, Any]:
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


def bench_output(tmp: Path) -> dict[str, dict[str, Any]]:
    """The same run with its outputs on this file system and, where there is one, on the engine's btrfs
    (which clones and dedupes)."""
    session, ws = _session(tmp)
    rows = {"here": _measure(session, ws, tmp / "out")}
    if is_btrfs(FS_ROOT):
        with tempfile.TemporaryDirectory(dir=FS_ROOT, prefix="bench-output-") as there:
            rows["btrfs"] = _measure(session, ws, Path(there) / "out")
    return rows


def output_section(rows: dict[str, dict[str, Any]]) -> str:
    mib = 1 << 20
    first = rows["here"]
    lines = [
        OUTPUT_HEADING,
        "",
        f"`run -n all` of a Claude Code session of {first['steps']} steps, each printing about {PRINTED // 1000} KB",
        f"(`bench/output_bytes.py`, `python -m bench output`): {first['boundaries']} boundaries in one replay,",
        "its outputs on the machine's ext4 (hard links only) and on the engine's btrfs (reflinks, and blocks",
        'deduplicated). "Every file of every boundary" is what writing each boundary\'s directory whole writes',
        '(the code before files were shared); "on disk" counts each physical block once (FIEMAP). Growth: the',
        "total of all boundaries over the total of their first half (2 is linear in the steps, 4 quadratic).",
        "",
        "| outputs on | every file of every boundary | on disk | / every file | growth of every file | growth on disk | wall |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        whole, disk = int(row["whole"]), int(row["on_disk"])
        lines.append(
            f"| {name if name == 'btrfs' else 'ext4'} | {whole / mib:.0f} MiB | {disk / mib:.0f} MiB | "
            f"{disk / max(whole, 1):.2f} | {float(row['growth_whole']):.2f} | {float(row['growth_on_disk']):.2f} | "
            f"{float(row['wall_s']):.0f} s |"
        )
    lines += [
        "",
        f"The last boundary alone holds {int(first['last_boundary']) / mib:.1f} MiB: its rebuilt session,",
        "`reruns.json` and `expected_prefix.json` hold every step so far, and a rebuild writes them whole at",
        "every boundary. Where the file system dedupes, the blocks a boundary's file has in common with the",
        "boundary before's from its start are shared (`replayer/floor/dedupe.py`):",
        "the space grows linearly. Elsewhere (ext4) only unchanged files are shared (read-only hard links) and",
        "the growth stays quadratic; `--limits output=` (default 4 x `disk`) bounds it.",
        "",
    ]
    return "\n".join(lines)
