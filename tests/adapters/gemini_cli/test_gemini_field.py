"""Gemini CLI's files of the field corpus (tests/support/field.py): rerun at the version inferred or stated
and continued through the gate (against the scripted upstream and bare `mock`), its cli_help
subagent kept historical, the pin resuming an older version's session, and the note asking for --cwd."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.conftest import replayer
from tests.support import field
from tests.support.field import AIM_034, FIELD

test_a_field_trajectory_runs_at_its_own_version, test_a_field_continuation_ends_when_the_bare_mock_ends_it = (
    field.own_version_tests("gemini_cli")
)


test_allow_degraded_keeps_the_historical_observation_of_a_tool_no_rerun_has = field.degraded_test(
    "gemini_cli"
)


@pytest.mark.agent
@pytest.mark.docker
def test_the_pinned_gemini_cli_continues_a_published_session_of_an_older_version(tmp_path: Path) -> None:
    """The pin (0.61, stated: 0.35.0 is inferred) resumes the 0.34-era document rebuilt as its log: in the folder its registry names
    (`django-control-pro`), not deleted by its cleanup for being months old, and without the recorded
    thoughts, which it does not send for a Gemini 3 model."""
    name = "gemini_cli/aim-benchmark-control-pro-run4.json"
    proc, out, sent = field.continue_field(name, 1, "gemini_cli", ("--agent-version", "0.61.0"), tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["version"]["version"] == "0.61.0" and result["continuation"]["gate"] == "accepted"
    assert result["native_files"][0].startswith("native/home/.gemini/tmp/django-control-pro/chats/")
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    recorded = orjson.loads((FIELD / name).read_bytes())["messages"]
    assert recorded[1]["thoughts"] and not any(p.get("thought") for c in expected for p in c["parts"])
    assert len(sent) == 1 and not any(p.get("thought") for c in sent[0].body["contents"] for p in c["parts"])


def test_the_note_asking_for_the_cwd_goes_once_it_is_given(tmp_path: Path) -> None:
    """The 0.34.0 session's folder hashes to none of its paths: the note asks for --cwd until it is given."""
    path = str(FIELD / AIM_034)
    asked = orjson.loads(replayer("inspect", path, "--json", check=True).stdout)
    assert any(n.endswith("give --cwd") for n in asked["parse_notes"]) and asked["cwd"] is None
    given = orjson.loads(replayer("inspect", path, "--json", "--cwd", "/home/kingb/aim", check=True).stdout)
    assert given["cwd_source"] == "stated" and not any("--cwd" in n for n in given["parse_notes"])
    out = tmp_path / "out"
    replayer("prepare", path, "-n", "1", "--cwd", "/home/kingb/aim", "-o", str(out), check=True)
    assert not any("--cwd" in n for n in orjson.loads((out / "result.json").read_bytes())["parse_notes"])


NOTICED = FIELD / "gemini_cli" / "entire-0.23.0-update-notice-2026-01-15.json"


def test_the_version_its_own_update_notice_names_runs_and_no_other_text_is_taken(tmp_path: Path) -> None:
    """A document that records no version but keeps the CLI's update notice (`Gemini CLI update available!
    0.23.0 -> 0.24.0`): 0.23.0 ran, not npm's 0.24.0 of its day; a notice whose version is no version, or
    another message's text, is not read (the date then infers it)."""
    report = orjson.loads(replayer("inspect", str(NOTICED), "--json", check=True).stdout)
    assert (report["agent_version"], report["version"]["version"], report["version"]["source"]) == (
        "0.23.0",
        "0.23.0",
        "inferred",
    )
    assert any("update notice" in n and "0.23.0 \u2192 0.24.0" in n for n in report["parse_notes"])
    document = orjson.loads(NOTICED.read_bytes())
    notice = next(m for m in document["messages"] if m["type"] == "info")
    for text in (
        "Gemini CLI update available! ../../x \u2192 0.24.0",
        "Gemini CLI update available! 0.23.0-.. \u2192 0.24.0",
        "Update available! 0.23.0 \u2192 0.24.0",
    ):
        notice["content"] = text
        forged = tmp_path / "forged.json"
        forged.write_bytes(orjson.dumps(document))
        other = orjson.loads(replayer("inspect", str(forged), "--json", check=True).stdout)
        assert other["agent_version"] is None and other["version"]["version"] != "0.23.0"
        assert not any("update notice" in n for n in other["parse_notes"])
