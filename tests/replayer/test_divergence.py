"""How a fresh observation compares with the historical one (pure logic, no Docker)."""

from __future__ import annotations

import adapters
from replayer.divergence import COMMON, divergence_of, workspace_hint
from replayer.models import Divergence, Observation, ToolCall

LISTING = "/w/a.py\n/w/sub/b.py\n/w/c.py"
REORDERED = "/w/c.py\n/w/a.py\n/w/sub/b.py"


def _call(tool: str, historical: str) -> ToolCall:
    return ToolCall(id="c1", tool=tool, input={}, historical=Observation(content=historical))


def _of(agent: str, tool: str, fresh: str) -> Divergence:
    normalizers = adapters.by_name(agent).normalizers(tool)
    return divergence_of(1, _call(tool, LISTING), "rerun", Observation(content=fresh), normalizers)


def test_a_listing_in_another_walk_order_is_normalized_equal_for_the_tools_adapters_name() -> None:
    for agent, tool in (
        ("opencode", "glob"),
        ("opencode", "grep"),
        ("claude_code", "Glob"),
        ("gemini_cli", "glob"),
    ):
        d = _of(agent, tool, REORDERED)
        assert d.status == "normalized_equal" and d.normalizers == ["walk_order"], (agent, tool)


def test_reordered_lines_of_any_other_tool_are_different() -> None:
    for agent, tool in (("opencode", "bash"), ("claude_code", "glob"), ("pi", "grep")):
        d = _of(agent, tool, REORDERED)
        assert d.status == "different" and d.first_difference == 3, (agent, tool)


def test_a_listing_with_another_file_is_different_even_for_glob() -> None:
    assert _of("opencode", "glob", LISTING + "\n/w/new.py").status == "different"


def test_normalizers_apply_only_where_declared_and_in_one_order() -> None:
    call = _call("exec_command", "Chunk ID: 0a1b2c\nWall time: 0.1 seconds\nok")
    fresh = Observation(content="Chunk ID: 9f8e7d\nWall time: 0.3 seconds\nok")
    assert divergence_of(1, call, "rerun", fresh, COMMON).status == "different"
    codex = adapters.by_name("codex").normalizers("exec_command")
    d = divergence_of(1, call, "rerun", fresh, tuple(reversed(codex)))
    assert d.status == "normalized_equal" and d.normalizers == ["durations", "random_ids"]


def _d(step: int, status: str, first: int | None, kind: str = "rerun") -> Divergence:
    return Divergence(
        step=step, call_id=f"c{step}", tool="Bash", kind=kind, status=status, first_difference=first
    )  # type: ignore[arg-type]


def test_reruns_that_mostly_differ_from_the_first_character_point_at_the_workspace() -> None:
    assert workspace_hint([_d(1, "different", 0), _d(2, "different", 0), _d(3, "exact", None)]) is not None
    assert workspace_hint([_d(1, "different", 0), _d(2, "exact", None)]) is None  # one is not most
    assert workspace_hint([_d(1, "different", 0), _d(2, "different", 7), _d(3, "exact", None)]) is None
    assert workspace_hint([_d(1, "different", 0), _d(2, "different", 0, kind="pure")]) is None


def test_only_the_normalizers_the_difference_needs_are_named() -> None:
    """Trailing spaces on lines of both texts are changed by `trailing_whitespace` too, but the texts
    differ only by their order: the result names `walk_order` alone."""
    spaced = "Found 2 matches \n/w/a.py: x \n/w/b.py: y "
    swapped = "Found 2 matches \n/w/b.py: y \n/w/a.py: x "
    normalizers = adapters.by_name("opencode").normalizers("grep")
    d = divergence_of(1, _call("grep", spaced), "rerun", Observation(content=swapped), normalizers)
    assert d.status == "normalized_equal" and d.normalizers == ["walk_order"]
    both = "Found 2 matches\n/w/b.py: y\n/w/a.py: x"
    d = divergence_of(1, _call("grep", spaced), "rerun", Observation(content=both), normalizers)
    assert d.status == "normalized_equal" and d.normalizers == ["trailing_whitespace", "walk_order"]


def test_a_claude_code_task_id_is_random_and_nothing_else_around_it() -> None:
    """The driven CLI names a backgrounded or persisted Bash output with a new random id each run."""
    background = (
        "Command running in background with ID: {id}. Output is being written to: "
        "/tmp/claude-0/-testbed/s1/tasks/{id}.output. You will be notified when it completes."
    )
    persisted = (
        "<persisted-output>\nOutput too large (106.3KB). Full output saved to: /h/s1/tool-results/{id}.txt\n"
    )
    for text in (background, persisted):
        d = _of_text("claude_code", "Bash", text.format(id="bgta61601"), text.format(id="bz55g0o8y"))
        assert d.status == "normalized_equal" and d.normalizers == ["random_ids"], text
        moved = text.format(id="bz55g0o8y").replace("s1/", "s2/")
        assert _of_text("claude_code", "Bash", text.format(id="bgta61601"), moved).status == "different"
    same = "the id bgta61601 in an output"
    assert _of_text("claude_code", "Bash", same, same.replace("bgta61601", "bz55g0o8y")).status == "different"


def _of_text(agent: str, tool: str, historical: str, fresh: str) -> Divergence:
    normalizers = adapters.by_name(agent).normalizers(tool)
    return divergence_of(1, _call(tool, historical), "rerun", Observation(content=fresh), normalizers)
