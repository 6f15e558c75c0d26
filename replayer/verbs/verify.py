"""`replayer verify AGENT@VERSION`: record a short probe session with that version's real CLI against a
built-in scripted model, check it, and store the verdict. A passing verdict makes the version verified.

The probe starts from one of the suite's recordings, by the newest version not newer than VERSION, cut
after its first tool batch (each agent's CLI can only resume a session, and a recording needs one to
start from):
1. the head is rerun at VERSION and continued through the gate: the gate checks VERSION's first request,
   which says which tools VERSION offers, and the scripted model's answers then call those tools (a shell
   command, a file read where VERSION has a read tool, a failing command; the script is made from that
   first request, in the same run): VERSION runs them and writes its own native session;
2. that session is replayed at VERSION once, and continued through the gate at every boundary (each
   forked from the replay's snapshot there, as `run -n 1,2,3 --continue` does): every observation must
   come back exact (or normalized-equal), and every gate must accept.
"""

from __future__ import annotations

import datetime
import itertools
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict

from replayer.adapters import REGISTRY, Adapter, adapter_class, by_name
from replayer.adapters.base import COMMAND, PATH, filled
from replayer.bridges.request_tools import tool_names
from replayer.bridges.scripted import LoggedRequest, Script, TextBlock, ToolUseBlock, Turn
from replayer.floor.determinism import Determinism
from replayer.floor.errors import PlanRefused, ReplayError
from replayer.floor.pins import release
from replayer.floor.release import __version__ as REPLAYER_VERSION
from replayer.floor.requests import ContinueRequest, ReplayRequest
from replayer.floor.results import ReplayResult
from replayer.floor.verdicts import Check, Verdict
from replayer.verbs.repeat import check_repeats, repeated, reruns_of

SHIPPED = Path(__file__).resolve().parents[1] / "data" / "probes"
"""The probe recordings a wheel carries (setup.py copies them there from tests/fixtures)."""
FIXTURES = SHIPPED if SHIPPED.is_dir() else Path(__file__).resolve().parents[2] / "tests" / "fixtures"
PROBE_KEY_ENV = "REPLAYER_PROBE_KEY"
PROBE_KEY = "sk-replayer-probe"
PROMPT = "Run the replayer's probe."
FILE = "probe.txt"


class VerifyFailed(ReplayError):
    """The probe ran, and a check failed: the version stays unverified."""

    exit_code = 11
    kind = "verify_failed"


