"""The continue stage run: the pinned agent continued inside the sandbox through the bridge, with step and idle
budgets (the adapter says how to launch it: its continue_launch.py)."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import orjson

from replayer.adapters.base import Adapter, Ended, Launch, Rebuild, Rerunner
from replayer.adapters.sandbox_paths import BRIDGE_PORT
from replayer.bridges.core import Bridge, BridgeConfig, Gate
from replayer.bridges.playback import Player, Recorder
from replayer.floor.errors import PlanRefused, ReplayError, continuation_failure
from replayer.floor.events import AgentEnded, BridgeTraffic, OnEvent, ignore
from replayer.floor.io import write_bytes_atomic
from replayer.floor.limits import SandboxLimits
from replayer.floor.pins import load_pins
from replayer.floor.requests import ContinueRequest
from replayer.floor.results import (
    AgentStatus,
    BridgeCounters,
    BridgeRefusal,
    CassetteCheck,
    ContinuationResult,
    GateMismatch,
    GateVerdict,
    InputCondition,
    Leftovers,
)
from replayer.floor.rundirs import RunDirs
from replayer.floor.safecopy import copy_untrusted
from replayer.floor.trajectory import Trajectory
from replayer.pipeline import cassette, leftovers, mock, oracle
from replayer.pipeline.context import RunContext
from replayer.sandboxes.base import MAX_OUTPUT_BYTES, ExecResult, RunningExec, Sandbox

BRIDGE_MOUNT = "/run/replayer-bridge"
_POLL_S = 0.1
logger = logging.getLogger(__name__)


def upstream_key(request: ContinueRequest, adapter: Adapter) -> str:
    if mock.is_mock(request.upstream):
        mock.load_script(request.upstream)  # a bad script is refused before anything starts
        return mock.MOCK_KEY
    name = request.upstream_key_env or adapter.key_env
    key = os.environ.get(name)
    if not key:
        raise PlanRefused(f"the upstream key variable {name} is not set on the host")
    return key


def _traffic(bridge: Bridge, heard: BridgeTraffic, on_event: OnEvent) -> BridgeTraffic:
    """Tell `on_event` the bridge's counts when they changed since `heard`; returns what it was told."""
    c = bridge.counters
    now = BridgeTraffic(c.main_requests, c.input_tokens, c.output_tokens)
    if now != heard:
        logger.debug("bridge: %d request(s), tokens %s/%s", c.main_requests, c.input_tokens, c.output_tokens)
        on_event(now)
    return now


def _watch(
    handle: RunningExec, bridge: Bridge, request: ContinueRequest, idle_timeout_s: float, on_event: OnEvent
) -> tuple[AgentStatus | None, BridgeTraffic]:
    """Wait for the agent to end; end it (SIGINT, then SIGKILL after the grace) when the bridge refused
    it, a budget ran out or it went idle. Its status when it was ended (None: it ended by itself), and the
    traffic `on_event` was last told of."""
    status: AgentStatus | None = None
    heard = BridgeTraffic(0, None, None)
    while not handle.wait(_POLL_S):
        heard = _traffic(bridge, heard, on_event)
        if bridge.mismatch is not None:
            status = "bridge_refused"
        elif bridge.budget is not None:
            status = bridge.budget
        elif time.monotonic() - max(handle.last_output, bridge.last_activity) > idle_timeout_s:
            status = "idle_timeout"
        if status is not None:
            handle.signal(signal.SIGINT)
            if not handle.wait(request.grace_s):
                handle.signal(signal.SIGKILL)
                handle.wait(5)
            break
    return status, heard


def _write_outputs(out: Path, stdout: bytes, stderr: bytes, log: bytes) -> dict[str, str]:
    """The agent's output and the bridge's log under `out`; their places, as the result names them."""
    (out / "agent").mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(out / "agent" / "stdout.jsonl", stdout)
    write_bytes_atomic(out / "agent" / "stderr.log", stderr)
    write_bytes_atomic(out / "bridge" / "log.jsonl", log)
    return {
        "agent_stdout": "agent/stdout.jsonl",
        "agent_stderr": "agent/stderr.log",
        "bridge_log": "bridge/log.jsonl",
    }


@dataclass(frozen=True)
class Continuing:
    """What a continuation reads, from whichever run it follows (`run -n K`, a fork of `run -n a,b`, a
    compare's run): where it runs, what it continues from, how."""

    box: Sandbox
    adapter: Adapter
    traj: Trajectory
    rebuild: Rebuild
    request: ContinueRequest
    dirs: RunDirs
    """The run's folders: the bridge's socket, the agent home, the workspace the cassette oracle reads."""
    out: Path
    key: str
    """The upstream's key, read before anything started ("" for a cassette)."""
    after_step: int
    limits: SandboxLimits | None = None
    """What the cassette oracle and the copy of the home read within."""
    on_event: OnEvent = ignore


