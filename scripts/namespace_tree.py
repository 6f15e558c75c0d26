"""The one namespace as folders, for the type checker: DIR/replayer holds a link to each entry of replayer/
and to adapters/, bridges/ and sandboxes/ (setup.py maps them the same way for the import system, which
mypy does not ask). usage: python scripts/namespace_tree.py DIR"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAPPED = ("adapters", "bridges", "sandboxes")


def build(where: Path) -> Path:
    tree = where / "replayer"
    if tree.is_symlink() or tree.is_file():
        tree.unlink()
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    for entry in sorted((ROOT / "replayer").iterdir()):
        if entry.name != "__pycache__":
            (tree / entry.name).symlink_to(entry)
    for name in MAPPED:
        (tree / name).symlink_to(ROOT / name)
    return tree


if __name__ == "__main__":
    build(Path(sys.argv[1]))
