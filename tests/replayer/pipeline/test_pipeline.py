"""The engine's pipeline (plan, reruns and their bookkeeping, divergences, rebuild, the prefix gate) on
the in-process fake sandbox (sandboxes/fake.py): no Docker, milliseconds a run.

The fake answers each command the rerunner sends with a scripted output: the historical one (then the
run must be the one the Docker tests assert: every call exact, the prefix the CLI sent), or another one
(a recorded divergence, the fresh text in the rebuilt rollout and required by the gate). The runs here are
Codex's, whose pinned version reruns by the replayer's own tools; Claude Code's reruns drive the real CLI,
so they, and whatever needs the real container, stay in the Docker tests (test_run_fidelity.py,
test_codex_fidelity.py ...); a Claude Code rebuild with a changed observation and its gate are pure."""

from __future__ import annotations

import re
import shutil
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import orjson
import pytest

from replayer.adapters.base import Rebuild
from replayer.adapters.claude_code import envelope
from replayer.floor.errors import PlanRefused, SandboxError
from replayer.floor.limits import SandboxLimits
from replayer.floor.requests import ContinueRequest, ReplayRequest
from replayer.floor.results import ReplayResult
from replayer.floor.rundirs import RunDirs
from replayer.floor.trajectory import Observation, ToolCall
from replayer.pipeline.engine import execute, execute_many, load
from replayer.sandboxes.base import ExecResult, SandboxSpec
from replayer.sandboxes.fake import FakeBackend, FakeSandbox, Rule, answer
from tests.adapters.claude_code.test_prefix_fidelity import _request_after as _claude_request_after
from tests.adapters.codex.test_codex_fidelity import VOLATILE, _request_after, _same_prefix, _volatile_free
from tests.conftest import CLAUDE, CODEX

NONCE = "replayer-nonce-0123456789abcdef01234567"


def _request(source: Path, workspace: Path, after_step: int, out: Path, **extra: object) -> ReplayRequest:
    return ReplayRequest(
        mode="run", trajectory=source, after_step=after_step, out=out, workspace=workspace, **extra
    )


def _run(
    source: Path, workspace: Path, after_step: int, out: Path, rules: list[Rule], **extra: object
) -> tuple[ReplayResult, FakeBackend]:
    backend = FakeBackend(rules)
    return execute(_request(source, workspace, after_step, out, **extra), backend=backend), backend


def _json(path: Path) -> object:
    return orjson.loads(path.read_bytes())


def test_claude_code_divergence_lands_in_the_session_and_the_gate(tmp_path: Path) -> None:
    """A fresh observation that differs (what a rerun in a changed workspace gives, as
    test_run_fidelity.py runs it) is in the rebuilt session and the expected prefix; the CLI resuming
    from it passes the gate, the recording's prefix (the stale "hi") does not."""
    from replayer.adapters.claude_code import ClaudeCodeAdapter

    adapter, traj = load(CLAUDE.fixture("single") / "session.jsonl")
    assert isinstance(adapter, ClaudeCodeAdapter)
    rebuild = adapter.rebuild(traj, 2, {"toolu_single_01": Observation(content="changed")}, tmp_path)
    rebuilt = [orjson.loads(line) for line in rebuild.native_files[0].read_bytes().splitlines()]
    blocks = [
        b for r in rebuilt if r.get("type") == "user" for b in r["message"]["content"] if isinstance(b, dict)
    ]
    assert next(b for b in blocks if b.get("tool_use_id") == "toolu_single_01")["content"] == "changed"
    expected = rebuild.expected_prefix
    assert expected[2]["content"][0]["content"] == "changed"
    recorded = _claude_request_after("single", ["toolu_single_02"])
    assert expected[3:] == recorded[3:] and expected[2] != recorded[2]
    body = next(r["body"] for r in CLAUDE.requests("single"))
    last_string = rebuild.continuation.prefix_last_was_string
    fresh = {**body, "messages": envelope.resume_request(expected, NONCE, last_string)}
    stale = {**body, "messages": envelope.resume_request(recorded, NONCE, last_string)}
    refused = adapter.gate(rebuild, NONCE, False).route("POST", "/v1/messages", stale)
    assert refused.kind == "refuse" and refused.mismatch is not None
    assert refused.mismatch.path.startswith("messages[2].content[0]")
    assert adapter.gate(rebuild, NONCE, False).route("POST", "/v1/messages", fresh).kind == "main"


def test_claude_code_unknown_tool_is_refused_before_any_sandbox(tmp_path: Path) -> None:
    source = CLAUDE.fixture("mixed_tools") / "session.jsonl"
    backend = FakeBackend([])
    request = _request(source, CLAUDE.fixture("mixed_tools") / "workspace", 3, tmp_path / "out")
    with pytest.raises(PlanRefused, match="WebFetch"):
        execute(request, backend=backend)
    assert backend.started == [] and not (tmp_path / "out").exists()


