"""Whether `docker commit` of a container would hold all its own files, at a bounded cost.

The engine tars the container's overlay upper directory by full host paths and skips, silently, every
path it cannot stat: one longer than PATH_MAX (4,095 bytes) with the upper directory's own path in
front (about 35 levels of 110-byte names). And a tar has no holes: a sparse file that costs nothing
under the container's quota becomes as many bytes of layer as its apparent size (a 2 GB sparse file in
/tmp, a 2.1 GB image layer on the engine's file system). So before a commit the layer is walked on the
host (lstat only, nothing followed or opened) and the commit is refused, with the reason, when a path
is too long, when the files' apparent sizes add up to more than the container's disk limit, or when
the layer holds more than MAX_ENTRIES paths (the walk's own bound).

Where the layer is not readable here (another host's engine, a user who is not root), the engine's own
account stands in (`engine_refusal`): the layer's apparent size (`SizeRw`, holes included) and its list
of changes, which the engine cannot make past PATH_MAX either (by the merged directory's path, two bytes
longer than the upper one's: a little stricter than the commit).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import docker.errors

PATH_MAX = 4095
"""The longest path, in bytes without the final NUL, that the engine's walk can stat."""
MAX_ENTRIES = 1_000_000


def escaped(path: bytes) -> str:
    """A file name as text that always serialises: bytes that are not UTF-8 as `\\xNN` escapes."""
    return path.decode("utf-8", "backslashreplace")


def shown(path: bytes, limit: int = 120) -> str:
    """A container path for a one-line message: escaped, a long middle cut."""
    text = escaped(path)
    if len(text) <= limit:
        return text
    return f"{text[: limit // 2]}...{text[-limit // 2 :]}"


def _mib(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def _too_large(max_bytes: int, largest: tuple[int, bytes] | None = None) -> str:
    biggest = f" (largest: {shown(largest[1])}, {_mib(largest[0])})" if largest else ""
    return (
        f"the container's own files add up to more than {_mib(max_bytes)} (the disk limit) of apparent "
        f"size, holes included, which docker commit writes as data{biggest}"
    )


def refusal(upper: Path, max_bytes: int) -> str | None:
    """Why committing the container whose overlay upper directory is `upper` would not give a complete
    snapshot of at most `max_bytes` of files; None when it would."""
    root = os.fsencode(upper)
    keep = PATH_MAX - len(root)  # the longest container path the commit keeps
    pending: list[bytes] = [b""]
    entries = apparent = 0
    largest = (0, b"")
    seen: set[tuple[int, int]] = set()
    while pending:
        folder = pending.pop()
        with os.scandir(root + folder) as found:
            for entry in found:
                entries += 1
                if entries > MAX_ENTRIES:
                    return f"the container holds more than {MAX_ENTRIES} paths outside its mounts"
                path = folder + b"/" + entry.name
                if len(path) > keep:
                    levels = path.count(b"/")
                    return (
                        f"the container holds {shown(path)}, {levels} levels and {len(path)} bytes deep: "
                        f"docker commit keeps paths of at most {keep} bytes here and would silently drop it"
                    )
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISDIR(info.st_mode):
                    pending.append(path)
                elif stat.S_ISREG(info.st_mode) and (info.st_dev, info.st_ino) not in seen:
                    if info.st_nlink > 1:
                        seen.add((info.st_dev, info.st_ino))  # a hard link is committed once
                    apparent += info.st_size
                    largest = max(largest, (info.st_size, path))
                    if apparent > max_bytes:
                        return _too_large(max_bytes, largest)
    return None


def engine_refusal(api: Any, container: str, max_bytes: int) -> str | None:
    """`refusal` by the engine's answers (`api`: the SDK's low-level client), for a paused container."""
    try:
        api.diff(container)
    except docker.errors.APIError as exc:
        if "name too long" not in str(exc.explanation or exc):
            raise
        return (
            "the container holds a path deeper than docker commit keeps (the engine cannot list its "
            "changes: file name too long); it would silently drop it"
        )
    listed = api.containers(all=True, size=True, filters={"id": container})
    size = listed[0].get("SizeRw") if len(listed) == 1 else None
    if not isinstance(size, int) or size < 0:
        return "the engine could not measure the container's own files"
    return _too_large(max_bytes) if size > max_bytes else None
