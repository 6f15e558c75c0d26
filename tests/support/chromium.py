"""The HTML reports as headless Chromium leaves them after their scripts ran: the DOM, read back, and a
screenshot (kept beside the page, to look at when a test fails)."""

from __future__ import annotations

import html.parser
import subprocess
from pathlib import Path

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


class Dom(html.parser.HTMLParser):
    """The rendered DOM as (tag, attributes, text) elements, text including the descendants'."""

    def __init__(self) -> None:
        super().__init__()
        self.open: list[tuple[str, dict[str, str], list[str]]] = []
        self.elements: list[tuple[str, dict[str, str], str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in ("meta", "br", "link", "img", "input"):
            return
        self.open.append((tag, {k: v or "" for k, v in attrs}, []))

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            name, attrs, text = self.open.pop()
            joined = "".join(text)
            self.elements.append((name, attrs, joined))
            if self.open:
                self.open[-1][2].append(joined)
            if name == tag:
                break

    def handle_data(self, data: str) -> None:
        if self.open:
            self.open[-1][2].append(data)

    def find(self, tag: str | None = None, **attrs: str) -> list[tuple[str, dict[str, str], str]]:
        def match(a: dict[str, str]) -> bool:
            return all(
                (v in a.get(k.rstrip("_"), "").split()) if k == "class_" else a.get(k.replace("_", "-")) == v
                for k, v in attrs.items()
            )

        return [e for e in self.elements if (tag is None or e[0] == tag) and match(e[1])]


def _chromium(page: Path, profile: Path, *args: str, fragment: str = "") -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(
        [
            "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
            "--virtual-time-budget=5000", *args, page.as_uri() + (f"#{fragment}" if fragment else ""),
        ],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc


def render(page: Path, tmp_path: Path, fragment: str = "") -> tuple[Dom, str]:
    """The page's DOM after its scripts ran (opened at `#fragment` if given), and Chromium's log; a
    screenshot lands at PAGE.png (PAGE.FRAGMENT.png)."""
    proc = _chromium(page, tmp_path / "chromium", "--dump-dom", fragment=fragment)
    shot = page.with_name(page.name + (f".{fragment.replace('/', '_')}" if fragment else "") + ".png")
    _chromium(
        page, tmp_path / "chromium", "--window-size=1400,2400", f"--screenshot={shot}", fragment=fragment
    )
    assert shot.read_bytes().startswith(PNG_MAGIC)
    dom = Dom()
    dom.feed(proc.stdout)
    dom.close()
    return dom, proc.stderr
