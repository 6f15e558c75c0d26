"""`replayer view DIR --serve`: the page `view` wrote and the files it links, served read-only on
127.0.0.1 until Ctrl-C (as inspect_ai's `inspect view` serves its logs).

A results folder is someone else's (a sandbox wrote much of it): only that folder is served, GET and HEAD
only; each path is resolved one name at a time from the folder's descriptor, no link followed and no
hidden name (a `.partial-*` folder) served, and the file read as floor/io.py reads a foreign file (a
regular file within its bound). The pages the replayer wrote (report.html, index.html) are served as
HTML; every other file as plain text, so nothing a sandbox wrote runs as a page.
"""

from __future__ import annotations

import contextlib
import logging
import urllib.parse
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from replayer.floor.errors import Interrupted, OutputError
from replayer.floor.foreign import Folder

HOST = "127.0.0.1"
PAGES = frozenset({"report.html", "index.html"})
"""The pages `view` writes: the only files served as HTML."""
# the page is drawn by its own inline script from the data it embeds, and fetches nothing
_HEADERS = {
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'",
    "Cache-Control": "no-store",
}

log = logging.getLogger(__name__)


def names_of(url_path: str) -> list[str] | None:
    """The names of a request's path inside the folder; None for one that is not a plain name there (`..`,
    a hidden name, a NUL)."""
    path = urllib.parse.unquote(urllib.parse.urlsplit(url_path).path)
    names = [n for n in path.split("/") if n not in ("", ".")]
    if any(n == ".." or n.startswith(".") or "\0" in n for n in names):
        return None
    return names


def read_below(root: Folder, names: list[str]) -> bytes | None:
    """The regular file at `names` below the folder `root` (the one reader: no link followed on the way or
    at the end, bounded); None when it is anything else, missing or over the bound."""
    return root.maybe_read("/".join(names))


def _handler(root: Folder, landing: str) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "replayer-view"

        def do_GET(self) -> None:
            self._serve(body=True)

        def do_HEAD(self) -> None:
            self._serve(body=False)

        def _serve(self, body: bool) -> None:
            names = names_of(self.path)
            if names == []:
                names = [landing]
            data = read_below(root, names) if names else None
            if names is None or data is None:
                self.send_error(HTTPStatus.NOT_FOUND, "not a file of this results folder")
                return
            page = names[-1] in PAGES
            self.send_response(HTTPStatus.OK)
            self.send_header(
                "Content-Type", "text/html; charset=utf-8" if page else "text/plain; charset=utf-8"
            )
            self.send_header("Content-Length", str(len(data)))
            for key, value in _HEADERS.items():
                self.send_header(key, value)
            self.end_headers()
            if body:
                self.wfile.write(data)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
            log.debug("view --serve: " + format, *args)

    return Handler


def serve(directory: Path, landing: str, port: int, started: Callable[[str], None]) -> None:
    """Serve `directory` (its `landing` page at /) on 127.0.0.1:`port` (0: a free one) until Ctrl-C;
    `started` is told the URL once it answers."""
    root = Folder.open(directory, given=True)
    try:
        try:
            server = ThreadingHTTPServer((HOST, port), _handler(root, landing))
        except OSError as exc:
            raise OutputError(
                f"cannot serve on {HOST}:{port}: {exc.strerror} (--port chooses another)"
            ) from None
        server.daemon_threads = True
        with server:
            started(f"http://{HOST}:{server.server_address[1]}/")
            with contextlib.suppress(Interrupted, KeyboardInterrupt):  # Ctrl-C is how serving ends
                server.serve_forever(poll_interval=0.2)
    finally:
        root.close()
