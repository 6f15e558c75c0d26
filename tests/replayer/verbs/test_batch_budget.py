"""A batch's token budgets across starts and jobs (issue 42): what a killed batch reserved in a line's own
ledger is given back at the next start (what was charged stays), and a continue job not yet started once
the batch's budget is used up is `cut` without running its replay."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from replayer.bridges.budget import Ledger
from replayer.floor import settings
from tests.conftest import CLAUDE, replayer
from tests.replayer.verbs.test_mock_everywhere import _billing_script

FIXTURE = CLAUDE.fixture("single")
SESSION = FIXTURE / "session.jsonl"
NO_KEY = {"ANTHROPIC_API_KEY": "", "REPLAYER_UPSTREAM": ""}

_HOLDER = """
import os, sys
from pathlib import Path
from replayer.bridges.budget import Ledger
from replayer.floor import settings
ledger = Ledger(100_000, Path(sys.argv[1]))
ledger.reserve(5_000)
ledger.settle(5_000, 5_000)  # billed
ledger.reserve(40_000)  # in flight when the batch is killed
print("held", flush=True)
sys.stdin.read()
"""


def test_a_killed_batchs_reservations_are_given_back_at_the_next_start(tmp_path: Path) -> None:
    """A process of a killed batch charged 5,000 tokens to line 1's ledger and held 40,000 for a request in
    flight when it was SIGKILLed; a live process holds 7,000. The next `replayer batch` on the folder gives
    back the dead holder's 40,000 and keeps the 5,000 charged and the live holder's 7,000."""
    out = tmp_path / "out"
    path = out / "ledgers" / "line-1.json"
    path.parent.mkdir(parents=True)
    child = subprocess.Popen(
        [sys.executable, "-I", "-c", _HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None and child.stdout.readline() == b"held\n"
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
    mine = Ledger(100_000, path)
    assert mine.reserve(7_000)[0] is None
    assert mine.used() == (5_000, 47_000)

    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(orjson.dumps({"trajectory": str(SESSION), "boundaries": [1]}) + b"\n")
    proc = replayer("batch", str(manifest), "-o", str(out), "--trust-manifest", "--json", env=NO_KEY)
    assert proc.returncode == 0, proc.stderr
    assert "released 40000 token(s)" in proc.stderr
    saved = orjson.loads(path.read_bytes())
    assert (saved["charged"], saved["reserved"]) == (5_000, 7_000)
    assert list(saved["holders"].values()) == [7_000]
    mine.settle(7_000, 0)
    assert mine.used() == (5_000, 0)


@pytest.mark.parametrize(
    "content",
    [b'{"charged": -1000000000, "reserved": 0}', b'{"charged": 1e12, "reserved": "x", "holders": []}'],
)
def test_a_foreign_ledger_cannot_loosen_a_lines_budget(tmp_path: Path, content: bytes) -> None:
    """A batch folder from elsewhere holds a ledger whose counts are negative or not whole numbers: they count
    as 0, never as room beyond the line's limit."""
    path = tmp_path / "line-1.json"
    path.write_bytes(content)
    ledger = Ledger(50_000, path)
    assert ledger.reserve(50_001)[0] is ledger
    assert ledger.reserve(50_000)[0] is None


@pytest.mark.parametrize("kind", ["link", "fifo", "text"])
def test_a_ledger_that_is_not_one_is_a_one_line_error(tmp_path: Path, kind: str) -> None:
    from replayer.floor.errors import BadInput

    path = tmp_path / "line-1.json"
    if kind == "link":
        (tmp_path / "elsewhere.json").write_bytes(b"{}")
        path.symlink_to(tmp_path / "elsewhere.json")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.write_bytes(b"not json")
    with pytest.raises(BadInput, match="not a token ledger"):
        Ledger(50_000, path).release_dead()


