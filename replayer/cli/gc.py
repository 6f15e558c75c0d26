"""`replayer gc`."""

from __future__ import annotations

from replayer import api
from replayer.cli.app import command, console
from replayer.cli.options import JsonOpt, emit_json


@command()
def gc(json: JsonOpt = False) -> None:
    """Remove every container and snapshot image the replayer left behind.

    Examples:
      replayer gc
      replayer gc --json
    """
    report = api.gc()
    removed, images, states = report.removed, report.removed_images, report.removed_states
    if json:
        emit_json(report.model_dump())
    else:
        console.print(f"removed {len(removed)} container(s)" + (": " + ", ".join(removed) if removed else ""))
        console.print(
            f"removed {len(images)} snapshot image(s)" + (": " + ", ".join(images) if images else "")
        )
        console.print(f"removed {len(states)} state folder(s) of dead runs")
        if report.killed_forwarders:
            pids = ", ".join(map(str, report.killed_forwarders))
            console.print(
                f"killed {len(report.killed_forwarders)} port forwarder(s) of removed containers: {pids}"
            )
        if report.unmounted_slot_root:
            console.print("unmounted the fork slots' root (no slot left)")
