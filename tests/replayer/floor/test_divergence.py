"""How a fresh observation compares with the historical one (pure logic, no Docker)."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from replayer import adapters
from replayer.floor.divergence import COMMON, divergence_of, model_text, workspace_hint
from replayer.floor.results import Divergence
from replayer.floor.trajectory import Observation, ToolCall

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


FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
SHELL_CALLS = {
    "claude_code": ("claude_code/parallel/session.jsonl", "Bash"),
    "codex": ("codex/exec/rollout.jsonl", "exec_command"),
    "codex 0.58.0": ("codex/versions/0.58.0/probe/rollout.jsonl", "shell"),
    "mini_swe_agent": ("mini_swe_agent/textbased/trajectory.traj.json", "bash"),
    "mini_swe_agent tool calls": ("mini_swe_agent/toolcall/trajectory.traj.json", "bash"),
    "opencode": ("opencode/tools/opencode.db", "bash"),
    "pi": ("pi/tools/session.jsonl", "bash"),
    "gemini_cli": ("gemini_cli/tools/session.jsonl", "run_shell_command"),
    "gemini_cli shell": ("gemini_cli/shell/session.jsonl", "run_shell_command"),
    "openhands": ("openhands/v1/conversation", "terminal"),
    "openhands_v0": ("openhands/v0/trajectory.json", "execute_bash"),
}
"""A recorded session of each agent and its shell tool, whose observations carry the agent's wrapper."""


def _recorded(name: str) -> tuple[adapters.Adapter, list[ToolCall]]:
    rel, tool = SHELL_CALLS[name]
    adapter = adapters.detect(FIXTURES / rel)
    trajectory = adapter.parse(FIXTURES / rel)
    calls = [c for s in trajectory.steps for c in s.calls if c.tool == tool and c.historical is not None]
    return adapter, [c for c in calls if isinstance(c.historical.content, str)]  # type: ignore[union-attr]


def _output(adapter: adapters.Adapter, call: ToolCall) -> str:
    text = model_text(call.historical)  # type: ignore[arg-type]
    own = adapter.own_text(call.tool, text)
    return text if own is None else own


def _empty_workspace_reruns(adapter: adapters.Adapter, calls: list[ToolCall]) -> list[Divergence]:
    """Each recorded call rerun as if it printed another call's output (as in a wrong workspace): the
    agent's own wrapper, recorded, around a different output."""
    out = []
    for call, other in zip(calls, calls[1:] + calls[:1], strict=True):
        mine, theirs = _output(adapter, call), _output(adapter, other)
        if mine[:1] == theirs[:1]:
            continue  # both empty, or the same first character: not a difference from the start
        own = partial(adapter.own_text, call.tool)
        fresh = other.historical
        out.append(divergence_of(1, call, "rerun", fresh, adapter.normalizers(call.tool), own))  # type: ignore[arg-type]
    return out


def test_every_agents_differences_are_located_in_the_output_not_in_its_wrapper() -> None:
    for name in SHELL_CALLS.keys() - {"gemini_cli shell"}:  # that one holds a single shell call
        adapter, calls = _recorded(name)
        reruns = _empty_workspace_reruns(adapter, calls)
        assert len(reruns) >= 2, name
        for d in reruns:
            assert d.status == "different" and not d.in_wrapper, name
            assert (d.first_difference, d.line, d.column) == (0, 1, 1), (name, d)
        assert workspace_hint(reruns) is not None, name


def test_an_output_is_found_inside_each_wrapper() -> None:
    """What the command printed, out of each agent's recorded shell observation."""
    for name, expected in (
        ("codex", "alpha\nbeta\n"),
        ("codex 0.58.0", "alpha\nbeta\n"),
        ("mini_swe_agent", "def add(a, b):\n    return a - b\n"),
        ("mini_swe_agent tool calls", "README.md\ncalc.py\n"),
        ("gemini_cli shell", "/usr/bin/python3: No module named pytest"),
        ("openhands", "README.md  calc.py"),
        ("openhands_v0", "README.md  calc.py"),
    ):
        adapter, calls = _recorded(name)
        text = model_text(calls[0].historical)  # type: ignore[arg-type]
        assert adapter.own_text(calls[0].tool, text) == expected, name
        assert text != expected, name  # the wrapper is there
    claude, calls = _recorded("claude_code")
    assert claude.own_text("Bash", model_text(calls[0].historical)) is None  # type: ignore[arg-type]


def test_a_difference_in_the_wrapper_alone_is_said_so_and_is_no_workspace_sign() -> None:
    adapter, calls = _recorded("codex")
    recorded = model_text(calls[0].historical)  # type: ignore[arg-type]
    other_exit = recorded.replace("Process exited with code 0", "Process exited with code 1")
    assert other_exit != recorded
    own = partial(adapter.own_text, "exec_command")
    d = divergence_of(
        1, calls[0], "rerun", Observation(content=other_exit), adapter.normalizers("exec_command"), own
    )
    assert d.status == "different" and d.in_wrapper and d.line == 3
    assert workspace_hint([d, d, d]) is None


def test_a_codex_exec_rerun_that_printed_nothing_is_said_to_be_the_clis_cut() -> None:
    """Codex reports a command's output cut when it comes more than 50 ms after the exit (a busy machine: seen
    in CI): the result's hint names those calls; outputs that differ otherwise, or another agent's empty
    reruns, are no such sign."""
    adapter, calls = _recorded("codex")
    own = partial(adapter.own_text, "exec_command")
    recorded = [model_text(c.historical) for c in calls]  # type: ignore[arg-type]
    late = ["".join(text.partition("\nOutput:\n")[:2]) for text in recorded]  # the header, no output
    reruns = [
        divergence_of(1, c, "rerun", Observation(content=text), adapter.normalizers("exec_command"), own)
        for c, text in zip(calls, late, strict=True)
    ]
    printed = [d.call_id for d, text in zip(reruns, recorded, strict=True) if own(text)]
    assert len(printed) >= 3
    hint = adapter.rerun_hint(reruns)
    assert hint is not None and hint.startswith(f"{len(printed)} exec rerun(s) printed nothing"), hint
    assert printed[0] in hint and "50 ms" in hint
    assert adapter.rerun_hint(_empty_workspace_reruns(adapter, calls)) is None
    mini, mini_calls = _recorded("mini_swe_agent")
    empty = [
        divergence_of(
            1, c, "rerun", Observation(content=""), mini.normalizers("bash"), partial(mini.own_text, "bash")
        )
        for c in mini_calls
    ]
    assert any(d.status == "different" for d in empty) and mini.rerun_hint(empty) is None


def test_a_later_difference_has_its_line_and_column_in_the_output() -> None:
    adapter, calls = _recorded("mini_swe_agent")
    recorded = model_text(calls[0].historical)  # type: ignore[arg-type]
    fresh = recorded.replace("return a - b", "return a + b")
    own = partial(adapter.own_text, "bash")
    d = divergence_of(1, calls[0], "rerun", Observation(content=fresh), adapter.normalizers("bash"), own)
    assert (d.line, d.column, d.first_difference) == (2, 14, 28)
    assert (
        d.historical_excerpt
        and d.historical_excerpt.startswith("def add")
        and "<output>" not in d.historical_excerpt
    )


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