@dataclass
class _Launched:
    """How the agent is launched and what answers it, fixed before it starts."""

    prompt: str | None
    keep_prompt: bool
    model: str | None
    rebuild: Rebuild
    gate: Gate
    tape: cassette.Cassette | None
    player: Player | None
    recorder: Recorder | None
    left: Leftovers
    before: oracle.WorkspaceState | None
    """The workspace before the agent, when a cassette is replayed or recorded (the oracle's start)."""


@dataclass
class _Ran:
    """What the agent's run through the bridge left (the bridge closed)."""

    launch: Launch
    result: ExecResult
    status: AgentStatus | None
    """How it was ended (None: it ended by itself)."""
    counters: BridgeCounters
    log: bytes
    mismatch: GateMismatch | None
    refusals: list[BridgeRefusal]
    refused_by: Literal["gate", "cassette"] | None
    gate_notes: list[str]
    gate_verdict: GateVerdict


def run(c: Continuing) -> ContinuationResult:
    """The agent continued from the rebuilt prefix: launched through the bridge, watched, its outputs and
    its continued session read back, its status and (with a cassette) its check."""
    started = time.monotonic()
    launched = _launch_plan(c)
    ran = _run_agent(c, launched)
    files = _read_back(c, launched, ran)
    status = _status(c, ran, files)
    logger.debug(
        "agent ended: %s (exit %s), %d request(s)", status, ran.result.exit_code, ran.counters.main_requests
    )
    c.on_event(AgentEnded(status, ran.counters.main_requests, time.monotonic() - started))
    keep_prompt = launched.keep_prompt
    condition: InputCondition = "boundary_user_prompt_appended" if keep_prompt else "replayed_boundary_only"
    return ContinuationResult(
        input_condition=condition,
        cassette=_cassette_check(c, launched, ran, status, condition),
        gate=ran.gate_verdict,
        gate_notes=ran.gate_notes,
        mismatch=ran.mismatch,
        agent_status=status,
        agent_exit_code=ran.result.exit_code,
        mock=mock.is_mock(c.request.upstream),
        steps_used=ran.counters.main_requests,
        model=launched.model,
        counters=ran.counters,
        files=files,
        duration_s=time.monotonic() - started,
        metadata=c.adapter.continuation_metadata(ran.launch, launched.rebuild),
        refusals=ran.refusals,
        leftovers=launched.left,
    )


def _status(c: Continuing, ran: _Ran, files: dict[str, str]) -> AgentStatus:
    """How the agent ended: as it was ended, else as the adapter reads its output (an exit that is not 0:
    `agent_error`); a `completed` run whose continued session cannot be read is `session_unreadable`."""
    status = ran.status
    if status is None:
        continued = c.out / "continued"
        status = (
            c.adapter.reported_status(c.traj, ran.result.stdout, continued)
            if ran.result.exit_code == 0
            else "agent_error"
        )
    if status == "completed" and any(name.endswith("_error") for name in files):
        status = "session_unreadable"  # what it did cannot be shown: not `completed` (files says why)
    return status


def _launch_plan(c: Continuing) -> _Launched:
    """The prompt (the boundary's, or a nonce), the model, the gate over the prefix, the cassette's player
    or recorder, the processes the prefix left, the workspace a cassette's oracle starts from."""
    request, adapter, traj, box = c.request, c.adapter, c.traj, c.box
    keep_prompt = request.boundary_prompt is not None
    prompt = request.boundary_prompt
    if prompt is None and adapter.needs_nonce:
        prompt = f"replayer-nonce-{secrets.token_hex(12)}"
    model = continuation_model(request, c.rebuild, adapter, traj)
    rebuild = adapter.gate_facts(box, traj, c.rebuild, model, request.boundary_prompt)
    gate = adapter.gate(rebuild, prompt, keep_prompt)
    tape = cassette.load(request.cassette) if request.cassette else None
    player = Player(tape.exchanges, prompt) if tape else None
    recorder = Recorder() if request.record_cassette else None
    left = leftovers.at_boundary(box, request.ends_leftovers())
    if left.count:
        logger.debug("%d process(es) left by the prefix%s", left.count, ", ended" if left.ended else "")
    before = oracle.workspace_state(c.dirs.workspace, c.limits) if tape or recorder else None
    return _Launched(prompt, keep_prompt, model, rebuild, gate, tape, player, recorder, left, before)


