"""`replayer view DIR --serve`: the page `view` writes, served read-only on 127.0.0.1 from DIR alone (no
link followed, no hidden folder, no path out of it), other files as plain text, until Ctrl-C (exit 0)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from tests.conftest import CLAUDE, ROOT, replayer


def _get(url: str, method: str = "GET") -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"] or "", b""


def test_view_serves_its_page_and_nothing_outside_the_folder(tmp_path: Path) -> None:
    prep = tmp_path / "prep"
    replayer(
        "prepare", str(CLAUDE.fixture("single") / "session.jsonl"), "-n", "1", "-o", str(prep), check=True
    )
    (prep / "leak").symlink_to("/etc/hostname")
    (prep / ".partial-x").mkdir()
    (prep / ".partial-x" / "a.txt").write_text("hidden")
    (prep / "state.html").write_text("<script>alert(1)</script>")  # as a sandbox could write one
    proc = subprocess.Popen(
        [sys.executable, "-m", "replayer.cli", "view", str(prep), "--serve", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=os.environ.copy(),
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        found = re.search(r"at (http://127\.0\.0\.1:\d+/) \(Ctrl-C stops\)", line)
        assert found, line + (proc.stderr.read() if proc.poll() is not None and proc.stderr else "")
        url = found.group(1)
        status, kind, body = _get(url)
        assert (status, kind) == (200, "text/html; charset=utf-8")
        assert body == (prep / "report.html").read_bytes()
        assert _get(url + "report.html")[2] == body
        status, kind, body = _get(url + "result.json")
        assert (status, kind) == (200, "text/plain; charset=utf-8")
        assert body == (prep / "result.json").read_bytes()
        assert _get(url + "state.html")[1] == "text/plain; charset=utf-8", (
            "only the replayer's pages are HTML"
        )
        for refused in ("leak", ".partial-x/a.txt", "../prep/result.json", "%2e%2e/prep/result.json", "nope"):
            assert _get(url + refused)[0] == 404, refused
        assert _get(url, "POST")[0] == 501, "read-only"
    finally:
        proc.send_signal(signal.SIGINT)
        code = proc.wait(timeout=30)
    assert code == 0, proc.stderr.read() if proc.stderr else ""


def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    import socket

    prep = tmp_path / "prep"
    replayer(
        "prepare", str(CLAUDE.fixture("single") / "session.jsonl"), "-n", "1", "-o", str(prep), check=True
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = replayer("view", str(prep), "--serve", "--port", str(port))
    assert proc.returncode == 7 and f"cannot serve on 127.0.0.1:{port}" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
