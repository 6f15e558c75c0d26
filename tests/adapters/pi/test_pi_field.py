"""Pi's files of the field corpus (tests/support/field.py): a pi-mono session rerun at its version and
continued through the gate (against the scripted upstream and bare `mock`), an extension's
tools kept historical, and continued sessions read back as they were sent."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from replayer.adapters import by_name
from tests.support import field
from tests.support.field import FIELD

test_a_field_trajectory_runs_at_its_own_version, test_a_field_continuation_ends_when_the_bare_mock_ends_it = (
    field.own_version_tests("pi")
)


@pytest.mark.agent
@pytest.mark.docker
@pytest.mark.parametrize("name", field.degraded_files("pi"))
def test_allow_degraded_keeps_the_historical_observation_of_a_tool_no_rerun_has(
    name: str, tmp_path: Path
) -> None:
    out, body = field.check_allow_degraded_keeps_the_historical_observation(name, tmp_path)
    _pi_reads_back_what_it_sent(out, body["messages"])


def _pi_reads_back_what_it_sent(out: Path, received: list[dict[str, Any]]) -> None:
    """A Pi result read back (continued_prefix, export, the report) is item for item what the upstream
    received (after Pi's system message: the prefix), then the agent's answer."""
    from replayer.pipeline import timeline
    from replayer.verbs import export, view

    adapter = by_name("pi")
    expected = orjson.loads((out / "expected_prefix.json").read_bytes())
    assert received[0]["role"] == "system" and received[1:] == expected
    continued = adapter.continued_prefix(out)
    assert continued is not None and continued[: len(received) - 1] == received[1:]
    dialect = adapter.dialect()
    answer = {"role": "assistant", "content": "Finished."}
    assert export.chat_record(out)["messages"] == [*dialect.to_chat(received[1:]), answer]
    assert view.load(out).continuation == timeline.entries([answer], view.TEXT_CHARS)


BRUNCH = "pi/brunch-extension-tools-propose-graph-commit.jsonl"


@pytest.mark.parametrize(("name", "boundary"), [(BRUNCH, 1), ("pi/pi-mono-before-compaction.jsonl", 217)])
def test_a_continued_pi_session_reads_back_as_sent_to_the_continuations_model(
    name: str, boundary: int, tmp_path: Path
) -> None:
    """Both record another api's thinking (anthropic-messages, signed), which Pi sends to the bridge's
    openai-completions model as text: read back (export, the report), the continued session is in that
    form too, not with each thinking under its signature. Here the continued session holds the prefix
    alone, in a directory without result.json (a compare's run directory: its own model decides)."""
    import shutil

    adapter = by_name("pi")
    rebuild = adapter.rebuild(adapter.parse(FIELD / name), boundary, {}, tmp_path / "rebuilt")
    wire_keys = {"role", "content", "tool_calls", "tool_call_id"}
    assert all(m.keys() <= wire_keys for m in rebuild.expected_prefix), "no thinking under its signature"
    (tmp_path / "result" / "continued").mkdir(parents=True)
    shutil.copyfile(rebuild.native_files[0], tmp_path / "result" / "continued" / "session.jsonl")
    assert adapter.continued_prefix(tmp_path / "result") == rebuild.expected_prefix
