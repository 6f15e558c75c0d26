"""How a fresh observation compares with the historical one (pure logic, no Docker)."""

from __future__ import annotations

from replayer.divergence import divergence_of, workspace_hint
from replayer.models import Divergence, Observation, ToolCall

LISTING = "/w/a.py\n/w/sub/b.py\n/w/c.py"
REORDERED = "/w/c.py\n/w/a.py\n/w/sub/b.py"


def _call(tool: str, historical: str) -> ToolCall:
    return ToolCall(id="c1", tool=tool, input={}, historical=Observation(content=historical))


def test_a_listing_in_another_walk_order_is_normalized_equal_for_glob_and_grep() -> None:
    for tool in ("glob", "grep", "Glob"):
        d = divergence_of(1, _call(tool, LISTING), "rerun", Observation(content=REORDERED))
        assert d.status == "normalized_equal" and d.normalizers == ["walk_order"]


def test_reordered_lines_of_any_other_tool_are_different() -> None:
    d = divergence_of(1, _call("bash", LISTING), "rerun", Observation(content=REORDERED))
    assert d.status == "different" and d.first_difference == 3


def test_a_listing_with_another_file_is_different_even_for_glob() -> None:
    d = divergence_of(1, _call("glob", LISTING), "rerun", Observation(content=LISTING + "\n/w/new.py"))
    assert d.status == "different"


def _d(step: int, status: str, first: int | None, kind: str = "rerun") -> Divergence:
    return Divergence(
        step=step, call_id=f"c{step}", tool="Bash", kind=kind, status=status, first_difference=first
    )  # type: ignore[arg-type]


def test_reruns_that_mostly_differ_from_the_first_character_point_at_the_workspace() -> None:
    assert workspace_hint([_d(1, "different", 0), _d(2, "different", 0), _d(3, "exact", None)]) is not None
    assert workspace_hint([_d(1, "different", 0), _d(2, "exact", None)]) is None  # one is not most
    assert workspace_hint([_d(1, "different", 0), _d(2, "different", 7), _d(3, "exact", None)]) is None
    assert workspace_hint([_d(1, "different", 0), _d(2, "different", 0, kind="pure")]) is None
