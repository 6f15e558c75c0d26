"""`replayer gc`: every container and snapshot image the replayer left behind, the state folders and fork
slots of dead runs, the slots' root once no slot is left, and the port forwarders removed containers left on
the host."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class GcReport(BaseModel):
    """`replayer gc --json`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    removed: list[str]
    """The containers removed."""
    removed_images: list[str]
    """The snapshot images removed."""
    removed_states: list[str]
    """The state folders of dead runs removed."""
    unmounted_slot_root: bool
    killed_forwarders: list[int] = []
    """The pids of port forwarders a removed container left running on the host."""


def collect() -> GcReport:
    """Remove what `replayer gc` removes (the module's docstring), and say what."""
    from replayer.sandboxes import engines
    from replayer.sandboxes.quota import sweep_states
    from replayer.sandboxes.slots import unmount_root

    engine = engines.chosen()
    removed, images = engine.gc()
    states = sweep_states()
    return GcReport(
        removed=removed,
        removed_images=images,
        removed_states=states,
        unmounted_slot_root=unmount_root(),
        killed_forwarders=engine.sweep_forwarders(),
    )
