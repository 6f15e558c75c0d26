"""A compare's run (replayer/pipeline/fork.py) on the in-process fake sandbox: its container over its own copy of
the boundary state, the agent continued through the bridge's forwarded port, the patch, the check, and a
failure recorded in the run instead of raised. The agent is the fake's scripted output: what the bridge
and the real CLI do is the Docker tests' (test_compare.py)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from replayer.floor.compare_results import RunRecord
from replayer.floor.requests import ContinueRequest, Variant, VariantSpec
from replayer.pipeline.engine import execute, load
from replayer.pipeline.fork import PATCH_MOUNT, BoundaryReady, ForkJob, Turn, run
from replayer.sandboxes.fake import FakeBackend, Rule, answer
from tests.conftest import CLAUDE
from tests.replayer.pipeline.test_pipeline import _request

SOURCE = CLAUDE.fixture("single") / "session.jsonl"


@pytest.fixture(scope="module")
def replayed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The replay a compare forks from, and its boundary state (as compare's snapshot copies it): at
    boundary 0, where nothing reruns (Claude Code's reruns drive the real CLI, which the fake cannot)."""
    out = tmp_path_factory.mktemp("compare")
    request = _request(SOURCE, CLAUDE.fixture("single") / "workspace", 0, out / "replay")
    execute(request, backend=FakeBackend([]))
    shutil.copytree(out / "replay" / "state", out / "snapshot")
    return out


def _fork(
    out: Path, name: str, rules: list[Rule], monkeypatch: pytest.MonkeyPatch, **spec: object
) -> tuple[RunRecord, FakeBackend]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "host-key")
    job = ForkJob(
        compare_id="cmp-fake",
        trajectory=SOURCE,
        task=None,
        cwd=None,
        session=None,
        replay_dir=out / "replay",
        boundary_state=out / "snapshot",
        run_dir=out / "runs" / name / "1",
        dir=f"runs/{name}/1",
        variant=Variant(name=name, spec=VariantSpec.model_validate(spec)),
        repeat=1,
        continuation=ContinueRequest(upstream="http://127.0.0.1:9/"),
        check="test -f a.txt",
        check_timeout_s=30,
        agent="claude_code",
        agent_version="2.1.197",
        after_step=0,
    )
    backend = FakeBackend([*rules, LEFTOVERS])
    ready = BoundaryReady(image="sha256:boundary", sealed=None, at=time.time())
    return run(job, lambda: ready, lambda: Turn(at=time.time()), backend), backend


LEFTOVERS = Rule(
    r"for d in /proc/\[0-9\]\*", answer("1\t0\t/sbin/docker-init\n7\t1\tsleep infinity\n30\t0\tsh -c\n")
)
"""The processes at the boundary: the sandbox's init and main command, and this listing (none left)."""
AGENT = Rule(r"/claude --resume ", answer((CLAUDE.fixture("continued") / "stdout.jsonl").read_bytes()))
CHECK = Rule(r"^bash -c exec 2>&1; test -f a\.txt$", answer("", exit_code=0))


def test_a_run_continues_in_its_own_sandbox_from_the_boundary(
    replayed: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    record, backend = _fork(replayed, "plain", [AGENT, CHECK], monkeypatch)
    assert record.status == "ok", record.error
    box = backend.sandbox
    assert box.spec.image == "sha256:boundary" and box.spec.labels == {"sandbox-replayer.compare": "cmp-fake"}
    workspace, read_only = box.spec.binds["/testbed"]
    assert not read_only and workspace.name == "workspace" and workspace.parent != replayed / "snapshot"
    assert box.forwarded == [(8765, "/run/replayer-bridge/bridge.sock")]
    listing, agent, check = box.runs
    assert listing.argv[:2] == ["sh", "-c"]  # the processes the prefix left, listed before the agent starts
    assert record.continuation is not None and record.continuation.leftovers.count == 0
    assert agent.workdir == "/testbed" and "host-key" not in " ".join(agent.env.values())
    _, traj = load(SOURCE)
    assert traj.session_id in agent.argv
    assert record.continuation is not None and record.continuation.gate == "not_reached"
    assert record.check is not None and record.check.passed and check.workdir == "/testbed"
    assert record.container == box.name and box.stopped
    assert (replayed / "runs" / "plain" / "1" / "state" / "workspace" / "a.txt").is_file()


def test_a_patch_that_does_not_apply_fails_only_its_run(
    replayed: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    patch = tmp_path / "fix.diff"
    patch.write_text("--- a/a.txt\n+++ b/a.txt\n@@ -1 +1 @@\n-nope\n+yes\n")
    refused = Rule(r"^git apply ", answer(stderr="error: patch failed: a.txt:1\n", exit_code=1))
    record, backend = _fork(replayed, "patched", [refused, AGENT, CHECK], monkeypatch, patch=patch)
    assert record.status == "failed" and record.error_kind == "patch_failed"
    assert record.error is not None and "patch failed: a.txt:1" in record.error
    folder, read_only = backend.sandbox.spec.binds[PATCH_MOUNT]
    assert read_only and folder.name == "patch"
    (applied,) = backend.sandbox.runs
    assert applied.argv[-1] == f"{PATCH_MOUNT}/patch.diff" and backend.sandbox.stopped
