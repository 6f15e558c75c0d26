"""Pure pieces of the Claude Code tool semantics, checked against the CLI's rules."""

from __future__ import annotations

import pytest

from adapters.claude_code import bash, files, render


@pytest.mark.parametrize(
    ("command", "code", "expected"),
    [
        ("grep x a.txt", 1, (False, "No matches found")),
        ("grep x a.txt", 2, (True, None)),
        ("cat a && grep x a.txt", 1, (False, "No matches found")),
        ("grep x a.txt && cat a", 1, (True, None)),
        ("git diff --stat", 1, (False, "Files differ")),
        ("git -C d grep foo", 1, (False, "No matches found")),
        ("test -f x", 1, (False, "Condition is false")),
        ("ls", 0, (False, None)),
        ("exit 3", 3, (True, None)),
        ("echo 'a | grep' ; false", 1, (True, None)),
    ],
)
def test_return_code_interpretation(command: str, code: int, expected: tuple[bool, str | None]) -> None:
    assert bash.return_code_interpretation(command, code) == expected


def test_split_respects_quotes() -> None:
    assert bash.split_commands("echo 'a && b' && ls | wc -l; x") == ["echo 'a && b'", "ls", "wc -l", "x"]


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("ls", "'ls' < /dev/null"),
        ("it's", "'it'\"'\"'s' < /dev/null"),
        ("cat <<EOF\nx\nEOF", "'cat <<EOF\nx\nEOF'"),
        ("wc -l < a.txt", "'wc -l < a.txt'"),
        ("echo $((1 << 2))", "'echo $((1 << 2))' < /dev/null"),
    ],
)
def test_quote_for_eval(command: str, expected: str) -> None:
    assert bash.quote_for_eval(command) == expected


def test_no_output_expected() -> None:
    assert bash.no_output_expected("mkdir -p x && touch x/y")
    assert not bash.no_output_expected("mkdir x && ls")


def test_thrown_error_is_middle_truncated_like_the_cli() -> None:
    long = "x" * 6000 + "y" * 6000
    content = render.thrown_error(long).content
    assert content.startswith("x" * 5000 + "\n\n... [2000 characters truncated] ...\n\n")
    assert content.endswith("y" * 5000)


def test_sizes_and_durations() -> None:
    assert render.human_size(2000) == "2KB"
    assert render.human_size(262144) == "256KB"
    assert render.human_size(1000) == "1000 bytes"
    assert render.human_size(46387) == "45.3KB"
    assert render.duration(120000) == "2m 0s"
    assert render.duration(30000) == "30s"


def test_curly_quotes_match_and_are_kept() -> None:
    text = "say “hello” now"
    actual = files.find_actual(text, 'say "hello"')
    assert actual == "say “hello”"
    assert files.adapt_quotes(actual, 'say "bye"') == "say “bye”"


def test_empty_replacement_removes_the_line() -> None:
    assert files.apply_edit("a\nb\nc\n", "b", "", False) == "a\nc\n"


def test_structured_patch_matches_the_recorded_hunk() -> None:
    old = "def greet():\n    print('hello')\n\ngreet()\n"
    new = old.replace("hello", "goodbye")
    assert files.structured_patch(old, new) == [
        {
            "oldStart": 1,
            "oldLines": 4,
            "newStart": 1,
            "newLines": 4,
            "lines": [" def greet():", "-    print('hello')", "+    print('goodbye')", " ", " greet()"],
        }
    ]