def continuation_model(
    request: ContinueRequest, rebuild: Rebuild, adapter: Adapter, traj: Trajectory
) -> str | None:
    """The model the continuation asks for: the request's, else the boundary's, else the adapter's default."""
    return request.model or rebuild.model or adapter.default_model(traj)


def facts_at_boundary(
    adapter: Adapter, rerunner: Rerunner, traj: Trajectory, rebuild: Rebuild, request: ContinueRequest
) -> Rebuild:
    """The gate's facts told by the reruns' live process as the replay passes the boundary, where the
    adapter can (`Adapter.gate_facts_at_boundary`); `_launch_plan`'s `gate_facts` keeps them."""
    model = continuation_model(request, rebuild, adapter, traj)
    return adapter.gate_facts_at_boundary(rerunner, traj, rebuild, model, request.boundary_prompt)


def _run_agent(c: Continuing, launched: _Launched) -> _Ran:
    """The agent in the sandbox, its model traffic through the bridge (to the upstream, the mock model or
    the cassette), until it ends or is ended."""
    request, adapter, traj, box = c.request, c.adapter, c.traj, c.box
    idle_timeout_s = request.idle_timeout_s if request.idle_timeout_s is not None else adapter.idle_timeout_s
    model, prompt, gate = launched.model, launched.prompt, launched.gate
    with RunContext() as ctx:
        upstream = request.upstream
        if mock.is_mock(upstream):
            upstream = ctx.enter(
                mock.serve(upstream, adapter, load_pins().agents[adapter.name].version), "the mock model"
            )
        bridge = ctx.enter(_bridge(c, launched, upstream), "the bridge")
        box.forward_port(BRIDGE_PORT, f"{BRIDGE_MOUNT}/bridge.sock")
        launch = Launch(
            prompt=prompt,
            keep_prompt=launched.keep_prompt,
            port=BRIDGE_PORT,
            model=model,
            max_steps=request.max_steps,
        )
        argv, env = adapter.continue_command(traj, launch)
        env = {**env, **request.agent_env}
        assert traj.cwd
        logger.debug("agent command: %s", argv)
        handle = box.start_exec(argv, workdir=traj.cwd, env=env)
        status, heard = _watch(handle, bridge, request, idle_timeout_s, c.on_event)
        result = handle.result(timed_out=False)
        if bridge.mismatch is not None:
            status = "bridge_refused"  # refused, and the CLI gave up on its own
        counters = bridge.counters.model_copy()
        _traffic(bridge, heard, c.on_event)
        log = b"".join(orjson.dumps(e.model_dump()) + b"\n" for e in bridge.log)
        refused_by = bridge.refused_by
        return _Ran(
            launch,
            result,
            status,
            counters,
            log,
            bridge.mismatch,
            list(bridge.refusals),
            refused_by,
            list(gate.notes),
            _gate_verdict(refused_by, counters),
        )


def _bridge(c: Continuing, launched: _Launched, upstream: str | None) -> Bridge:
    """The bridge between the agent and `upstream` (the model service, or the mock model serving): the
    gate over the prefix, the budgets of the request, the cassette's player or recorder."""
    request, adapter, model = c.request, c.adapter, launched.model
    config = BridgeConfig(
        upstream=upstream,
        api_key=c.key,
        max_main_requests=request.max_steps,
        max_requests=request.max_requests,
        max_tokens=request.max_tokens,
        loop_limit=request.loop_limit,
        ledger=request.token_ledger,
        batch_ledger=request.batch_ledger,
        models=(model,) if model else None,
        side_calls=adapter.side_calls,
        side_models=adapter.side_call_models(load_pins().agents[adapter.name].version),
        kept_answer_headers=adapter.kept_answer_headers,
    )
    return Bridge(
        launched.gate,
        adapter.dialect(),
        config,
        c.dirs.bridge / "bridge.sock",
        recorder=launched.recorder,
        player=launched.player,
    )


def _gate_verdict(refused_by: Literal["gate", "cassette"] | None, counters: BridgeCounters) -> GateVerdict:
    """The gate refused the first request, accepted it (a request went on, or the cassette refused one
    after), or was never reached."""
    if refused_by == "gate":
        return "refused"
    return "accepted" if counters.main_requests or refused_by else "not_reached"


def _read_back(c: Continuing, launched: _Launched, ran: _Ran) -> dict[str, str]:
    """The agent's output, the bridge's log and the continued session under `c.out`; their places."""
    out = c.out
    files = _write_outputs(out, ran.result.stdout, ran.result.stderr, ran.log)
    if ran.result.output_truncated:  # a bound that cut is said, never left for the user to find
        files["agent_output_cut"] = (
            f"the agent's stdout and stderr passed {MAX_OUTPUT_BYTES} bytes: the first kept"
        )
    # the adapter reads the continued session from a copy of the home that follows no link and holds
    # no special file: the container could write anything there
    after = out / ".home-after"
    copy_untrusted(c.dirs.home, after, links="skip", limits=c.limits, what="the agent home", holes="count")
    try:
        ended = Ended(c.traj, launched.rebuild, ran.launch, after, out / "continued", c.box)
        files.update(c.adapter.finish_continuation(ended))
    finally:
        shutil.rmtree(after, ignore_errors=True)
    return files


