"""The run context (replayer/pipeline/context.py) releases what a run made in reverse order on every path,
with real resources: state folders (sandboxes/quota.py) and temporary files, no stand-ins."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from replayer.floor.errors import Interrupted, SandboxError
from replayer.floor.limits import SandboxLimits
from replayer.pipeline import steps
from replayer.pipeline.context import RunContext
from replayer.sandboxes.fake import FakeBackend
from tests.conftest import ROOT

FIXTURE = ROOT / "tests" / "fixtures" / "pi" / "tools"


class _Folder:
    """A real folder that records, when removed, which of the others were still there."""

    def __init__(self, path: Path, log: list[tuple[str, list[str]]], all_: list[Path]):
        self.path, self.log, self.all = path, log, all_
        path.mkdir()
        all_.append(path)

    def remove(self) -> None:
        self.log.append((self.path.name, sorted(p.name for p in self.all if p.exists() and p != self.path)))
        self.path.rmdir()


def _folders(
    tmp_path: Path, ctx: RunContext, names: str
) -> tuple[list[_Folder], list[tuple[str, list[str]]]]:
    log: list[tuple[str, list[str]]] = []
    made: list[Path] = []
    folders = [ctx.own(f, f.remove) for f in (_Folder(tmp_path / n, log, made) for n in names)]
    return folders, log


def test_an_exception_releases_everything_last_made_first(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="the rerun failed"), RunContext() as ctx:
        folders, log = _folders(tmp_path, ctx, "abc")
        raise SandboxError("the rerun failed")
    assert log == [("c", ["a", "b"]), ("b", ["a"]), ("a", [])]
    assert not any(f.path.exists() for f in folders)


def test_an_interruption_and_a_success_release_the_same_way(tmp_path: Path) -> None:
    with pytest.raises(Interrupted), RunContext() as ctx:
        _, log = _folders(tmp_path, ctx, "ab")
        raise Interrupted("SIGTERM")
    assert [name for name, _ in log] == ["b", "a"]
    with RunContext() as ctx:
        _, log = _folders(tmp_path, ctx, "de")
    assert [name for name, _ in log] == ["e", "d"]


def test_one_released_early_is_not_released_again_and_owning_again_moves_it_up(tmp_path: Path) -> None:
    with RunContext() as ctx:
        (a, b, c), log = _folders(tmp_path, ctx, "abc")
        ctx.release(b)
        ctx.own(a, a.remove)  # now mounted into c, say: it goes first
    assert [name for name, _ in log] == ["b", "a", "c"]


def test_a_release_that_fails_does_not_stop_the_others(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError), RunContext() as ctx:
        (a, b), log = _folders(tmp_path, ctx, "ab")
        b.path.rmdir()  # its removal fails
    assert [name for name, _ in log] == ["b", "a"] and not a.path.exists()


@contextlib.contextmanager
def _served(log: list[str]) -> Iterator[str]:
    log.append("up")
    try:
        yield "served"
    except KeyError as exc:  # told of the run's exception, as a `with` would tell it
        log.append(f"down after {exc}")
        raise
    log.append("down")


def test_an_entered_manager_is_exited_in_its_turn(tmp_path: Path) -> None:
    order: list[str] = []
    with pytest.raises(KeyError), RunContext() as ctx:
        (a,), log = _folders(tmp_path, ctx, "a")
        assert ctx.enter(_served(order)) == "served"
        raise KeyError("x")
    assert order == ["up", "down after 'x'"] and log[0][0] == "a" and not a.path.exists()
    with RunContext() as ctx:
        ctx.enter(_served(order))
    assert order[-1] == "down"


def test_a_replay_opening_is_released_sandbox_first(tmp_path: Path) -> None:
    """steps.open_replay: the real state folder with the workspace's copy and a sandbox over it (the
    in-process runtime), both let go when the run fails."""
    from replayer.pipeline.engine import load

    adapter, traj = load(FIXTURE / "session.jsonl")
    backend = FakeBackend()
    with pytest.raises(SandboxError), RunContext() as ctx:
        opened = steps.open_replay(
            ctx,
            backend,
            adapter,
            traj,
            FIXTURE / "workspace",
            "an-image",
            scratch=tmp_path,
            skips=steps.Skips(),
            run_id="r1",
            limits=SandboxLimits(),
            labels={},
            bridge=False,
            on_event=lambda event: None,
        )
        state = opened.state.path
        assert sorted(p.name for p in opened.dirs.workspace.iterdir()) == sorted(
            p.name for p in (FIXTURE / "workspace").iterdir()
        )
        assert not backend.sandbox.stopped
        raise SandboxError("the rerun failed")
    assert backend.sandbox.stopped and not state.exists()
