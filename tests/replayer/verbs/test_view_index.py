"""`replayer view DIR` on a folder of results: DIR/index.html lists every run (batch jobs, their refusals,
a replay, verify verdicts), filterable, each linking to its report; read back from headless Chromium. The
folder is treated as untrusted: links are not followed, special files not opened."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import orjson
import pytest

from replayer.floor.verdicts import SHIPPED
from tests.conftest import CLAUDE, CODEX, PI, replayer
from tests.support.chromium import render

HOSTILE = "javascript:alert(1)"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A batch (a Codex replay from an empty workspace, Claude Code prefixes, a refused Pi job), a copy of
    one of its jobs in a folder with a hostile name, a verdict, and what a sandbox may leave: links out and
    round, a FIFO named result.json, a job copy whose reruns.json is not what a replay writes."""
    tmp = tmp_path_factory.mktemp("index")
    (tmp / "empty").mkdir()
    lines = [
        {"trajectory": str(CODEX.fixture("exec") / "rollout.jsonl"), "boundaries": [3], "mode": "replay",
         "workspace": str(tmp / "empty")},
        {"trajectory": str(PI.fixture("unknown_tool") / "session.jsonl"), "boundaries": [1], "mode": "replay",
         "workspace": str(PI.fixture("tools") / "workspace")},
        {"trajectory": str(CLAUDE.fixture("single") / "session.jsonl"), "boundaries": [1], "mode": "prepare"},
    ]  # fmt: skip
    manifest = tmp / "manifest.jsonl"
    manifest.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    root = tmp / "results"
    root.mkdir()
    replayer("batch", "--trust-manifest", str(manifest), "-o", str(root / "batch"), check=True)
    codex_job = next(
        d for d in (root / "batch" / "jobs").iterdir() if b'"codex"' in (d / "result.json").read_bytes()
    )
    shutil.copytree(codex_job, root / HOSTILE, symlinks=True)
    shutil.copytree(codex_job, root / "broken", symlinks=True)
    (root / "broken" / "reruns.json").write_text('[{"step": "one"}]')
    (root / "verdicts").mkdir()
    shutil.copyfile(SHIPPED / "claude_code@2.0.64.json", root / "verdicts" / "claude_code@2.0.64.json")
    outside = tmp / "outside"
    shutil.copytree(codex_job, outside, symlinks=True)
    (root / "out").symlink_to(outside)
    (root / "batch" / "jobs" / "round").symlink_to(root)
    (root / "fifo").mkdir()
    os.mkfifo(root / "fifo" / "result.json")
    return root


@pytest.mark.agent
def test_the_index_lists_every_run_filterable_each_with_its_report(results: Path, tmp_path: Path) -> None:
    proc = replayer("view", str(results), "--json")
    assert proc.returncode == 0, proc.stderr
    summary = orjson.loads(proc.stdout)
    page = Path(summary["index"])
    assert page == results.absolute() / "index.html"
    # the batch's three jobs, the two copies, the verdict, the FIFO (unreadable); nothing through the links
    assert summary["runs"] == 7 and summary["skipped"] == []
    text = page.read_text()
    assert "http://" not in text and "https://" not in text and ' src="' not in text and "url(" not in text
    dom, log = render(page, tmp_path)
    assert "Uncaught" not in log and dom.find("main", id="report", data_rendered="yes")
    rows = [e for e in dom.find("tr") if "row" in e[1].get("class", "").split()]
    by_status: dict[str, list[dict[str, str]]] = {}
    for _, attrs, _ in rows:
        by_status.setdefault(attrs["data-status"], []).append(attrs)
    assert sorted((s, len(v)) for s, v in by_status.items()) == [
        ("ok", 3),
        ("prepared", 1),
        ("refused", 1),
        ("unreadable", 1),
        ("verified", 1),
    ]
    cells = {c: [e[2] for e in dom.find("td", class_=c)] for c in ("agent", "divergences", "note", "path")}
    assert cells["divergences"].count("3 different, 1 normalized_equal") == 3
    assert any("unknown tool 'no_such_tool'" in n for n in cells["note"])
    broken = [e for e in rows if "broken" in e[2]]
    assert (
        len(broken) == 1
        and "no report: " in broken[0][2]
        and not (results / "broken" / "report.html").exists()
    )
    assert not any(p.startswith(("out", "batch/jobs/round")) for p in cells["path"])
    # each replay's report was written beside its result, and linked relatively (a hostile name stays a path)
    links = [e[1]["href"] for e in dom.find("a")]
    assert f"./{HOSTILE.replace(':', '%3A')}/report.html" in links
    assert all(href.startswith("./") for href in links)
    for href in links:
        if href.endswith("report.html"):
            target = results / href[2:].replace("%3A", ":")
            assert target.is_file() and target.read_text().startswith("<!DOCTYPE html>")
    assert not (results.parent / "outside" / "report.html").exists()
    # filtered from the address: the refused job alone, then a text filter
    dom, _ = render(page, tmp_path, "status=refused")
    shown = [e for e in dom.find("tr") if "row" in e[1].get("class", "").split() and "hidden" not in e[1]]
    assert [e[1]["data-status"] for e in shown] == ["refused"]
    assert dom.find("p", id="count")[0][2] == "1 of 7 run(s) shown"
    dom, _ = render(page, tmp_path, "agent=codex&q=alert")
    shown = [e for e in dom.find("tr") if "row" in e[1].get("class", "").split() and "hidden" not in e[1]]
    assert len(shown) == 1 and shown[0][1]["data-agent"] == "codex" and HOSTILE in shown[0][2]


def test_a_folder_without_results_is_refused_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "notes.json").write_text("{}")
    proc = replayer("view", str(tmp_path))
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.startswith("replayer: bad_input: ") and "holds no results" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "index.html").exists()
