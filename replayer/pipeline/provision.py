"""A job's sandbox image made present on the node that runs it. On a cluster every node has its own container
engine (and its own bundle cache, which the engine fills on demand: `replayer.installer.ensure`), so a batch
keyed by the image id its driver saw runs a job only where the node's image has that id.

DIR/images/<id>.tar  an image archive (`docker save`) a node without the image loads; else it pulls the tag
"""

from __future__ import annotations

from pathlib import Path

from replayer.floor.bundles import cache_lock
from replayer.floor.errors import SandboxError, excerpt
from replayer.sandboxes.base import Engine

IMAGES = "images"


def archive_path(out: Path, image_id: str) -> Path:
    return out / IMAGES / f"{image_id.removeprefix('sha256:')}.tar"


def ensure_image(tag: str, image_id: str, out: Path) -> None:
    """`tag` in this node's engine with id `image_id`: loaded from DIR/images/ or pulled when absent (one
    job of a node at a time), refused when the node holds another image under that tag."""
    from replayer.sandboxes import engines

    engine = engines.chosen()
    have = _image_id(engine, tag)
    if have is None:
        with cache_lock("image", image_id.removeprefix("sha256:")):
            have = _image_id(engine, tag)
            if have is None:
                _provide(engine, tag, image_id, out)
                have = _image_id(engine, tag)
    if have != image_id:
        raise SandboxError(
            f"this node's image {tag} is {_short(have)}, the batch keyed its jobs with {_short(image_id)}; "
            f"give every node the same image (docker save/load) or run the batch where it was keyed"
        )


def _image_id(engine: Engine, tag: str) -> str | None:
    try:
        found = engine.image_attrs(tag)
    except SandboxError as exc:
        raise SandboxError(f"cannot look up image {tag}: {excerpt(str(exc), 160)}") from None
    return None if found is None else str(found["Id"])


def _provide(engine: Engine, tag: str, image_id: str, out: Path) -> None:
    archive = archive_path(out, image_id)
    try:
        engine.provide_image(tag, archive if archive.is_file() else None)
    except (SandboxError, OSError) as exc:
        where = f"load {archive}" if archive.is_file() else f"pull {tag} (and there is no {archive})"
        raise SandboxError(
            f"image {tag} is not on this node and it could not {where}: {excerpt(str(exc), 160)}"
        ) from None


def _short(image_id: str | None) -> str:
    return "missing" if image_id is None else image_id.removeprefix("sha256:")[:12]
