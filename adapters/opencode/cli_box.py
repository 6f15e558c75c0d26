"""The OpenCode CLI outside a run's sandbox (the rebuild's `opencode import`, which `prepare` runs too): in a
sandbox of its own, never on the host. The version is the trajectory's choice, so its code is someone else's:
it runs as a rerun does, without network, seeing its bundle (read-only) and a folder of this process's own.

One sandbox per version for the life of the process (a prepare of many boundaries imports at each: an exec
each, not a container each), removed at exit, with the sandboxes of an interrupted run, or by the next start's
sweep of a killed process's containers. Each use gets a fresh home in that folder; what the CLI wrote there is
read back only by `copy_out` (descriptors, no link followed, bounded) and as the CLI's output (`cat` in the
sandbox)."""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from replayer import installer
from replayer.adapters.opencode import bundle
from replayer.floor.pins import load_pins
from replayer.floor.safecopy import copy_untrusted
from replayer.sandboxes import engines
from replayer.sandboxes.base import Sandbox, SandboxSpec

MOUNT = "/run/replayer-opencode-cli"
"""Where the process's folder is in the CLI's sandbox."""
_BOXES: dict[str, tuple[int, Sandbox, Path]] = {}
"""Version -> (the process that started it, its sandbox, the host folder mounted at MOUNT)."""
_LOCK = threading.Lock()


def _box(version: str) -> tuple[Sandbox, Path]:
    with _LOCK:
        held = _BOXES.get(version)
        if held is not None and held[0] == os.getpid():  # not one a forked parent started
            return held[1], held[2]
        installer.verified(bundle.NAME, version)  # every file as installed, before any of it runs
        folder = Path(tempfile.mkdtemp(prefix="replayer-opencode-cli-"))
        spec = SandboxSpec(
            image=load_pins().base_image.tag,
            binds={MOUNT: (folder, False), **bundle.binds()},
            workdir=MOUNT,
            run_id=f"opencode-cli-{uuid.uuid4().hex[:12]}",
        )
        try:
            box = engines.chosen().start(spec)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        if not _BOXES:
            atexit.register(_close_all)
        _BOXES[version] = (os.getpid(), box, folder)
        return box, folder


def _close_all() -> None:
    for version, (pid, box, folder) in list(_BOXES.items()):
        if pid == os.getpid():
            with contextlib.suppress(Exception):
                box.stop()
            shutil.rmtree(folder, ignore_errors=True)
        del _BOXES[version]


@dataclass(frozen=True)
class CliHome:
    """A fresh folder of the CLI's sandbox, `work` on the host and `inside` there: the CLI's home in it
    (`home`: the sandbox writes into it, never read it directly) and what the CLI is given (`give`)."""

    box: Sandbox
    work: Path
    inside: str

    @property
    def home(self) -> Path:
        return self.work / "home"

    def give(self, source: Path) -> str:
        """A copy of `source` (a file the replayer wrote) for the CLI: its path in the sandbox. Created anew,
        following no link: a process the sandbox kept could plant one in the folder meanwhile."""
        folder = os.open(self.work, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
            out = os.open(source.name, flags, 0o644, dir_fd=folder)
        finally:
            os.close(folder)
        with os.fdopen(out, "wb") as copy, source.open("rb") as original:
            shutil.copyfileobj(original, copy)
        return f"{self.inside}/{source.name}"

    def run(self, *args: str) -> bytes:
        """`opencode ARGS` with this home as its whole home and folder; its standard output."""
        home = f"{self.inside}/home"
        env = {"TMPDIR": f"{home}/.cache/replayer-tmp", "OPENCODE_DISABLE_PROJECT_CONFIG": "1"}
        return bundle.run_in(self.box, list(args), home=home, stdout=f"{self.inside}/stdout", env=env)

    def copy_out(self, dest: Path) -> None:
        """What the home holds now, copied to `dest` (created) without following a link (links skipped)."""
        copy_untrusted(self.home, dest, links="skip", what="the OpenCode CLI's home", holes="count")


@contextlib.contextmanager
def cli_home(seed: Path | None = None) -> Iterator[CliHome]:
    """A fresh home for the running version's CLI in its sandbox (a copy of `seed`, files the replayer
    wrote, links kept as links), removed after."""
    box, root = _box(bundle.version())
    work = Path(tempfile.mkdtemp(dir=root))
    try:
        cli = CliHome(box, work, f"{MOUNT}/{work.name}")
        if seed is not None:
            shutil.copytree(seed, cli.home, symlinks=True)
        cli.home.mkdir(exist_ok=True)
        yield cli
    finally:
        shutil.rmtree(work, ignore_errors=True)