@pytest.mark.docker
@pytest.mark.agent
def test_a_continue_job_not_started_once_the_batchs_budget_is_used_up_is_cut_without_running(
    tmp_path: Path,
) -> None:
    """Two continue units, one after the other (`-j 1`), under `batch --max-tokens 120000`: the first's
    first answer bills 100,000 tokens and its next request is held (no worst case fits the 20,000 left). The
    second is `cut` before it starts: no replay, no result directory, the reason in batch.json; a resumed
    batch without the budget runs it."""
    script = _billing_script(tmp_path)
    line = {
        "trajectory": str(SESSION),
        "boundaries": [1],
        "mode": "continue",
        "workspace": str(FIXTURE / "workspace"),
        "continuation": {"upstream": f"mock:{script}"},
    }
    other = {**line, "allow_degraded": True}  # its own replay: a unit of its own, after the first
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(orjson.dumps(line) + b"\n" + orjson.dumps(other) + b"\n")
    out = tmp_path / "out"
    args = ["batch", str(manifest), "-o", str(out), "--trust-manifest", "-j", "1", "--json"]
    proc = replayer(*args, "--max-tokens", "120000", env=NO_KEY)
    assert proc.returncode == 0, proc.stderr
    summary = orjson.loads((out / "batch.json").read_bytes())
    assert (summary["jobs"], summary["done"], summary["cut"]) == (2, 0, 2), summary
    first, second = summary["outcomes"]
    assert "does not fit the batch's 120000" in first["error"]
    assert second["status"] == "cut" and second["error_kind"] == "max_tokens"
    assert "used up before the job started" in second["error"]
    assert (out / "jobs" / first["key"] / "result.json").is_file()
    assert not (out / "jobs" / second["key"]).exists()
    assert not (out / "outcomes" / f"{second['key']}.json").exists()
    # the next start (no batch budget) runs it; the first stays cut
    again = replayer(*args, env=NO_KEY)
    assert again.returncode == 0, again.stderr
    assert (orjson.loads(again.stdout)["done"], orjson.loads(again.stdout)["cut"]) == (1, 1)


def _limit_of_a_batch(tmp_path: Path, **kwargs: object) -> int | None:
    """The batch budget a prepare-only `replayer batch` (API) starts with: its ledger's limit (None: none)."""
    import replayer as api

    manifest = tmp_path / "manifest.jsonl"
    manifest.write_bytes(orjson.dumps({"trajectory": str(SESSION), "boundaries": [1]}) + b"\n")
    out = tmp_path / "out"
    api.batch(manifest, out, trust_manifest=True, **kwargs)  # type: ignore[arg-type]
    ledger = out / "token-ledger.json"
    return orjson.loads(ledger.read_bytes())["limit"] if ledger.exists() else None


def test_the_batch_budget_comes_from_the_flag_the_environment_and_the_users_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flag > REPLAYER_MAX_TOKENS > the user's `max_tokens` setting > none, as every setting is read."""
    user = tmp_path / "config" / "replayer" / "config.toml"
    user.parent.mkdir(parents=True)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("REPLAYER_MAX_TOKENS", raising=False)
    monkeypatch.chdir(tmp_path)
    assert _limit_of_a_batch(tmp_path) is None
    user.write_text("max_tokens = 77777\n")
    settings.forget()  # read once per process
    assert _limit_of_a_batch(tmp_path) == 77_777
    monkeypatch.setenv("REPLAYER_MAX_TOKENS", "55555")
    assert _limit_of_a_batch(tmp_path) == 55_555
    assert _limit_of_a_batch(tmp_path, max_tokens=33_333) == 33_333