class Probe(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    recording: str
    """A recording the probe can start from, under tests/fixtures (in a wheel: replayer/data/probes)."""
    native: str
    version: str
    """The version that recorded it (its meta.json)."""


# the probe's script ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ProbeScript:
    turns: list[Turn]
    """The probe's turns, the final one last."""
    final: list[Turn]
    """The final turn alone (what each boundary's continuation answers)."""
    finishing: bool
    """The final turn is an action the agent runs (a step of the session), not a text answer."""


def probe_script(adapter: Adapter, version: str, offered: list[str], cwd: str) -> ProbeScript:
    """The probe writes a file with a shell command, reads it (with the version's read tool when it has
    one), and runs a failing command; then it finishes (with the agent's finish tool or submit command
    when it has one, else with a text answer)."""
    commands = [f"printf 'probe\\nline 2\\n' > {FILE} && ls", f"cat {FILE}", f"wc -l {FILE}; exit 3"]
    submit = [adapter.probe_submit] if adapter.probe_submit else []
    shell = next((name for name in adapter.probe_shell if name in offered), None)
    if shell is None:  # actions written in the text
        texts = [adapter.probe_text_action(version, i, c) for i, c in enumerate([*commands, *submit])]
        if any(t is None for t in texts) or not submit:
            tools = ", ".join(adapter.probe_shell) or "none declared"
            raise PlanRefused(
                f"no probe for {adapter.name} {version}: it offers none of its shell tools ({tools})"
            )
        turns = [
            Turn(blocks=[TextBlock(text=t)], stall_s=adapter.answer_pause_s) for t in texts if t is not None
        ]
        return ProbeScript(turns=turns, final=turns[-1:], finishing=True)
    read = next((name for name in adapter.probe_read if name in offered), None)

    def call(call_id: str, command: str) -> ToolUseBlock:
        return ToolUseBlock(
            id=call_id, name=shell, input=filled(adapter.probe_shell[shell], COMMAND, command)
        )

    steps: list[Turn] = []
    for n, command in enumerate(commands, 1):
        block = call(f"call_probe_{n}", command)
        if n == 2 and read is not None:
            block = ToolUseBlock(
                id=block.id, name=read, input=filled(adapter.probe_read[read], PATH, f"{cwd}/{FILE}")
            )
        steps.append(Turn(blocks=[*adapter.probe_items(n), TextBlock(text=f"Probe step {n}."), block]))
    finish = adapter.probe_finish
    if finish is not None and finish[0] in offered:
        final = Turn(blocks=[ToolUseBlock(id="call_probe_finish", name=finish[0], input=dict(finish[1]))])
    elif submit:
        final = Turn(blocks=[call("call_probe_submit", submit[0])])
    else:
        final = Turn(blocks=[TextBlock(text="The probe is done.")])
    turns = [*steps, final]
    for each in turns:
        each.stall_s = adapter.answer_pause_s
    return ProbeScript(turns=turns, final=[final], finishing=isinstance(final.blocks[0], ToolUseBlock))


# the run --------------------------------------------------------------------------------------------
def probe_for(agent: str, version: str) -> Probe:
    """A recording of the same minor line if there is one, else of any version: the newest not newer
    than `version`, else the oldest. The head the version resumes is then as close to its own format as
    the suite's recordings allow."""
    adapter = _probed(agent)
    assert adapter.probe_native is not None
    found = []
    for pattern in adapter.probe_recordings:
        for folder in sorted(FIXTURES.glob(pattern)):
            meta = orjson.loads((folder / "meta.json").read_bytes())
            rel = str(folder.relative_to(FIXTURES))
            found.append(Probe(recording=rel, native=adapter.probe_native, version=meta["cli_version"]))
    if not found:
        raise PlanRefused(f"the probe recordings of {agent} are not in {FIXTURES}")
    found.sort(key=lambda p: release(p.version))
    same = [p for p in found if release(p.version)[:2] == release(version)[:2]]  # the same minor line first
    pool = same or found
    older = [p for p in pool if release(p.version) <= release(version)]
    return older[-1] if older else pool[0]


def _probed(agent: str) -> Adapter:
    """The adapter of `agent`, which declares a probe."""
    probed = [name for name in REGISTRY if adapter_class(name).probe_native is not None]
    if agent not in probed:
        raise PlanRefused(f"no probe for agent {agent!r} (known: {', '.join(sorted(probed))})")
    return by_name(agent)


def _request(
    adapter: Adapter,
    version: str,
    workspace: Path,
    out: Path,
    trajectory: Path,
    after: int,
    upstream: str,
    prompt: str | None,
    max_steps: int = 12,
    model: str | None = None,
) -> ReplayRequest:
    """A run of `trajectory` at `version` to `after`, continued against the probe's scripted model at
    `upstream` (named `model`; None: the one the trajectory records)."""
    os.environ[PROBE_KEY_ENV] = PROBE_KEY
    cont = ContinueRequest(
        upstream=upstream,
        upstream_key_env=PROBE_KEY_ENV,
        boundary_prompt=prompt,
        max_steps=max_steps,
        idle_timeout_s=120,
        model=model or adapter.probe_model,
    )
    return ReplayRequest(
        mode="run",
        trajectory=trajectory,
        after_step=after,
        out=out,
        workspace=workspace,
        agent_version=version,
        continuation=cont,
    )


def _replay(
    adapter: Adapter,
    version: str,
    workspace: Path,
    out: Path,
    trajectory: Path,
    after: int,
    script: Script,
    prompt: str | None,
    max_steps: int = 12,
    model: str | None = None,
) -> tuple[ReplayResult, list[LoggedRequest]]:
    """Replay `trajectory` at `version` to `after` and continue it against the probe's scripted model."""
    from replayer.pipeline.engine import execute

    with adapter.scripted_upstream(script, expected_key=PROBE_KEY) as upstream:
        request = _request(
            adapter, version, workspace, out, trajectory, after, upstream.url, prompt, max_steps, model
        )
        result = execute(request)
    return result, upstream.log


def _every_boundary(
    adapter: Adapter,
    version: str,
    workspace: Path,
    root: Path,
    trajectory: Path,
    boundaries: list[int],
    final: list[Turn],
) -> dict[int, ReplayResult]:
    """`trajectory` replayed once at `version` and continued at each of `boundaries` (each forked from its
    snapshot, `run -n a,b --continue`; result in `root`/boundary-K), every continuation answered with
    `final` (by its own conversation: the forks share the scripted model)."""
    from replayer.pipeline.engine import execute_many

    script = Script(turns=final, by_history=True)
    outs = {k: root / f"boundary-{k}" for k in boundaries}
    with adapter.scripted_upstream(script, expected_key=PROBE_KEY) as upstream:
        last = boundaries[-1]
        request = _request(adapter, version, workspace, outs[last], trajectory, last, upstream.url, None)
        outcomes = execute_many(request, outs)
    results = {}
    for k in boundaries:
        outcome = outcomes[k]
        if isinstance(outcome, ReplayError):
            raise outcome
        results[k] = outcome
    return results


def first_request(
    agent: str, version: str, work: Path | None = None, model: str | None = None
) -> tuple[Probe, ReplayResult, Any]:
    """The probe's first step alone: the head recording continued at `version` with a bare answer (the
    CLI talking to `model`, default the recording's), and the body of the first main-thread request
    `version`'s CLI sent (None if it sent none)."""
    probe = probe_for(agent, version)
    source = FIXTURES / probe.recording
    with tempfile.TemporaryDirectory(prefix="replayer-tools-", dir=work) as tmp:
        ready = Script(turns=[], final_text="Ready.")
        result, log = _replay(
            by_name(agent), version, source / "workspace", Path(tmp) / "gate", source / probe.native, 1, ready,
            PROMPT, max_steps=1, model=model,
        )  # fmt: skip
    return probe, result, next((r.body for r in log if r.main_thread), None)


def _record(
    adapter: Adapter, version: str, source: Path, out: Path, head: Path
) -> tuple[ReplayResult, Any, ProbeScript | None]:
    """The head recording rerun at `version` and continued against the probe, whose script is made from the
    tools the CLI's first main request offers (one run both asks what the version offers and records the
    probe): the result, that request's body (None: none came) and the script (None: no request came)."""
    from replayer.pipeline.engine import execute, load

    cwd = load(head)[1].cwd or "/"
    made: list[ProbeScript] = []
    failed: list[Exception] = []
    answered = itertools.count()

    def answer(body: Any) -> Turn:
        if not made and not failed:
            try:
                made.append(probe_script(adapter, version, tool_names(body), cwd))
            except Exception as exc:  # raised after the run, as before it when the script came first
                failed.append(exc)
        n = next(answered)
        turns = made[0].turns if made else []
        return turns[n] if n < len(turns) else Turn(blocks=[TextBlock(text="Done.")])

    with adapter.scripted_upstream(Script(turns=[]), expected_key=PROBE_KEY, closing=answer) as upstream:
        request = _request(adapter, version, source / "workspace", out, head, 1, upstream.url, PROMPT)
        result = execute(request)
    if failed:
        raise failed[0]
    main = next((r.body for r in upstream.log if r.main_thread), None)
    return result, main, made[0] if made else None


def verify(agent: str, version: str, work: Path | None = None, repeats: int = 1) -> Verdict:
    """Run the probe at `version` and return its verdict (`verdicts.store` keeps it). With `repeats` > 1,
    the probe session's longest prefix is rerun that many times in fresh containers (the last boundary's
    replay is the first) and the verdict holds its determinism rate."""
    check_repeats(repeats)
    probe = probe_for(agent, version)
    adapter = by_name(agent)
    source = FIXTURES / probe.recording
    checks: list[Check] = []
    with tempfile.TemporaryDirectory(prefix="replayer-verify-", dir=work) as tmp:
        root = Path(tmp)

        recorded, main, script = _record(adapter, version, source, root / "record", source / probe.native)
        checks.append(_gate("the head recording's prefix through the gate", recorded))
        offered = tool_names(main)
        if not checks[0].passed or script is None:  # no request answered: no tools, nothing recorded
            return verdict_of(agent, version, probe, checks, offered, [], [])
        checks.append(_continued("probe recorded by the version's own CLI", recorded))
        session = _continued_native(root / "record", recorded)
        boundaries: list[int] = []
        rate: Determinism | None = None
        if session is not None:
            from replayer.pipeline.engine import load

            steps = len(load(session)[1].steps)
            finishing = script.finishing
            expected = len(script.turns) + (1 if finishing else 0)
            detail = f"{steps - 1} step(s) after the head's 1, expected {expected - 1}"
            checks.append(Check(name="every probe call ran", passed=steps == expected, detail=detail))
            boundaries = list(range(1, steps if finishing else steps + 1))
            kept = root / "probe" / session.name
            kept.parent.mkdir()
            _copy(session, kept)
            results = (
                _every_boundary(adapter, version, source / "workspace", root, kept, boundaries, script.final)
                if boundaries
                else {}
            )
            for k in boundaries:
                checks.append(_continued(f"boundary {k}: gate and continuation", results[k]))
                checks.append(_exact(f"boundary {k}: reruns", results[k]))
            if repeats > 1 and boundaries:
                last = boundaries[-1]
                rate = repeated(results[last].request, reruns_of(root / f"boundary-{last}"), repeats, root)
        else:
            checks.append(Check(name="the version's own probe session", passed=False, detail="not written"))
    return verdict_of(agent, version, probe, checks, offered, script.turns, boundaries, rate)


def verdict_of(
    agent: str,
    version: str,
    probe: Probe,
    checks: list[Check],
    offered: list[str],
    turns: list[Turn],
    boundaries: list[int],
    rate: Determinism | None = None,
) -> Verdict:
    """The verdict: passed when every check passed and at least two boundaries were replayed."""
    return Verdict(
        agent=agent,
        version=version,
        replayer=REPLAYER_VERSION,
        passed=all(c.passed for c in checks) and len(boundaries) >= 2,
        probe=f"{probe.recording} ({probe.version})",
        tools_offered=offered,
        probe_tools=sorted({b.name for t in turns for b in t.blocks if isinstance(b, ToolUseBlock)}),
        boundaries=boundaries,
        checks=checks,
        determinism=rate,
        checked_at=datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    )


def not_verified(verdicts: list[Verdict]) -> VerifyFailed | None:
    """The error for the failed verdicts among `verdicts`, naming the first one's first failed check."""
    bad = [v for v in verdicts if not v.passed]
    if not bad:
        return None
    check = next((c for c in bad[0].checks if not c.passed), None)
    why = f"{check.name}: {check.detail}" if check else "fewer than two boundaries were replayed"
    names = ", ".join(f"{v.agent}@{v.version}" for v in bad)
    return VerifyFailed(f"{names} not verified ({why})")


def _continued(name: str, result: ReplayResult) -> Check:
    cont = result.continuation
    if cont is None:
        return Check(name=name, passed=False, detail="no continuation ran")
    if cont.gate != "accepted" or cont.agent_status != "completed":
        where = f" at {cont.mismatch.path}" if cont.mismatch else ""
        return Check(name=name, passed=False, detail=f"gate {cont.gate}{where}, agent {cont.agent_status}")
    return Check(name=name, passed=True, detail=f"gate accepted, {cont.steps_used} request(s)")


def _gate(name: str, result: ReplayResult) -> Check:
    cont = result.continuation
    if cont is None or cont.gate != "accepted":
        where = f" at {cont.mismatch.path}" if cont and cont.mismatch else ""
        return Check(name=name, passed=False, detail=f"gate {cont.gate if cont else 'not run'}{where}")
    return Check(name=name, passed=True, detail="gate accepted")


def _exact(name: str, result: ReplayResult) -> Check:
    off = [d for d in result.divergences if d.status not in ("exact", "normalized_equal")]
    if off or result.degradations:
        first = off[0] if off else None
        detail = f"step {first.step} {first.tool}: {first.status}" if first else "degraded"
        return Check(name=name, passed=False, detail=detail)
    kinds = sorted({d.status for d in result.divergences})
    return Check(name=name, passed=True, detail=f"{len(result.divergences)} call(s): {', '.join(kinds)}")


def _continued_native(out: Path, result: ReplayResult) -> Path | None:
    files = result.continuation.files if result.continuation else {}
    for key in ("continued_session", "continued_rollout", "continued_trajectory", "continued_conversation"):
        if key in files:
            return out / files[key]
    return None


def _copy(source: Path, dest: Path) -> None:
    if source.is_dir():
        shutil.copytree(source, dest, symlinks=True)
    else:
        shutil.copyfile(source, dest)
