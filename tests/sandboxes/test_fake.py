"""The in-process fake sandbox: scripted answers in order of the rules, every exec recorded, files
through the spec's binds like a container's, its own root for the rest."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from replayer.floor.errors import SandboxError
from replayer.sandboxes.base import ExecResult, SandboxSpec
from replayer.sandboxes.fake import Exec, FakeBackend, FakeSandbox, Rule, answer

_STARTED: list[FakeSandbox] = []


@pytest.fixture(autouse=True)
def _stopped() -> Iterator[None]:
    """Each test's fakes stopped after it (their own roots are temporary folders)."""
    yield
    while _STARTED:
        _STARTED.pop().stop()


def _box(tmp_path: Path, rules: list[Rule]) -> FakeSandbox:
    (tmp_path / "ws").mkdir()
    (tmp_path / "ro").mkdir()
    spec = SandboxSpec(
        image="img",
        binds={"/testbed": (tmp_path / "ws", False), "/opt/ro": (tmp_path / "ro", True)},
        workdir="/testbed",
        run_id="t1",
    )
    box = FakeBackend(rules).start(spec)
    _STARTED.append(box)
    return box


def test_the_first_matching_rule_answers_and_every_exec_is_recorded(tmp_path: Path) -> None:
    def echo(run: Exec) -> ExecResult:
        return answer(run.argv[-1].upper())

    box = _box(
        tmp_path,
        [Rule(r"^cat a\.txt$", answer("a\n")), Rule(r"^echo ", echo), Rule(r"^cat", answer("other"))],
    )
    assert box.exec(["cat", "a.txt"], workdir="/testbed", timeout_s=1).stdout == b"a\n"
    assert box.exec(["echo", "hi"], workdir="/", timeout_s=1, env={"X": "1"}).stdout == b"HI"
    assert box.exec(["cat", "b.txt"], workdir="/", timeout_s=1).stdout == b"other"
    assert [(r.argv, r.workdir, r.env) for r in box.runs] == [
        (["cat", "a.txt"], "/testbed", {}),
        (["echo", "hi"], "/", {"X": "1"}),
        (["cat", "b.txt"], "/", {}),
    ]
    with pytest.raises(SandboxError, match="no answer for ls"):
        box.exec(["ls"], workdir="/", timeout_s=1)


def test_a_timeout_never_ends_until_signalled(tmp_path: Path) -> None:
    box = _box(tmp_path, [Rule("sleep", answer("partial", exit_code=None))])
    assert box.exec(["sleep", "9"], workdir="/", timeout_s=1).timed_out
    handle = box.start_exec(["sleep", "9"], workdir="/")
    assert not handle.wait(0.01)
    result = handle.stop(grace_s=0)
    assert handle.signals == [2] and result.exit_code is None and result.stdout == b"partial"


def test_files_follow_the_binds(tmp_path: Path) -> None:
    box = _box(tmp_path, [])
    box.write_file("/testbed/sub/a.txt", b"one")
    assert (tmp_path / "ws" / "sub" / "a.txt").read_bytes() == b"one"
    assert box.read_file("/testbed/sub/a.txt") == b"one"
    box.write_file("/etc/motd", b"hello")
    assert box.read_file("/etc/motd") == b"hello" and not (tmp_path / "etc").exists()
    with pytest.raises(SandboxError, match="read-only"):
        box.write_file("/opt/ro/x", b"")
    with pytest.raises(SandboxError, match="not a regular file"):
        box.read_file("/testbed/sub")
    with pytest.raises(SandboxError, match="size limit"):
        box.read_file("/testbed/sub/a.txt", max_bytes=2)
    with pytest.raises(SandboxError, match="normalized"):
        box.read_file("/testbed/../x")
