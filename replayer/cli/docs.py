"""Where the docs the help names (`docs/NAME.md`) are on this machine: the copy a wheel installs under
`<prefix>/share/sandbox-replayer/docs`, else the source checkout's `docs/`."""

from __future__ import annotations

import site
import sys
from pathlib import Path

INSTALLED = Path("share") / "sandbox-replayer" / "docs"


def docs_dir() -> Path | None:
    """The folder holding cli.md and the other docs; None when neither copy is here."""
    checkout = Path(__file__).resolve().parents[2]
    candidates = [Path(sys.prefix) / INSTALLED, Path(site.getuserbase()) / INSTALLED]
    if (checkout / "pyproject.toml").is_file():
        candidates.append(checkout / "docs")
    return next((c for c in candidates if (c / "cli.md").is_file()), None)


def where() -> str:
    """One line for the help: where `docs/NAME.md` is."""
    found = docs_dir()
    if found is None:
        return "Docs (docs/NAME.md in this help): not installed here; they ship in the package's wheel."
    return f"Docs (docs/NAME.md in this help): {found}/NAME.md."
