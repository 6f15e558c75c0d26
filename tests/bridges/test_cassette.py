"""Cassettes without Docker: the normalizations a replayed request is compared under, the strict in-order
router, the writer's redaction and inventory, every refusal of a changed cassette, and the oracle."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from replayer.bridges.playback import Answer, Exchange, Player, Refusal, normalized
from replayer.floor.errors import CassetteError
from replayer.floor.trajectory import Trajectory
from replayer.pipeline import cassette, oracle
from tests.conftest import CLAUDE, replayer

KEY = "upstream-key-of-no-known-shape-7f3a"
UUIDS = ["3f1c2a9e-0b7d-4e55-9a11-2c3d4e5f6a7b", "b2a1c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"]
OTHERS = ["9d8c7b6a-5f4e-4d3c-8b2a-1f0e9d8c7b6a", "11223344-5566-4778-899a-abbccddeeff0"]


def _records(ids: list[str], parent_of_second: int) -> list[dict]:
    return [
        {"uuid": ids[0], "parentUuid": None, "timestamp": "2026-01-02T03:04:05.678Z", "text": "hi"},
        {
            "uuid": ids[1],
            "parentUuid": ids[parent_of_second],
            "timestamp": "2026-05-06T07:08:09Z",
            "text": "yo",
        },
    ]


def test_ids_are_alpha_renamed_with_their_relationships_kept() -> None:
    assert normalized(_records(UUIDS, 0)) == normalized(_records(OTHERS, 0))
    # the second record pointing at itself instead of the first is a different session
    assert normalized(_records(UUIDS, 0)) != normalized(_records(OTHERS, 1))


def test_tool_output_process_ids_are_ids() -> None:
    """Codex's exec chunk id and the process ids Gemini CLI's shell tool prints change every run."""
    once = normalized({"output": "ok\nProcess Group PGID: 4242\nBackground PIDs: 17, 18\nChunk ID: 10dbe5"})
    again = normalized({"output": "ok\nProcess Group PGID: 77\nBackground PIDs: 3, 4\nChunk ID: a0b1c2"})
    assert once == again and "4242" not in str(once)
    assert normalized({"output": "ok\nexit code: 1"}) != normalized({"output": "ok\nexit code: 2"})


def test_times_the_nonce_key_order_and_embedded_json_are_normalized() -> None:
    a = {
        "b": 1,
        "a": "replayer-nonce-0123456789abcdef01234567 on 2026-01-02",
        "meta": '{"id":"x1","created_at":5}',
    }
    b = {
        "meta": '{"created_at":6,"id":"x1"}',
        "a": "replayer-nonce-fedcba9876543210fedcba98 on 2027-03-04",
        "b": 1,
    }
    assert normalized(a) == normalized(b)
    assert normalized({"durationMs": 12, "duration": {"secs": 1, "nanos": 5}}) == normalized(
        {"durationMs": 99, "duration": {"secs": 2, "nanos": 7}}
    )
    # user content is compared as it is
    assert normalized({"text": "ls -la"}) != normalized({"text": "ls -l"})


def _exchange(seq: int, kind: str, body: dict, answer: bytes, path: str = "/v1/messages") -> Exchange:
    return Exchange(
        seq=seq,
        kind=kind,  # type: ignore[arg-type]
        method="POST",
        path=path,
        body=body,
        answer=Answer(status=200, headers={"content-type": "text/event-stream"}, body=answer),
    )


TAPE = [
    _exchange(1, "side", {"title": "for hi"}, b"data: title\n\n", "/v1/title"),
    _exchange(2, "main", {"messages": ["hi"]}, b"data: one\n\n"),
    _exchange(3, "side", {"count": 1}, b"{}", "/v1/count"),
    _exchange(4, "main", {"messages": ["hi", "one"]}, b"data: two\n\n"),
]


def test_main_requests_are_answered_in_order_and_side_calls_may_be_absent_or_reordered() -> None:
    player = Player(TAPE, nonce=None)
    assert player.answer("side", "POST", "/v1/count", {"count": 1}) == TAPE[2].answer
    assert player.answer("main", "POST", "/v1/messages", {"messages": ["hi"]}) == TAPE[1].answer
    assert player.answer("main", "POST", "/v1/messages", {"messages": ["hi", "one"]}) == TAPE[3].answer
    assert player.unused_main() == 0
    # a third main request is beyond the recording
    beyond = player.answer("main", "POST", "/v1/messages", {"messages": ["hi", "one", "two"]})
    assert isinstance(beyond, Refusal) and "beyond the cassette's 2" in beyond.mismatch.reason


def test_a_changed_request_is_refused_at_its_first_differing_path() -> None:
    player = Player(TAPE, nonce=None)
    found = player.answer("main", "POST", "/v1/messages", {"messages": ["hello"]})
    assert isinstance(found, Refusal)
    assert (found.mismatch.path, found.mismatch.expected, found.mismatch.actual) == (
        "messages[0]",
        "hi",
        "hello",
    )
    assert player.next_main == 0, "nothing was consumed"
    other = Player(TAPE, nonce=None).answer("side", "POST", "/v1/title", {"title": "for bye"})
    assert isinstance(other, Refusal) and other.mismatch.path == "title"
    line = Player(TAPE, nonce=None).answer("main", "POST", "/v1/chat/completions", {"messages": ["hi"]})
    assert isinstance(line, Refusal) and line.mismatch.path == "<request line>"


def test_a_listing_made_the_next_minute_matches_and_the_result_says_what_was_normalized() -> None:
    """Issue 43, item 6: a cassette recorded at 00:59 failed at 01:00, `ls -l` showing the minute."""
    listing = "-rw-r--r-- 1 root root 4 {} made.txt\n-rw-r--r-- 1 root root 9 Jan  2  2025 old.txt"

    def asked(stamp: str) -> dict:
        return {"messages": ["hi", {"tool_result": listing.format(stamp)}]}

    recorded = [_exchange(1, "main", asked("Dec  6 00:59"), b"data: one\n\n")]
    player = Player(recorded, nonce=None)
    assert player.answer("main", "POST", "/v1/messages", asked("Dec  6 01:00")) == recorded[0].answer
    assert player.normalized == {"listing times"}
    again = Player(recorded, nonce=None)
    assert again.answer("main", "POST", "/v1/messages", asked("Dec  6 00:59")) == recorded[0].answer
    assert again.normalized == set(), "a request equal byte for byte needed no normalization"
    # strict on everything else: another size in the same listing is a difference
    other = Player(recorded, nonce=None).answer(
        "main",
        "POST",
        "/v1/messages",
        {"messages": ["hi", {"tool_result": listing.format("Dec  6 00:59").replace(" 4 ", " 5 ")}]},
    )
    assert isinstance(other, Refusal) and other.mismatch.path == "messages[1].tool_result"


def _origin(after_step: int = 2) -> cassette.Origin:
    return cassette.Origin(
        agent="claude_code",
        agent_version="2.1.197",
        after_step=after_step,
        source_sha256="ab" * 32,
        session_id=UUIDS[0],
        prefix_sha256=cassette.prefix_sha256([{"role": "user", "content": "hi"}]),
        input_condition="replayed_boundary_only",
    )


OUTCOME = {"agent_status": "completed", "workspace_changes": {"made.txt": "00" * 32}, "session": {}}


@pytest.fixture
def tape(tmp_path: Path) -> Path:
    secret = _exchange(
        1,
        "main",
        {"messages": [f"my key is {KEY}", "and sk-ant-abcdefghijklmnopqrstu"]},
        f"data: {KEY}\n\n".encode(),
    )
    dest = tmp_path / "tape"
    assert cassette.write(dest, _origin(), [secret, *TAPE[1:]], OUTCOME, KEY) == 3
    return dest


def test_the_writer_redacts_and_inventories_every_file(tape: Path) -> None:
    files = sorted(p.relative_to(tape).as_posix() for p in tape.rglob("*") if p.is_file())
    manifest = orjson.loads((tape / "cassette.json").read_bytes())
    assert files == sorted([*(f["path"] for f in manifest["files"]), "cassette.json"])
    assert {f["role"] for f in manifest["files"]} == {"request", "answer", "outcome"}
    assert all(
        KEY.encode() not in (tape / f).read_bytes() and b"sk-ant-" not in (tape / f).read_bytes()
        for f in files
    )
    assert manifest["redactions"] == 3 and manifest["schema_version"] == cassette.SCHEMA
    loaded = cassette.load(tape)
    assert loaded.outcome == OUTCOME and [e.kind for e in loaded.exchanges] == [
        "main",
        "main",
        "side",
        "main",
    ]
    assert loaded.exchanges[0].body["messages"][0] == "my key is [REDACTED]"
    assert loaded.exchanges[1].answer.body == b"data: one\n\n"


def _copy(tape: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tape, tmp_path / "copy"))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (lambda t: (t / "exchanges" / "0002-main.answer.body").write_bytes(b"data: other\n\n"), "SHA-256"),
        (lambda t: (t / "notes.txt").write_text("x"), "unknown file 'notes.txt'"),
        (lambda t: (t / "exchanges" / "0002-main.request.json").unlink(), "is missing"),
        (lambda t: (t / "state.db").symlink_to("/etc/passwd"), "not a regular file"),
        (lambda t: (t / "workspace").mkdir(), "unknown directory"),
        (lambda t: (t / "cassette.json").write_text('{"schema_version": 99}'), "cassette schema 99"),
        (lambda t: (t / "cassette.json").unlink(), "not a cassette"),
    ],
    ids=["tampered", "extra-file", "missing-file", "link", "directory", "schema", "no-manifest"],
)
def test_a_changed_cassette_is_refused(tape: Path, tmp_path: Path, change, says: str) -> None:
    copy = _copy(tape, tmp_path)
    change(copy)
    with pytest.raises(CassetteError, match=says.replace("(", r"\(")):
        cassette.load(copy)


def test_another_boundary_or_trajectory_is_refused(tape: Path) -> None:
    loaded = cassette.load(tape)
    traj = Trajectory(
        agent="claude_code",
        agent_version="2.1.197",
        session_id=None,
        cwd="/w",
        source="s",
        source_sha256="ab" * 32,
        steps=[],
    )
    cassette.check_origin(loaded, tape, traj, 2)
    with pytest.raises(CassetteError, match="continues from step 2, not 3"):
        cassette.check_origin(loaded, tape, traj, 3)
    with pytest.raises(CassetteError, match="another trajectory"):
        cassette.check_origin(loaded, tape, traj.model_copy(update={"source_sha256": "cd" * 32}), 2)
    assert cassette.select(tape.parent, traj, 2) == tape
    with pytest.raises(CassetteError, match="no cassette in"):
        cassette.select(tape.parent, traj, 1)


def test_a_cassette_is_written_once(tape: Path) -> None:
    with pytest.raises(CassetteError, match="written once"):
        cassette.refuse_existing(tape)


def test_the_oracle_compares_workspace_changes_session_and_status(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / ".git").mkdir(parents=True)
    (ws / "a.txt").write_text("a")
    before = oracle.workspace_state(ws).entries
    (ws / "a.txt").write_text("b")
    (ws / "new.txt").write_text("n")
    (ws / ".git" / "index").write_text("times")
    changes = oracle.workspace_changes(before, oracle.workspace_state(ws).entries)
    assert sorted(changes) == ["a.txt", "new.txt"]
    recorded = oracle.outcome("completed", changes, {"s.jsonl": _records(UUIDS, 0)})
    assert (
        oracle.verify(recorded, oracle.outcome("completed", changes, {"s.jsonl": _records(OTHERS, 0)}))
        is None
    )
    found = oracle.verify(recorded, oracle.outcome("completed", {**changes, "a.txt": None}, {"s.jsonl": []}))
    assert found is not None and found.path == "workspace_changes.a.txt"
    found = oracle.verify(recorded, oracle.outcome("agent_error", changes, {"s.jsonl": _records(UUIDS, 0)}))
    assert found is not None and found.path == "agent_status"


def test_ids_in_file_names_are_the_ids_inside_and_content_digests_are_not_ids() -> None:
    def session(ids: list[str]) -> dict:
        return {f"events/event-{n:05d}-{i}.json": {"id": i, "n": n} for n, i in enumerate(ids)}

    recorded = oracle.outcome("completed", {"a.txt": "ab" * 32}, session(UUIDS))
    assert oracle.verify(recorded, oracle.outcome("completed", {"a.txt": "ab" * 32}, session(OTHERS))) is None
    found = oracle.verify(recorded, oracle.outcome("completed", {"a.txt": "cd" * 32}, session(UUIDS)))
    assert found is not None and found.path == "workspace_changes.a.txt"
    swapped = {f"events/event-00000-{OTHERS[0]}.json": {"id": OTHERS[1], "n": 0}}
    assert oracle.verify(recorded, oracle.outcome("completed", {"a.txt": "ab" * 32}, swapped)) is not None


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "--cassette", "tape"], "a cassette is the traffic of a continuation: continue the agent"),
        (
            ["run", "--continue", "--cassette", "tape", "--upstream", "http://127.0.0.1:9"],
            "a cassette answers offline: give no upstream",
        ),
        (
            ["compare", "--upstream", "http://127.0.0.1:9", "--variant", "a=record_cassette=tape"],
            "unknown key 'record_cassette'",
        ),
    ],
    ids=["without-continue", "with-upstream", "compare-records"],
)
def test_cassette_options_that_cannot_go_together_are_usage_errors(
    args: list[str], message: str, tmp_path: Path
) -> None:
    """Refused before anything starts (exit 2): a cassette without a continuation, a cassette with an
    upstream, and recording from compare (a compare replays cassettes; `run --record-cassette` records)."""
    single = CLAUDE.fixture("single")
    verb, *rest = args
    out = tmp_path / "o"
    proc = replayer(
        verb, str(single / "session.jsonl"), "-n", "1", "-w", str(single / "workspace"), "-o", str(out), *rest
    )
    assert proc.returncode == 2 and message in " ".join(proc.stderr.replace("│", " ").split()), proc.stderr
    assert "Traceback" not in proc.stderr and not out.exists()


def _wait_rss(args: list[str]) -> tuple[int, str, int]:
    """Exit code, stderr and peak resident memory (KiB) of the real CLI run with `args`."""
    import os
    import subprocess
    import sys
    import tempfile

    from tests.conftest import ROOT

    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "replayer.cli", *args], stdout=subprocess.DEVNULL, stderr=err, cwd=ROOT
        )
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return proc.returncode, err.read().decode(), usage.ru_maxrss


def _big_tape(tmp_path: Path, times: int) -> Path:
    """A cassette whose one 8 MB request file is named by `times` exchanges (the manifest edited, the
    inventory intact: an attacker's cassette passes every digest)."""
    big = _exchange(1, "main", {"messages": ["x" * 64] * (8 << 20 >> 6)}, b"data: one\n\n")
    dest = tmp_path / f"tape-{times}"
    cassette.write(dest, _origin(after_step=1), [big], OUTCOME, KEY)
    manifest = orjson.loads((dest / "cassette.json").read_bytes())
    one = manifest["exchanges"][0]
    manifest["exchanges"] = [{**one, "seq": n} for n in range(1, times + 1)]
    (dest / "cassette.json").write_bytes(orjson.dumps(manifest))
    return dest


def test_a_manifest_naming_one_big_file_many_times_is_refused_before_anything_is_read(tmp_path: Path) -> None:
    """Issue 32, attack 5: 200 manifest entries (184 bytes each) naming one 8 MB request file parsed it
    200 times (about 6 GB). Refused in one line, exit 14, before any file is read or anything starts: the
    refusing run's peak memory is not above a run that loads the one file once (refused at the origin)."""
    single = CLAUDE.fixture("single")
    once = _big_tape(tmp_path, 1)
    many = _big_tape(tmp_path, 200)
    with pytest.raises(CassetteError, match=r"named 200 times in cassette\.json"):
        cassette.load(many)
    results = {}
    for tape in (once, many):
        out = tmp_path / f"out-{tape.name}"
        code, err, rss = _wait_rss(
            ["run", str(single / "session.jsonl"), "-n", "1", "-w", str(single / "workspace")]
            + ["-o", str(out), "--continue", "--cassette", str(tape)]
        )
        assert code == 14 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
        assert not out.exists()
        results[tape.name] = (err, rss)
    assert "another trajectory" in results[once.name][0]  # loaded whole, then refused
    assert "named 200 times" in results[many.name][0]
    assert results[many.name][1] <= results[once.name][1]


def test_the_exchange_and_parse_bounds_hold_for_the_writer_and_the_loader(
    tape: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cassette, "MAX_EXCHANGES", 3)
    with pytest.raises(CassetteError, match=r"over the cassette limits: 4 exchanges \(at most 3\)"):
        cassette.load(tape)
    with pytest.raises(CassetteError, match="would be over its limits: 4 exchanges"):
        cassette.write(tmp_path / "again", _origin(), TAPE, OUTCOME, KEY)
    monkeypatch.setattr(cassette, "MAX_EXCHANGES", 10)
    monkeypatch.setattr(cassette, "MAX_PARSED_BYTES", 100)
    with pytest.raises(CassetteError, match="bytes of JSON to parse"):
        cassette.load(tape)
    assert not (tmp_path / "again").exists()


def test_gemini_skills_named_in_another_order_in_the_activate_skill_tool_match() -> None:
    """The same glob's order in `activate_skill`'s description (seen in the suite's run on this machine); a
    changed name still differs."""

    def asked(*names: str) -> dict:
        listed = ", ".join(f"'{n}'" for n in names)
        description = (
            f"Activates a specialized agent skill by name (Available: {listed}). Returns the skill's"
        )
        return {"tools": [{"functionDeclarations": [{"name": "activate_skill", "description": description}]}]}

    recorded = [_exchange(1, "main", asked("skill-creator", "antigravity-support"), b"data: one\n\n")]
    player = Player(recorded, nonce=None)
    found = player.answer("main", "POST", "/v1/messages", asked("antigravity-support", "skill-creator"))
    assert found == recorded[0].answer and player.normalized == {"skill order"}
    same = Player(recorded, nonce=None)
    assert same.answer("main", "POST", "/v1/messages", asked("skill-creator", "antigravity-support")) == found
    assert same.normalized == set()  # in the recorded order: nothing said
    other = Player(recorded, nonce=None)
    refused = other.answer("main", "POST", "/v1/messages", asked("antigravity-support", "skill-maker"))
    assert refused != found


def test_gemini_skills_found_in_another_order_match_and_a_long_difference_is_shown_where_it_is() -> None:
    """CI: Gemini CLI lists its skills in its file glob's order, which a loaded machine changes."""
    skill = "  <skill>\n    <name>{0}</name>\n    <location>/b/{0}/SKILL.md</location>\n  </skill>\n"
    intro = "You are an agent. " * 40

    def asked(*names: str) -> dict:
        listing = "".join(skill.format(n) for n in names)
        return {"systemInstruction": f"{intro}<available_skills>\n{listing}</available_skills>\n# Hooks"}

    recorded = [_exchange(1, "main", asked("skill-creator", "antigravity-support"), b"data: one\n\n")]
    player = Player(recorded, nonce=None)
    found = player.answer("main", "POST", "/v1/messages", asked("antigravity-support", "skill-creator"))
    assert found == recorded[0].answer and player.normalized == {"skill order"}
    same = Player(recorded, nonce=None)
    body = asked("skill-creator", "antigravity-support")
    body["when"] = "2026-12-06"
    recorded_with_time = [
        _exchange(1, "main", {**asked("skill-creator", "antigravity-support"), "when": "2025-01-01"}, b"")
    ]
    same = Player(recorded_with_time, nonce=None)
    assert same.answer("main", "POST", "/v1/messages", body) == recorded_with_time[0].answer
    assert same.normalized == {"times"}, "the same order is not said to be normalized"
    other = Player(recorded, nonce=None).answer(
        "main", "POST", "/v1/messages", asked("skill-creator", "other")
    )
    assert isinstance(other, Refusal) and other.mismatch.path == "systemInstruction"
    assert "antigravity" in other.mismatch.expected and "other" in other.mismatch.actual, other.mismatch
    assert other.mismatch.expected.startswith("…"), "shown from near the difference, not the text's start"