def test_a_command_the_script_does_not_answer_fails_the_run_and_leaves_nothing(tmp_path: Path) -> None:
    source = CODEX.fixture("exec") / "rollout.jsonl"
    backend = FakeBackend([])
    request = _request(source, CODEX.fixture("exec") / "workspace", 1, tmp_path / "out")
    with pytest.raises(SandboxError, match="no answer"):
        execute(request, backend=backend)
    assert backend.sandbox.stopped and not (tmp_path / "out").exists()


def test_a_continuation_without_the_upstream_key_is_refused_before_the_sandbox(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.delenv("REPLAYER_TEST_ABSENT_KEY", raising=False)
    source = CLAUDE.fixture("single") / "session.jsonl"
    backend = FakeBackend([])
    cont = ContinueRequest(upstream="http://127.0.0.1:9/", upstream_key_env="REPLAYER_TEST_ABSENT_KEY")
    request = _request(source, CLAUDE.fixture("single") / "workspace", 1, tmp_path / "out", continuation=cont)
    with pytest.raises(PlanRefused, match="REPLAYER_TEST_ABSENT_KEY"):
        execute(request, backend=backend)
    assert backend.started == []


# Codex: exec_command goes through the sandbox (the wrapper reports the wall time on stderr);
# apply_patch works on the workspace copy on the host.
FULL_OUTPUTS = {
    "seq 1 30000": "".join(f"{i}\n" for i in range(1, 30001)),
    "printf 'no newline'": "no newline",
}
"""The commands whose recorded observation is cut by the CLI: what they printed."""


def _codex_historical(call: ToolCall) -> ExecResult:
    assert call.historical is not None
    text = str(call.historical.content)
    if text.startswith("exec_command failed"):
        return answer(stderr="no-workdir")
    found = re.search(
        r"Wall time: ([0-9.]+) seconds\n(?:Process exited with code (-?\d+)|Process running[^\n]*)\n.*?Output:\n(.*)",
        text,
        re.DOTALL,
    )
    assert found is not None, text
    output = FULL_OUTPUTS.get(call.input["cmd"], found[3])
    code = int(found[2]) if found[2] is not None else None  # still running: the yield deadline passed
    return answer(output, f"{int(float(found[1]) * 1e9)}\n", code)


def _codex_rule(command: str, result: ExecResult) -> Rule:
    return Rule(re.escape(f"/bin/bash -c {command}") + "$", result)


def _codex_rules(source: Path) -> list[Rule]:
    _, traj = load(source)
    calls = [c for s in traj.steps for c in s.calls if c.tool == "exec_command"]
    return [_codex_rule(c.input["cmd"], _codex_historical(c)) for c in calls]


@pytest.mark.parametrize("name", ["exec", "patch", "continued"])
def test_codex_historical_outputs_rerun_equal(name: str, tmp_path: Path) -> None:
    source = CODEX.fixture(name) / "rollout.jsonl"
    _, traj = load(source)
    after = len(traj.steps)
    result, backend = _run(
        source, CODEX.fixture(name) / "workspace", after, tmp_path / "out", _codex_rules(source)
    )
    for d in result.divergences:  # what the Docker run test asserts
        assert d.status in ("exact", "normalized_equal"), d
        assert set(d.normalizers) <= VOLATILE, d
    assert len(result.divergences) == sum(len(s.calls) for s in traj.steps)
    execs = [c for s in traj.steps for c in s.calls if c.tool == "exec_command"]
    assert [r.argv[-1] for r in backend.sandbox.runs] == [c.input["cmd"] for c in execs]
    assert backend.sandbox.stopped and result.container == backend.sandbox.name
    assert result.sandbox is not None and result.sandbox.limits == backend.sandbox.spec.limits
    reruns = _json(tmp_path / "out" / "reruns.json")
    assert isinstance(reruns, list) and [r["call_id"] for r in reruns] == [
        d.call_id for d in result.divergences
    ]
    expected = _json(tmp_path / "out" / "expected_prefix.json")
    assert isinstance(expected, list)
    _same_prefix(_volatile_free(expected), _volatile_free(_request_after(name, after)))


def test_codex_timeout_and_missing_workdir_render_as_the_cli(tmp_path: Path) -> None:
    """A command still running at its yield deadline and a workdir that is not there: the fake's timeout
    and the wrapper's marker become the CLI's observations (equal to the recorded ones)."""
    source = CODEX.fixture("exec") / "rollout.jsonl"
    result, backend = _run(
        source, CODEX.fixture("exec") / "workspace", 8, tmp_path / "out", _codex_rules(source)
    )
    by_id = {d.call_id: d for d in result.divergences}
    assert by_id["call_exec_08"].status == "exact"
    assert by_id["call_exec_09"].status == "normalized_equal"
    fresh = {r["call_id"]: r["fresh"] for r in _json(tmp_path / "out" / "reruns.json")}  # type: ignore[union-attr]
    assert "Process running with session ID" in fresh["call_exec_09"]
    (slow,) = [r for r in backend.sandbox.runs if r.argv[-1] == "echo one; sleep 5"]
    assert slow.timeout_s == 0.5


def test_codex_divergence_lands_in_the_rollout_and_the_gate(tmp_path: Path) -> None:
    source = CODEX.fixture("exec") / "rollout.jsonl"
    rules = [_codex_rule("cat a.txt", answer("changed\n", "1000\n")), *_codex_rules(source)]
    result, _ = _run(source, CODEX.fixture("exec") / "workspace", 2, tmp_path / "out", rules)
    by_id = {d.call_id: d for d in result.divergences}
    assert by_id["call_exec_01"].status == "different"
    assert by_id["call_exec_03"].status == "normalized_equal"
    expected = _json(tmp_path / "out" / "expected_prefix.json")
    assert isinstance(expected, list)
    outputs = {i["call_id"]: i["output"] for i in expected if i.get("type") == "function_call_output"}
    assert outputs["call_exec_01"].endswith("Output:\nchanged\n")
    rollout = (tmp_path / "out" / result.native_files[0]).read_text()
    assert "Output:\\nchanged\\n" in rollout
    # the gate: the CLI resuming from the rebuilt rollout passes, the recording's prefix does not
    from replayer.adapters.codex import CodexAdapter

    facts = CodexAdapter().load_continuation(tmp_path / "out" / "continuation.json")
    rebuild = Rebuild(native_files=[], expected_prefix=expected, continuation=facts)
    sent = _request_after("exec", 2)
    prompt = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": NONCE}]}
    msg_id = f"msg_{uuid.uuid5(uuid.NAMESPACE_URL, 'thread')}"
    fresh = {"input": [{**expected[0], "id": msg_id}, *expected[1:], prompt]}
    stale = {"input": [{**sent[0], "id": msg_id}, *sent[1:], prompt]}
    refused = CodexAdapter().gate(rebuild, NONCE, False).route("POST", "/v1/responses", stale)
    index = next(
        i for i, item in enumerate(sent) if item.get("call_id") == "call_exec_01" and "output" in item
    )
    assert refused.kind == "refuse" and refused.mismatch is not None
    assert refused.mismatch.path == f"input[{index}].output"
    accepted = CodexAdapter().gate(rebuild, NONCE, False).route("POST", "/v1/responses", fresh)
    assert accepted.kind == "main" and accepted.body["input"][-1] != prompt, "the nonce is stripped"


def test_the_sandbox_gets_the_run_state_folders(tmp_path: Path) -> None:
    """The workspace copy at the cwd, the agent home, the bridge folder when the agent continues; the
    user's workspace untouched."""
    workspace = tmp_path / "ws"
    shutil.copytree(CODEX.fixture("patch") / "workspace", workspace)
    source = CODEX.fixture("patch") / "rollout.jsonl"
    result, backend = _run(source, workspace, 7, tmp_path / "out", _codex_rules(source))
    binds = backend.sandbox.spec.binds
    copy, read_only = binds["/testbed"]
    assert not read_only and copy.name == "workspace" and binds["/home/replay"][0] == copy.parent / "home"
    assert not copy.exists(), "the state is removed after the run"
    state = tmp_path / "out" / "state" / "workspace"
    assert (state / "new.txt").read_text() == "first\nsecond\n"
    assert not (state / "old.txt").exists() and (state / "moved" / "mv.txt").is_file()
    assert not (workspace / "new.txt").exists() and (workspace / "old.txt").is_file()
    assert result.sandbox is not None and result.sandbox.capabilities_dropped == []


class _FullSandbox(FakeSandbox):
    """A sandbox whose own file system used its disk quota up (what Docker's says once a write failed)."""

    def disk_used_up(self) -> bool:
        return True


class _FullBackend(FakeBackend):
    def start(self, spec: SandboxSpec) -> FakeSandbox:
        box = _FullSandbox(spec, self.rules, Path(tempfile.mkdtemp(prefix="replayer-fake-sandbox-")))
        self.started.append(box)
        return box


def _said(result: ReplayResult) -> dict:
    """What a result says, without what two runs of one boundary differ by (where it was written, the
    container's name, how long each stage took: only whether it was measured)."""
    said = result.model_dump(mode="json", exclude={"container": True, "request": {"out"}})
    said["timings"] = {stage: seconds > 0 for stage, seconds in said["timings"].items()}
    return said


def test_a_boundary_of_one_replay_says_what_its_own_run_says(tmp_path: Path) -> None:
    """One place assembles a result: the last boundary of `run -n 1,K` says what `run -n K` says, the
    disk its sandbox used up and the hint about it included, and the install and workspace times."""
    source, workspace = CODEX.fixture("exec") / "rollout.jsonl", CODEX.fixture("exec") / "workspace"
    _, traj = load(source)
    last = len(traj.steps)
    alone = execute(
        _request(source, workspace, last, tmp_path / "alone"), backend=_FullBackend(_codex_rules(source))
    )
    outs = {1: tmp_path / "many" / "after-1", last: tmp_path / "many" / f"after-{last}"}
    many = execute_many(
        _request(source, workspace, last, tmp_path / "many"), outs, backend=_FullBackend(_codex_rules(source))
    )
    assert alone.sandbox is not None and alone.sandbox.disk_used_up == ["container"]
    assert any("used up its disk limit" in hint for hint in alone.hints)
    assert all(isinstance(outcome, ReplayResult) for outcome in many.values()), many
    assert _said(many[last]) == _said(alone)  # type: ignore[arg-type]
    written = ReplayResult.model_validate_json((outs[last] / "result.json").read_bytes())
    assert _said(written) == _said(alone)


def test_a_sparse_file_in_the_agent_home_counts_whole_at_every_boundary(tmp_path: Path) -> None:
    """The host reads an agent home's files whole, so a boundary of `run -n 1,K` counts a sparse file's holes
    against the disk bound as `run -n K` does: the same refusal, not a result that copied it."""
    source, workspace = CODEX.fixture("exec") / "rollout.jsonl", CODEX.fixture("exec") / "workspace"
    _, traj = load(source)
    last = len(traj.steps)
    limits = SandboxLimits(disk_bytes=64 * 1024 * 1024)

    def sparse_home_backend() -> FakeBackend:
        rules = _codex_rules(source)
        first = rules[0].answer
        backend = FakeBackend(rules)

        def leaves_a_sparse_file(run: object) -> ExecResult:
            home = backend.sandbox.spec.binds["/home/replay"][0]
            with (home / "sparse.bin").open("wb") as f:
                f.truncate(limits.disk_bytes * 4)  # no data: a hole the size of four disk bounds
            return first(run) if callable(first) else first  # type: ignore[arg-type]

        rules[0] = Rule(rules[0].pattern, leaves_a_sparse_file)
        return backend

    with pytest.raises(SandboxError, match="holes counted") as alone:
        execute(
            _request(source, workspace, last, tmp_path / "alone", limits=limits),
            backend=sparse_home_backend(),
        )
    outs = {1: tmp_path / "many" / "after-1", last: tmp_path / "many" / f"after-{last}"}
    many = execute_many(
        _request(source, workspace, last, tmp_path / "many", limits=limits),
        outs,
        backend=sparse_home_backend(),
    )
    assert isinstance(many[last], SandboxError) and str(many[last]) == str(alone.value)
    assert not outs[last].exists()


def test_the_boundary_hook_of_one_boundary_sees_what_a_boundary_of_many_sees(tmp_path: Path) -> None:
    """Compare snapshots a boundary through the replay's hook: `run -n K` hands it the state and rebuilt
    session `run -n 1,K` hands it for K (the state as the result exports it), not the replay's live folders."""
    source, workspace = CODEX.fixture("exec") / "rollout.jsonl", CODEX.fixture("exec") / "workspace"
    _, traj = load(source)
    last = len(traj.steps)
    seen: dict[str, tuple[list[str], list[str]]] = {}

    def listing(root: Path) -> list[str]:
        return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))

    def hook(name: str) -> Callable[[object, RunDirs, Path], None]:
        def heard(_box: object, dirs: RunDirs, native: Path) -> None:
            seen[name] = listing(dirs.root), listing(native)

        return heard

    execute(
        _request(source, workspace, last, tmp_path / "alone"),
        on_boundary=hook("alone"),
        backend=FakeBackend(_codex_rules(source)),
    )
    outs = {1: tmp_path / "many" / "after-1", last: tmp_path / "many" / f"after-{last}"}
    execute_many(
        _request(source, workspace, last, tmp_path / "many"),
        outs,
        on_passed=lambda k, box, dirs, native: hook(f"many-{k}")(box, dirs, native),
        backend=FakeBackend(_codex_rules(source)),
    )
    assert seen["alone"] == seen[f"many-{last}"]
    assert seen["alone"][0] == listing(tmp_path / "alone" / "state"), "the state its result exports"
