"""Files that hold several sessions (an OpenHands evaluation output, one instance per line): `inspect`
lists them, `--session` selects one in every verb, a batch entry without one stands for all. No Docker."""

from __future__ import annotations

from pathlib import Path

import orjson

from replayer.verbs.batch_jobs import expand
from replayer.verbs.batch_manifest import read_manifest
from tests.conftest import ROOT, replayer

OUTPUT = ROOT / "tests" / "fixtures" / "field" / "openhands" / "multi-swe-bench-example-output.jsonl"
INSTANCES = ["ponylang__ponyc-4595", "ponylang__ponyc-4593", "ponylang__ponyc-4588"]


def test_inspect_lists_the_sessions_a_file_holds() -> None:
    report = orjson.loads(replayer("inspect", str(OUTPUT), "--json", check=True).stdout)
    assert [s["id"] for s in report["sessions"]] == INSTANCES and report["steps"] == []
    assert {s["agent"] for s in report["sessions"]} == {"openhands_v0"}
    assert all(
        s["steps"] > 0 and s["first_prompt"].startswith("<uploaded_files>") for s in report["sessions"]
    )
    text = replayer("inspect", str(OUTPUT), check=True).stdout
    assert "holds 3 sessions" in text and all(i in text for i in INSTANCES)


def test_session_selects_one_instance_in_inspect_and_prepare(tmp_path: Path) -> None:
    one = orjson.loads(
        replayer("inspect", str(OUTPUT), "--session", INSTANCES[1], "--json", check=True).stdout
    )
    assert one["session_id"] == INSTANCES[1] and one["cwd"] == "/workspace/ponylang__ponyc__0.1"
    assert one["agent_version"] == "0.35.0" and one["sessions"] == []
    record = orjson.loads(OUTPUT.read_bytes().splitlines()[1])["instance"]  # the SWE-bench style instance
    assert one["start"] == {
        "repository_url": f"https://github.com/{record['repo']}",
        "commit": record["base_commit"],
        "branch": None,
    }
    others = [
        orjson.loads(replayer("inspect", str(OUTPUT), "--session", i, "--json", check=True).stdout)
        for i in (INSTANCES[0], INSTANCES[2])
    ]
    assert len({len(r["steps"]) for r in [one, *others]}) == 3, "each instance is its own history"
    out = tmp_path / "out"
    replayer("prepare", str(OUTPUT), "-n", "3", "--session", INSTANCES[1], "-o", str(out), check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["session_id"] == INSTANCES[1] and result["request"]["session"] == INSTANCES[1]
    assert result["request"]["trajectory"] == str(OUTPUT)
    rebuilt = orjson.loads(b"".join((out / f).read_bytes() for f in result["native_files"]))
    assert rebuilt["instance_id"] == INSTANCES[1], "the rebuilt output keeps the instance around its history"


def test_a_file_of_several_sessions_needs_session_and_names_what_it_holds(tmp_path: Path) -> None:
    proc = replayer("prepare", str(OUTPUT), "-n", "1", "-o", str(tmp_path / "a"))
    assert proc.returncode == 3 and "holds 3 sessions: pass --session ID" in proc.stderr
    proc = replayer("prepare", str(OUTPUT), "-n", "1", "--session", "nope", "-o", str(tmp_path / "b"))
    assert proc.returncode == 3 and "holds no session 'nope'" in proc.stderr and INSTANCES[0] in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    single = ROOT / "tests" / "fixtures" / "claude_code" / "single" / "session.jsonl"
    proc = replayer("inspect", str(single), "--session", "other")
    assert proc.returncode == 3 and "holds one session" in proc.stderr


def test_a_damaged_line_is_refused_with_its_number(tmp_path: Path) -> None:
    lines = OUTPUT.read_bytes().splitlines()
    damaged = tmp_path / "output.jsonl"
    damaged.write_bytes(b"\n".join([lines[0], lines[1][:100], lines[2]]) + b"\n")
    proc = replayer("inspect", str(damaged))
    assert proc.returncode == 3 and "line 2 is not JSON" in proc.stderr


def test_a_manifest_entry_without_a_session_stands_for_every_session(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.jsonl"
    lines = [
        {"trajectory": str(OUTPUT), "boundaries": [1]},
        {"trajectory": str(OUTPUT), "boundaries": [2], "session": INSTANCES[2]},
    ]
    manifest.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))
    jobs = expand(read_manifest(manifest, trusted=True), {})
    assert sorted((j.entry.session, j.boundary) for j in jobs) == sorted(
        [(i, 1) for i in INSTANCES] + [(INSTANCES[2], 2)]
    )
    assert len({j.key for j in jobs}) == 4
