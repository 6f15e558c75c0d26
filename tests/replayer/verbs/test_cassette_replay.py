"""Cassettes with the real pinned CLIs: a continuation recorded once against the scripted upstream replays
offline (no upstream, no key) and is verified by the oracle (`verified_replay`: Claude Code's here, in a
compare; every other agent's is its standalone continuation in test_fanout, which records a cassette); on Claude Code, a tampered
cassette and an extra file are refused before anything starts, a changed request and another agent version
are reported at their first differing path; `compare` and `batch` take cassettes."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from replayer.adapters import detect
from replayer.bridges.scripted import Script, TextBlock, ToolUseBlock, Turn
from replayer.floor.pins import pinned_version
from tests.conftest import CLAUDE, replayer
from tests.support.continuing import KEY, changed_workspace, files_containing

pytestmark = pytest.mark.agent

MAKE = "ls; echo made > made.txt; touch -d @$(( $(date +%s) - $(od -An -N2 -tu2 /dev/urandom) )) t; ls -l t; rm t"
"""Every continuation lists the workspace and writes a file: requests and the workspace both carry it. A long
listing of a file made some minutes ago (another minute each run) stands for `ls -la` run a minute later:
the replay matches its recording after normalizing listing times, and says so."""
OFFLINE = {k: v for k, v in os.environ.items() if k not in ("ANTHROPIC_API_KEY", "OPENAI_API_KEY")}


@dataclass
class Recording:
    trajectory: Path
    after_step: int
    workspace: Path
    tape: Path
    result: dict
    extra: tuple[str, ...] = ()

    def replay(self, out: Path, *args: str, workspace: Path | None = None, tape: Path | None = None):
        argv = [
            "run",
            str(self.trajectory),
            "-n",
            str(self.after_step),
            "-w",
            str(workspace or self.workspace),
        ]
        argv += [
            "-o",
            str(out),
            *self.extra,
            "--continue",
            "--cassette",
            str(tape or self.tape),
            "--json",
            *args,
        ]
        proc = replayer(*argv, env=OFFLINE)
        result = orjson.loads((out / "result.json").read_bytes()) if (out / "result.json").exists() else {}
        return proc, result


def _call(name: str, **arguments: str) -> ToolUseBlock:
    return ToolUseBlock(id=f"call_cas_{name}", name=name, input=arguments)


def _record(
    root: Path,
    trajectory: Path,
    after_step: int,
    workspace: Path,
    turns: list[Turn],
    key_env: str,
    *extra: str,
) -> Recording:
    ws = root / "ws"
    shutil.copytree(workspace, ws)
    tape, out = root / "tape", root / "recorded"
    with detect(trajectory).scripted_upstream(
        Script(turns=turns, model="fake-model"), expected_key=KEY
    ) as upstream:
        argv = [
            "run",
            str(trajectory),
            "-n",
            str(after_step),
            "-w",
            str(ws),
            "-o",
            str(out),
            *extra,
            "--json",
        ]
        argv += ["--continue", "--upstream", upstream.url, "--record-cassette", str(tape)]
        proc = replayer(*argv, env={key_env: KEY})
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    return Recording(trajectory, after_step, ws, tape, result, extra)


def _claude(root: Path) -> Recording:
    turns = [
        Turn(blocks=[TextBlock(text="Checking."), _call("Bash", command=MAKE)]),
        Turn(blocks=[TextBlock(text="Finished.")]),
    ]
    ws = changed_workspace("single", root / "changed")
    return _record(root, CLAUDE.fixture("single") / "session.jsonl", 1, ws, turns, "ANTHROPIC_API_KEY")


@pytest.fixture(scope="module")
def claude(tmp_path_factory: pytest.TempPathFactory) -> Recording:
    return _claude(tmp_path_factory.mktemp("claude"))


def _verified(recording: Recording, out: Path, listing: bool = True) -> dict:
    """`recording` replayed offline into `out` by `run`, verified (`verified_replay`)."""
    proc, result = recording.replay(out)
    assert proc.returncode == 0, proc.stderr
    verified_replay(recording, result["continuation"], out / "state" / "workspace", listing)
    return result


def verified_replay(recording: Recording, replayed: dict, workspace: Path, listing: bool) -> None:
    """The continuation `replayed` of `recording`'s cassette offline (a run's, or a compare run's), its
    workspace after it in `workspace`: verified (after normalizing the listing times of MAKE's output, with
    `listing`; else it wrote made.txt alone, and nothing but ids and times may be normalized), with the
    agent's own work in the outcome and no key in the cassette."""
    recorded = recording.result["continuation"]
    assert recorded["cassette"]["verdict"] == "recorded" and recorded["agent_status"] == "completed"
    assert replayed["cassette"]["verdict"] == "verified", replayed["cassette"]
    notes = replayed["cassette"]["notes"]
    assert all(n.startswith("requests matched their recording after normalizing ") for n in notes), notes
    assert len(notes) == 1 if listing else len(notes) <= 1, notes
    assert ("listing times" in "".join(notes)) is listing, notes
    assert (replayed["gate"], replayed["agent_status"]) == ("accepted", "completed")
    assert replayed["steps_used"] == recorded["steps_used"] and replayed["counters"]["refused_requests"] == 0
    outcome = orjson.loads((recording.tape / "outcome.json").read_bytes())
    assert list(outcome["workspace_changes"]) == ["made.txt"], "the agent's own work is in the outcome"
    assert outcome["session"], "so is its continued native session"
    assert (workspace / "made.txt").read_text() == "made\n"
    assert files_containing(recording.tape, KEY.encode()) == []


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda t: (t / "exchanges" / "0002-main.answer.body").write_bytes(b"data: {}\n\n"), "SHA-256"),
        (lambda t: (t / "extra.json").write_text("{}"), "unknown file 'extra.json'"),
    ],
    ids=["tampered", "extra-file"],
)
def test_a_changed_cassette_is_refused_before_anything_starts(
    claude: Recording, tmp_path: Path, change, says
) -> None:
    tape = Path(shutil.copytree(claude.tape, tmp_path / "tape"))
    change(tape)
    proc, _ = claude.replay(tmp_path / "out", tape=tape)
    assert proc.returncode == 14 and "replayer: cassette:" in proc.stderr and says in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


