"""Continue the pinned agent inside the sandbox through the bridge, with step and idle budgets."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import signal
import time
from pathlib import Path

import orjson

from replayer.adapters.base import Adapter, Ended, Launch, Rebuild
from replayer.adapters.sandbox_paths import BRIDGE_PORT
from replayer.bridges.core import Bridge, BridgeConfig
from replayer.bridges.playback import Player, Recorder
from replayer.floor.errors import PlanRefused, ReplayError, continuation_failure
from replayer.floor.events import AgentEnded, BridgeTraffic, OnEvent, ignore
from replayer.floor.io import write_bytes_atomic
from replayer.floor.models import (
    AgentStatus,
    CassetteCheck,
    ContinuationResult,
    ContinueRequest,
    GateMismatch,
    GateVerdict,
    InputCondition,
    SandboxLimits,
    Trajectory,
)
from replayer.floor.pins import load_pins
from replayer.floor.safecopy import copy_untrusted
from replayer.pipeline import cassette, leftovers, mock, oracle
from replayer.pipeline.context import RunContext
from replayer.sandboxes.base import RunningExec, Sandbox

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


def run(
    box: Sandbox,
    adapter: Adapter,
    traj: Trajectory,
    rebuild: Rebuild,
    request: ContinueRequest,
    *,
    key: str,
    socket_dir: Path,
    home: Path,
    out: Path,
    workspace: Path,
    after_step: int,
    on_event: OnEvent = ignore,
    limits: SandboxLimits | None = None,
) -> ContinuationResult:
    """`workspace`: the host side of the sandbox's working directory (the cassette oracle reads it, within
    `limits`)."""
    started = time.monotonic()
    idle_timeout_s = request.idle_timeout_s if request.idle_timeout_s is not None else adapter.idle_timeout_s
    keep_prompt = request.boundary_prompt is not None
    prompt = request.boundary_prompt
    if prompt is None and adapter.needs_nonce:
        prompt = f"replayer-nonce-{secrets.token_hex(12)}"
    model = request.model or rebuild.model or adapter.default_model(traj)
    rebuild = adapter.gate_facts(box, traj, rebuild, model, request.boundary_prompt)
    gate = adapter.gate(rebuild, prompt, keep_prompt)
    tape = cassette.load(request.cassette) if request.cassette else None
    player = Player(tape.exchanges, prompt) if tape else None
    recorder = Recorder() if request.record_cassette else None
    left = leftovers.at_boundary(box, request.ends_leftovers())
    if left.count:
        logger.debug("%d process(es) left by the prefix%s", left.count, ", ended" if left.ended else "")
    before = oracle.workspace_state(workspace, limits) if tape or recorder else None
    with RunContext() as ctx:
        upstream = request.upstream
        if mock.is_mock(upstream):
            upstream = ctx.enter(
                mock.serve(upstream, adapter, load_pins().agents[adapter.name].version), "the mock model"
            )
        config = BridgeConfig(
            upstream=upstream,
            api_key=key,
            max_main_requests=request.max_steps,
            max_requests=request.max_requests,
            max_tokens=request.max_tokens,
            ledger=request.token_ledger,
            models=(model,) if model else None,
            side_calls=adapter.side_calls,
            kept_answer_headers=adapter.kept_answer_headers,
        )
        bridge = ctx.enter(
            Bridge(
                gate, adapter.dialect(), config, socket_dir / "bridge.sock", recorder=recorder, player=player
            ),
            "the bridge",
        )
        box.forward_port(BRIDGE_PORT, f"{BRIDGE_MOUNT}/bridge.sock")
        launch = Launch(
            prompt=prompt, keep_prompt=keep_prompt, port=BRIDGE_PORT, model=model, max_steps=request.max_steps
        )
        argv, env = adapter.continue_command(traj, launch)
        env = {**env, **request.agent_env}
        assert traj.cwd
        logger.debug("agent command: %s", argv)
        handle = box.start_exec(argv, workdir=traj.cwd, env=env)
        status, heard = _watch(handle, bridge, request, idle_timeout_s, on_event)
        result = handle.result(timed_out=False)
        if bridge.mismatch is not None:
            status = "bridge_refused"  # refused, and the CLI gave up on its own
        counters = bridge.counters.model_copy()
        _traffic(bridge, heard, on_event)
        log = b"".join(orjson.dumps(e.model_dump()) + b"\n" for e in bridge.log)
        mismatch = bridge.mismatch
        refusals = list(bridge.refusals)
        refused_by = bridge.refused_by
        gate_notes = list(gate.notes)
        gate_verdict: GateVerdict = (
            "refused"
            if refused_by == "gate"
            else ("accepted" if counters.main_requests or refused_by else "not_reached")
        )
    files = _write_outputs(out, result.stdout, result.stderr, log)
    # the adapter reads the continued session from a copy of the home that follows no link and holds
    # no special file: the container could write anything there
    after = out / ".home-after"
    copy_untrusted(home, after, links="skip", limits=limits, what="the agent home", holes="count")
    try:
        files.update(adapter.finish_continuation(Ended(traj, rebuild, launch, after, out / "continued", box)))
    finally:
        shutil.rmtree(after, ignore_errors=True)
    if status is None:
        continued = out / "continued"
        status = (
            adapter.reported_status(traj, result.stdout, continued)
            if result.exit_code == 0
            else "agent_error"
        )
    logger.debug("agent ended: %s (exit %s), %d request(s)", status, result.exit_code, counters.main_requests)
    on_event(AgentEnded(status, counters.main_requests, time.monotonic() - started))
    condition: InputCondition = "boundary_user_prompt_appended" if keep_prompt else "replayed_boundary_only"
    check = None
    if before is not None:
        after_state = oracle.workspace_state(workspace, limits)
        cut = oracle.cut_of(before, after_state)
        now = oracle.outcome(
            status,
            oracle.workspace_changes(before.entries, after_state.entries),
            oracle.session_state(out / "continued"),
            cut,
        )
        if tape is not None and player is not None:
            assert request.cassette is not None
            check = _replayed(
                tape, request.cassette, player, now, mismatch if refused_by == "cassette" else None, adapter
            )
        elif recorder is not None:
            assert request.record_cassette is not None
            origin = cassette.origin_of(
                traj, load_pins().agents[adapter.name].version, after_step, rebuild.expected_prefix, condition
            )
            check = _recorded(request.record_cassette, origin, recorder, counters.upstream_errors, now, key)
        if cut is not None and check is not None:  # said where the user reads the verdict
            check = check.model_copy(update={"notes": [*check.notes, cut]})
    return ContinuationResult(
        input_condition=condition,
        cassette=check,
        gate=gate_verdict,
        gate_notes=gate_notes,
        mismatch=mismatch,
        agent_status=status,
        agent_exit_code=result.exit_code,
        mock=mock.is_mock(request.upstream),
        steps_used=counters.main_requests,
        model=model,
        counters=counters,
        files=files,
        duration_s=time.monotonic() - started,
        metadata=adapter.continuation_metadata(launch, rebuild),
        refusals=refusals,
        leftovers=left,
    )


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