@pytest.mark.parametrize(
    ("project", "user", "refused"),
    [
        ("max_tokens = 1000", "", None),  # lower than the default: a folder not trusted may set it
        ("max_tokens = 90000", "max_tokens = 80000", "max_tokens 90000 is more than the 80000 in force"),
        ("max_tokens = 2000001", "", "max_tokens 2000001 is more than the 2000000 in force"),
    ],
)
def test_a_project_file_not_trusted_may_only_lower_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, project: str, user: str, refused: str | None
) -> None:
    from replayer.floor.errors import SettingsError

    (tmp_path / "config" / "replayer").mkdir(parents=True)
    (tmp_path / "config" / "replayer" / "config.toml").write_text(user + "\n")
    (tmp_path / "replayer.toml").write_text(project + "\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("REPLAYER_MAX_TOKENS", raising=False)
    monkeypatch.chdir(tmp_path)
    settings.forget()
    if refused is None:
        assert _limit_of_a_batch(tmp_path) == 1000
    else:
        with pytest.raises(SettingsError, match=refused):
            _limit_of_a_batch(tmp_path)


@pytest.mark.parametrize("value", ["0", "-5", "1e6", "nan", "many"])
def test_a_bad_budget_variable_is_one_line_exit_13(value: str) -> None:
    proc = replayer("batch", "nowhere.jsonl", "-o", "/nonexistent/out", env={"REPLAYER_MAX_TOKENS": value})
    assert proc.returncode == 13 and proc.stderr.count("\n") == 1, proc.stderr
    assert "REPLAYER_*): max_tokens:" in proc.stderr


def test_run_and_compare_take_the_budget_setting_too() -> None:
    """The `max_tokens` setting is the option's: a continuation of `run`, and every variant of `compare`
    together (docs/bridge.md), take it as they take the flag."""
    from replayer.floor.merge import merge
    from replayer.floor.options import CompareOptions
    from replayer.floor.settings import Settings

    merged = merge({}, Settings(max_tokens=12_345), CompareOptions)
    assert merged.continuation.request().max_tokens == 12_345
    assert "max_tokens" in merged.continuation.request().model_fields_set
    assert merge({"max_tokens": 7}, Settings(max_tokens=12_345), CompareOptions).continuation.max_tokens == 7


@pytest.mark.parametrize("swapped", ["folder", "file"])
def test_a_name_an_untrusted_manifest_gives_swapped_for_a_link_after_the_check_is_not_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swapped: str
) -> None:
    """A real race made deterministic: the batch checks the downloaded manifest's names (inside its folder,
    no link), and the hook it calls before any job runs (`on_event`, the runs stage) swaps, on the real file
    system, the trajectory's folder (or the file itself) for a link to a host file. The job reads what was
    checked (a folder swapped later is not on its way) or refuses the link in one line; it never reads the
    host file."""
    import hashlib
    import shutil

    import replayer as api
    from replayer.floor.events import Stage

    folder = tmp_path / "downloaded"
    (folder / "t").mkdir(parents=True)
    shutil.copyfile(SESSION, folder / "t" / "session.jsonl")
    host = tmp_path / "host"  # stands for a host file: another real session, so that reading it would pass
    host.mkdir()
    shutil.copyfile(CLAUDE.fixture("write_edit") / "session.jsonl", host / "session.jsonl")
    manifest = folder / "manifest.jsonl"
    manifest.write_bytes(orjson.dumps({"trajectory": "t/session.jsonl", "boundaries": [1]}) + b"\n")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    settings.forget()

    def swap(event: object) -> None:
        if not (isinstance(event, Stage) and event.name == "runs"):
            return
        if swapped == "folder":
            os.rename(folder / "t", folder / "t.checked")
            (folder / "t").symlink_to(host)
        else:
            os.rename(folder / "t" / "session.jsonl", folder / "t" / "checked.jsonl")
            (folder / "t" / "session.jsonl").symlink_to(host / "session.jsonl")

    out = tmp_path / "out"
    counts = api.batch(manifest, out, on_event=swap, workers=1)
    assert (folder / "t").is_symlink() or (folder / "t" / "session.jsonl").is_symlink()  # the hook ran
    summary = orjson.loads((out / "batch.json").read_bytes())
    [outcome] = summary["outcomes"]
    assert outcome["trajectory"] == str(folder / "t" / "session.jsonl")  # the name the manifest gave
    results = list((out / "jobs").glob("*/result.json"))
    read = {orjson.loads(r.read_bytes())["source_sha256"] for r in results}
    assert hashlib.sha256((host / "session.jsonl").read_bytes()).hexdigest() not in read
    if swapped == "folder":
        assert counts.done == 1
        assert read == {hashlib.sha256(SESSION.read_bytes()).hexdigest()}
        [result] = results  # it says the name the manifest gave, not the held one it read
        assert orjson.loads(result.read_bytes())["request"]["trajectory"] == str(
            folder / "t" / "session.jsonl"
        )
    else:
        assert (counts.done, results) == (0, [])
        assert "Too many levels of symbolic links" in outcome["error"], outcome