def test_another_agent_version_is_reported_where_its_requests_diverge(
    claude: Recording, tmp_path: Path
) -> None:
    other = "2.1.196"  # an installed bundle that is not the pinned version
    assert other != pinned_version("claude_code")
    proc, result = claude.replay(tmp_path / "out", "--agent-version", other)
    assert proc.returncode == 15, proc.stderr
    check = result["continuation"]["cassette"]
    assert (check["verdict"], check["where"]) == ("differs", "request") and check["difference"]["path"]
    assert (
        f"recorded with claude_code {pinned_version('claude_code')}, replayed with {other}" in check["notes"]
    )


ADD_FILE = """--- /dev/null
+++ b/added.txt
@@ -0,0 +1 @@
+added
"""


def test_compare_variants_against_one_cassette(claude: Recording, tmp_path: Path) -> None:
    (tmp_path / "add.diff").write_text(ADD_FILE)
    out = tmp_path / "cmp"
    proc = replayer(
        "compare", str(claude.trajectory), "-n", str(claude.after_step), "-w", str(claude.workspace),
        "-o", str(out), "--cassette", str(claude.tape), "--variant", "base=",
        "--variant", f"patched=patch={tmp_path / 'add.diff'}", "--json", env=OFFLINE,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    runs = {r["variant"]: r for r in orjson.loads((out / "compare.json").read_bytes())["runs"]}
    # Claude Code's cassette replays offline, verified (every other agent's: test_fanout)
    verified_replay(
        claude, runs["base"]["continuation"], out / runs["base"]["dir"] / "state" / "workspace", True
    )
    patched = runs["patched"]["continuation"]["cassette"]
    # the environment changed the `ls` the agent ran: its second request differs, in the tool result
    assert (patched["verdict"], patched["where"]) == ("differs", "request")
    assert (
        "main request 2 of 2" in patched["difference"]["reason"]
        and "added.txt" in patched["difference"]["actual"]
    )


def test_batch_replays_every_cassette_of_a_folder(claude: Recording, tmp_path: Path) -> None:
    """A job that does not reproduce its cassette is failed (its directory complete), and stays failed when
    the batch resumes; --retry-failed runs it again over its directory."""
    folder = tmp_path / "cassettes"
    shutil.copytree(claude.tape, folder / "single-1")
    changed = Path(shutil.copytree(claude.workspace, tmp_path / "ws"))
    (changed / "a.txt").write_text("another environment\n")
    lines = [
        {
            "trajectory": str(claude.trajectory),
            "boundaries": [claude.after_step],
            "mode": "continue",
            "workspace": str(workspace),
            "continuation": {"cassette": str(folder)},
        }
        for workspace in (claude.workspace, changed)
    ]
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))

    def batch(*extra: str) -> dict:
        args = (
            "batch",
            "--trust-manifest",
            str(manifest),
            "-o",
            str(tmp_path / "out"),
            "-j",
            "1",
            "--json",
            *extra,
        )
        proc = replayer(*args, env=OFFLINE)
        assert proc.returncode == 0, proc.stderr
        return orjson.loads(proc.stdout)

    first = batch()
    assert (first["done"], first["failed"], first["skipped"]) == (1, 1, 0), first
    jobs = [p for p in (tmp_path / "out" / "jobs").iterdir() if (p / "result.json").is_file()]
    results = [orjson.loads((p / "result.json").read_bytes()) for p in jobs]
    verdicts = sorted(r["continuation"]["cassette"]["verdict"] for r in results)
    assert len(jobs) == 2 and verdicts == ["differs", "verified"], verdicts
    assert {r["request"]["continuation"]["cassette"] for r in results} == {str(folder / "single-1")}
    # a changed request (the workspace's a.txt, in the agent's first request) stops the replay at its first
    # differing path; the prefix gate passed: the cassette refused
    differs = next(
        r["continuation"] for r in results if r["continuation"]["cassette"]["verdict"] == "differs"
    )
    assert differs["cassette"]["where"] == "request" and differs["gate"] == "accepted"
    assert "another environment" in differs["cassette"]["difference"]["actual"]
    summary = orjson.loads((tmp_path / "out" / "batch.json").read_bytes())
    failed = [o for o in summary["outcomes"] if o["status"] == "failed"]
    assert [o["error_kind"] for o in failed] == ["not_verified"], failed
    assert "main request 1 of 2 differs from the cassette's at messages[" in failed[0]["error"]
    resumed = batch()
    assert (resumed["done"], resumed["failed"], resumed["skipped"]) == (0, 1, 1), resumed
    retried = batch("--retry-failed")
    assert (retried["done"], retried["failed"], retried["skipped"]) == (0, 1, 1), retried