def _cassette_check(
    c: Continuing, launched: _Launched, ran: _Ran, status: AgentStatus, condition: InputCondition
) -> CassetteCheck | None:
    """With a cassette: the replayed one's verdict, or the one recorded; the workspace's cut said in it."""
    before, tape, player, recorder = launched.before, launched.tape, launched.player, launched.recorder
    if before is None:
        return None
    check = None
    after_state = oracle.workspace_state(c.dirs.workspace, c.limits)
    cut = oracle.cut_of(before, after_state)
    now = oracle.outcome(
        status,
        oracle.workspace_changes(before.entries, after_state.entries),
        oracle.session_state(c.out / "continued"),
        cut,
    )
    request, adapter = c.request, c.adapter
    if tape is not None and player is not None:
        assert request.cassette is not None
        refused = ran.mismatch if ran.refused_by == "cassette" else None
        check = _replayed(tape, request.cassette, player, now, refused, adapter)
    elif recorder is not None:
        assert request.record_cassette is not None
        version = load_pins().agents[adapter.name].version
        expected = launched.rebuild.expected_prefix
        origin = cassette.origin_of(c.traj, version, c.after_step, expected, condition)
        check = _recorded(request.record_cassette, origin, recorder, ran.counters.upstream_errors, now, c.key)
    if cut is not None and check is not None:  # said where the user reads the verdict
        check = check.model_copy(update={"notes": [*check.notes, cut]})
    return check


def _recorded(
    dest: Path, origin: cassette.Origin, recorder: Recorder, upstream_errors: int, outcome: dict, key: str
) -> CassetteCheck:
    exchanges = recorder.ordered()
    why = cassette.unrecordable(exchanges, upstream_errors)
    if why is not None:
        return CassetteCheck(cassette=str(dest), mode="recorded", verdict="not_recorded", notes=[why])
    redactions = cassette.write(dest, origin, exchanges, outcome, key)
    return CassetteCheck(
        cassette=str(dest),
        mode="recorded",
        verdict="recorded",
        exchanges=len(exchanges),
        redactions=redactions,
    )


def _replayed(
    tape: cassette.Cassette,
    path: Path,
    player: Player,
    outcome: dict,
    refused: GateMismatch | None,
    adapter: Adapter,
) -> CassetteCheck:
    """The request the cassette refused, else the oracle's first difference, else verified."""
    recorded = tape.manifest.origin
    notes = []
    running = load_pins().agents[adapter.name].version
    if running != recorded.agent_version:
        notes.append(f"recorded with {recorded.agent} {recorded.agent_version}, replayed with {running}")
    if player.unused_main() and refused is None:
        notes.append(f"{player.unused_main()} recorded main request(s) were never sent")
    if player.normalized:
        notes.append(
            f"requests matched their recording after normalizing {', '.join(sorted(player.normalized))}"
        )
    answered = player.next_main + len(player.used_side)
    check = CassetteCheck(
        cassette=str(path), mode="replayed", verdict="verified", exchanges=answered, notes=notes
    )
    if refused is not None:
        return check.model_copy(update={"verdict": "differs", "where": "request", "difference": refused})
    found = oracle.verify(tape.outcome, outcome)
    if found is not None:
        return check.model_copy(update={"verdict": "differs", "where": "outcome", "difference": found})
    return check


def continuation_error(cont: ContinuationResult | None, out: str | os.PathLike[str]) -> ReplayError | None:
    """The error of a refused or failed continuation, its cause in one line (the gate's first difference as
    values, or the agent's last output line) read from the result directory `out`; None otherwise."""
    if cont is None:
        return None
    out = Path(out)
    stderr = _tail(out / cont.files.get("agent_stderr", "agent/stderr.log"))
    stdout = _tail(out / cont.files.get("agent_stdout", "agent/stdout.jsonl"))
    return continuation_failure(cont, out, stderr, stdout)


_OUTPUT_TAIL = 64 * 1024
"""How much of the end of the agent's stdout/stderr a failure message reads its last line from."""


def _tail(path: Path) -> bytes:
    """The end of a file the engine wrote (the agent's output); nothing when it is not there."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, fh.seek(0, 2) - _OUTPUT_TAIL))
            return fh.read()
    except OSError:
        return b""
