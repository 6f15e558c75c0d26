"""Containers ahead of need: a backend that starts the next run's container while the current run goes on.

A batch worker runs short jobs one after another; each would wait for its container's start (create, the
quota on its writable layer, runc: about 0.6 s). `AheadBackend` starts one spare container, shaped like
the run it just started (same image, working directory, mounts, limits, labels), over the empty folders of
a slot (sandboxes/slots.py). When the next run asks for a container of that shape, its state folders are
bind-mounted onto the slot's and propagate into the running spare: the run gets its container without a
start of its own. A run of another shape gets a container started for it, as without this backend, and
the spare is removed.

The spare carries the same labels and owner as any container of the process, so the sweeps that remove a
dead process's containers and slots remove it too; `close` (the worker's exit) removes it otherwise.
Where slots cannot be made (not root, no btrfs) every container is started when asked, as before.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from pathlib import Path

from replayer.floor.errors import ReplayError
from replayer.sandboxes.base import SandboxSpec
from replayer.sandboxes.docker import DockerBackend, DockerSandbox, connect
from replayer.sandboxes.slots import Slot

logger = logging.getLogger(__name__)


class SlottedSandbox(DockerSandbox):
    """A container started over a slot's folders: its `stop` also unmounts and removes the slot (before the
    run removes the state those mounts show)."""

    slot: Slot | None = None

    def stop(self) -> None:
        try:
            super().stop()
        finally:
            if self.slot is not None:
                self.slot.release()


def _shape(spec: SandboxSpec) -> tuple[object, ...] | None:
    """What two specs must share for one's container to serve the other: all but the run id and the host
    folders of the writable mounts (the run's state, mounted into the spare later). None: a spec no spare
    serves (a mount that is not a folder, a spec that propagates mounts of its own)."""
    if spec.propagated or any(not ro and not src.is_dir() for src, ro in spec.binds.values()):
        return None
    binds = tuple(sorted((t, str(src) if ro else None, ro) for t, (src, ro) in spec.binds.items()))
    return (spec.image, spec.workdir, spec.limits, tuple(sorted(spec.labels.items())), spec.command, binds)


class _Spare:
    def __init__(self, shape: tuple[object, ...], box: SlottedSandbox, folders: dict[str, Path]):
        self.shape = shape
        self.box = box
        self.folders = folders
        """Writable mount target -> the slot folder bound there."""


class AheadBackend:
    """A Backend (sandboxes/base.py) keeping one container ahead of need: see the module's docstring."""

    def __init__(self) -> None:
        self._spare: _Spare | None = None
        self._starting: threading.Thread | None = None
        self._closed = False
        self.served = 0
        """Runs that got the spare."""
        self.started = 0
        """Runs whose container was started when asked (no spare, or one of another shape)."""

    def start(self, spec: SandboxSpec) -> DockerSandbox:
        spare = self._take()
        shape = _shape(spec)
        box: DockerSandbox | None = None
        if spare is not None and spare.shape == shape and spare.box.image_id == _image_id(spec.image):
            box = _attached(spare, spec)
        elif spare is not None:
            _discard(spare)
        if box is None:
            self.started += 1
            box = DockerBackend().start(spec)
        else:
            self.served += 1
        if shape is not None:
            self._start_ahead(spec, shape)
        return box

    def spare(self) -> SlottedSandbox | None:
        """The container held ahead (waiting for one being started), kept for the next run."""
        self._spare = self._take()
        return self._spare.box if self._spare is not None else None

    def close(self) -> None:
        """Remove the spare (waiting for one being started); no spare is started after this."""
        self._closed = True
        spare = self._take()
        if spare is not None:
            _discard(spare)

    def _take(self) -> _Spare | None:
        if self._starting is not None:
            self._starting.join()
            self._starting = None
        spare, self._spare = self._spare, None
        return spare

    def _start_ahead(self, spec: SandboxSpec, shape: tuple[object, ...]) -> None:
        if self._closed:
            return

        def run() -> None:
            try:
                self._spare = _prestart(spec, shape)
            except Exception as exc:  # the next run starts its own container (and names what is wrong)
                logger.debug("no container ahead: %s: %s", type(exc).__name__, exc)

        self._starting = threading.Thread(target=run, name="container-ahead", daemon=True)
        self._starting.start()


def _image_id(image: str) -> str | None:
    try:
        return str(connect().images.get(image).id)
    except Exception:  # the run's own start names what is wrong with its image
        return None


def _prestart(spec: SandboxSpec, shape: tuple[object, ...]) -> _Spare | None:
    """A container shaped like `spec`, its writable mounts from the empty folders of a new slot."""
    slot = Slot.create()
    if slot is None:
        return None
    try:
        folders: dict[str, Path] = {}
        binds: dict[str, tuple[Path, bool]] = {}
        for n, (target, (src, ro)) in enumerate(spec.binds.items()):
            if ro:
                binds[target] = (src, ro)
                continue
            folders[target] = slot.path / str(n)
            folders[target].mkdir()
            binds[target] = (folders[target], False)
        run_id = f"{spec.run_id[:6]}{uuid.uuid4().hex[:6]}"
        ahead = spec.model_copy(update={"binds": binds, "run_id": run_id, "propagated": frozenset(folders)})
        box = SlottedSandbox.start_from(ahead)
    except BaseException:
        slot.release()
        raise
    assert isinstance(box, SlottedSandbox)
    box.slot = slot
    return _Spare(shape, box, folders)


def _attached(spare: _Spare, spec: SandboxSpec) -> SlottedSandbox | None:
    """The spare with `spec`'s writable folders mounted onto its slot's; None (the spare removed) when a
    mount failed."""
    assert spare.box.slot is not None
    try:
        for target, (src, ro) in spec.binds.items():
            if not ro:
                spare.box.slot.bind(src, spare.folders[target])
    except OSError as exc:
        logger.debug("the container ahead could not take the run's state: %s", exc)
        _discard(spare)
        return None
    return spare.box


def _discard(spare: _Spare) -> None:
    with contextlib.suppress(
        ReplayError
    ):  # not removed: still this process's, for `stop_live` and the sweeps
        spare.box.stop()
