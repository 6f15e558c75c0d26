"""`replayer compare`: one replay, a snapshot at the boundary, variants forked from it side by side, the
check in each run's container, compare.json, and report.html as headless Chromium renders it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from replayer.bridges.scripted import LoggedRequest, Script, ScriptedUpstream, TextBlock, ToolUseBlock, Turn
from replayer.sandboxes.docker import LABEL, SNAPSHOT_LABEL
from replayer.sandboxes.slots import SLOT_ROOT, mounted_under
from tests.conftest import CLAUDE, OPENHANDS, ROOT, replayer
from tests.support.chromium import render as _render
from tests.support.continuing import KEY, scripted

SESSION = CLAUDE.fixture("write_edit") / "session.jsonl"
WORKSPACE = CLAUDE.fixture("write_edit") / "workspace"
CHECK = "python3 hello.py | grep -qx 'hello, world'"
"""Passes once hello.py prints exactly `hello, world`; after step 3 of the recording it prints goodbye."""


def _fixer(name: str, greeting: str) -> Script:
    """One Bash call that rewrites hello.py to print `greeting`, then a final answer (per conversation)."""
    command = f"printf \"print('{greeting}')\\n\" > hello.py && ls -la"
    call = ToolUseBlock(id=f"toolu_{name}_1", name="Bash", input={"command": command, "description": "fix"})
    return Script(
        by_history=True,
        message_id_prefix=f"msg_{name}",
        turns=[
            Turn(blocks=[TextBlock(text="Fixing."), call]),
            Turn(blocks=[TextBlock(text=f"Done ({name}).")]),
        ],
    )


SCRIPTS = {"claude-good": _fixer("good", "hello, world"), "claude-bad": _fixer("bad", "hello world")}


def _compare(out: Path, upstream: ScriptedUpstream, *args: str) -> subprocess.CompletedProcess[str]:
    return replayer(
        "compare", str(SESSION), "-n", "3", "-w", str(WORKSPACE), "-o", str(out),
        "--upstream", upstream.url, *args, env={"ANTHROPIC_API_KEY": KEY},
    )  # fmt: skip


def _labelled(docker_client, label: str) -> list[str]:
    return [c.name for c in docker_client.containers.list(all=True, filters={"label": label})]


def _compare_id(result: dict) -> str:
    """A compare's id, which its containers' names carry (replayer-<compare id>-<run>): the engine is shared
    with other modules' compares."""
    run = next(r for r in result["runs"] if r["container"])
    return str(run["container"]).removeprefix("replayer-").rsplit("-", 1)[0]


def _snapshots(docker_client) -> list[str]:
    return [i.id for i in docker_client.images.list(filters={"label": SNAPSHOT_LABEL})]


def _slots() -> set[tuple[str, int]]:
    """The slots on this host and the mounts under each."""
    names = [p.name for p in SLOT_ROOT.iterdir()] if SLOT_ROOT.is_dir() else []
    return {(name, len(mounted_under(SLOT_ROOT / name))) for name in names}


@dataclass(frozen=True)
class Compared:
    out: Path
    stderr: str
    log: list[LoggedRequest]
    upstream_url: str


@pytest.fixture(scope="module")
def two_variants(tmp_path_factory: pytest.TempPathFactory) -> Compared:
    """Two variants, two repeats each, with a check: one compare shared by the tests that read its output."""
    out = tmp_path_factory.mktemp("two-variants") / "cmp"
    with scripted("claude_code", Script(turns=[]), expected_key=KEY, by_model=SCRIPTS) as upstream:
        proc = _compare(
            out, upstream, "--variant", "good=model=claude-good", "--variant", "bad=model=claude-bad",
            "--repeat", "2", "--workers", "2", "--check", CHECK,
        )  # fmt: skip
        log = [r for r in upstream.log if r.main_thread]
    assert proc.returncode == 0, proc.stderr
    return Compared(out, proc.stderr, log, upstream.url)


@pytest.mark.agent
def test_two_variants_two_repeats_one_replay_and_the_report_shows_it(
    two_variants: Compared, tmp_path: Path, docker_client
) -> None:
    out, log = two_variants.out, two_variants.log
    result = orjson.loads((out / "compare.json").read_bytes())
    # one replay of the prefix, its divergences in the ordinary result directory
    replay = orjson.loads((out / "replay" / "result.json").read_bytes())
    assert replay["after_step"] == 3 and replay["continuation"] is None
    assert result["divergences"] == {"exact": 3}
    # at the boundary the check fails (hello.py prints goodbye); the snapshot kept exactly that workspace
    assert result["boundary_check"]["passed"] is False and result["boundary_check"]["exit_code"] == 1
    assert "print('goodbye')" in (out / "snapshot" / "workspace" / "hello.py").read_text()
    expected = orjson.loads((out / "replay" / "expected_prefix.json").read_bytes())
    runs = {(r["variant"], r["repeat"]): r for r in result["runs"]}
    assert sorted(runs) == [("bad", 1), ("bad", 2), ("good", 1), ("good", 2)]
    for (name, _), run in runs.items():
        cont = run["continuation"]
        assert run["status"] == "ok", run["error"]
        assert (cont["gate"], cont["agent_status"], cont["steps_used"]) == ("accepted", "completed", 2)
        assert cont["model"] == f"claude-{name}"
        assert run["check"]["passed"] is (name == "good")
        assert run["pins"]["cli_version"] == result["pins"]["cli_version"]
        assert [e["role"] for e in run["timeline"]] == ["assistant", "tool", "assistant"]
        assert run["timeline"][2]["text"] == f"Done ({name})."
        greeting = "hello, world" if name == "good" else "hello world"
        assert f"+print('{greeting}')" in run["workspace_diff"]
        assert run["workspace_diff"].startswith(
            "diff a/hello.py b/hello.py\n--- a/hello.py\n+++ b/hello.py\n"
        )
        # every run's file system started at the boundary: its own copy, not another run's
        assert (out / run["dir"] / "state" / "workspace" / "hello.py").read_text() == f"print('{greeting}')\n"
        # forked by the pool, its workspace and home under a quota exactly where the replay's were
        assert run["fork_s"] >= 0 and run["state_disk_limited"] is replay["sandbox"]["state_disk_limited"]
    # the first `parallel` runs pre-started their container before the boundary (where slots can be
    # made: as root over a btrfs, like limited states); the later ones started after it, from the image
    paths = [(r["fork_path"], r["fork_fallback"]) for r in result["runs"]]
    ahead = ("prestarted", None) if replay["sandbox"]["state_disk_limited"] else ("cold", paths[0][1])
    late = ("cold", "the boundary was ready when the run's process started")
    assert paths == [ahead, ahead, late, late]
    # every run sent the rebuilt prefix first, to the model its variant names (4 runs x 2 requests)
    assert sorted(r.body["model"] for r in log) == ["claude-bad"] * 4 + ["claude-good"] * 4
    firsts = [r for r in log if len(r.body["messages"]) == len(expected) + 1]
    assert len(firsts) == 4
    assert result["reference_run"] == "good/1" and result["common_actions"] == 0
    assert [runs["good", 2]["first_difference"], runs["bad", 1]["first_difference"]] == [None, 0]
    summary = {v["name"]: v for v in result["variants"]}
    assert (summary["good"]["check_passed"], summary["good"]["check_pass_rate"]) == (2, 1.0)
    assert (summary["bad"]["check_passed"], summary["bad"]["check_pass_rate"]) == (0, 0.0)
    # tokens as the scripted upstream reported them: 100 in / 20 out per answer, 2 answers per run
    assert (summary["good"]["input_tokens"], summary["good"]["output_tokens"]) == (400, 80)
    assert summary["bad"]["agent_status"] == {"completed": 2} and summary["bad"]["steps_used"] == [2, 2]
    # containers and the snapshot image are gone; the key never reached a file
    assert _labelled(docker_client, f"{LABEL}.compare={_compare_id(result)}") == []
    assert result["snapshot_image"] not in _snapshots(docker_client)
    assert not [p for p in out.rglob("*") if p.is_file() and KEY.encode() in p.read_bytes()]

    html_text = (out / "report.html").read_text()
    assert "http://" not in html_text.replace(two_variants.upstream_url, "") and "https://" not in html_text
    assert ' src="' not in html_text and " href=" not in html_text and "url(" not in html_text
    dom, log_text = _render(out / "report.html", tmp_path)
    assert "Uncaught" not in log_text
    assert dom.find("main", id="report", data_rendered="yes")
    row = {e[1]["data-variant"]: e[2] for e in dom.find("td") if e[1].get("data-variant")}
    rate_row = [e for e in dom.find("tr") if e[1].get("data-row") == "check passed"][0][2]
    assert "2/2 (100%)" in rate_row and "0/2 (0%)" in rate_row
    assert set(row) == {"good", "bad"}
    for name, passes in (("good", True), ("bad", False)):
        column = [e for e in dom.find("div", class_="col") if e[1].get("data-variant") == name]
        assert len(column) == 1
        cards = [e for e in dom.find("div", class_="run") if e[1]["data-run"].startswith(name + "/")]
        assert len(cards) == 2
        for card in cards:
            assert ("check passed" in card[2]) is passes and (
                "check failed (exit 1)" in card[2]
            ) is not passes
            assert f"Done ({name})." in card[2] and "Bash(" in card[2]
        if not passes:
            assert all("differs from the reference run good/1 at action 1" in c[2] for c in cards)
    differs = dom.find("li", class_="differs")
    assert len(differs) == 2 and all("hello world" in d[2] for d in differs)
    assert (
        dom.find("p", class_="boundary-check")
        and "check failed (exit 1)" in dom.find("p", class_="boundary-check")[0][2]
    )
    # tool outputs keep their line breaks: `ls -la` as the agent saw it, one line a file
    outputs = sorted(e[2] for e in dom.find("pre", class_="tool-output"))
    tools = sorted(e["text"] for r in result["runs"] for e in r["timeline"] if e["role"] == "tool")
    assert outputs == tools and all(o.count("\n") >= 3 for o in outputs)
    assert all(any(line.endswith(" hello.py") for line in o.splitlines()) for o in outputs)
    # every run says the versions and the model it ran; no patch, so only the agent's edits
    pins = result["pins"]
    for name in ("good", "bad"):
        lines = [e[2] for e in dom.find("p", class_="versions") if f"model claude-{name}" in e[2]]
        assert (
            lines
            == [f"agent claude_code {pins['cli_version']}; replayer {pins['replayer']}; model claude-{name}"]
            * 2
        )
    header = dom.find("p", class_="versions")[0][2]
    ran = f"ran {result['version']['version']} (recorded, verified)"
    assert f"agent claude_code ({pins['cli_package']}) {ran}" in header
    assert not dom.find("details", class_="patch-diff")
    assert len([e for e in dom.find("details", class_="agent-diff") if "+print('hello" in e[2]]) == 4
    infra = [e for e in dom.find("tr") if e[1].get("data-row") == "infrastructure failures"][0]
    assert infra[2] == "infrastructure failures00"
    assert "none" in dom.find("div", id="degradations")[0][2]


@pytest.mark.agent
def test_view_of_a_compare_output_lists_its_replay_and_every_run(
    two_variants: Compared, tmp_path: Path
) -> None:
    """`replayer view` on the compare's folder: the index, each run linking to the compare's report."""
    import shutil

    copy = tmp_path / "cmp"
    shutil.copytree(two_variants.out, copy, symlinks=True)
    proc = replayer("view", str(copy), "--json")
    assert proc.returncode == 0, proc.stderr
    assert orjson.loads(proc.stdout)["runs"] == 5
    dom, log = _render(copy / "index.html", tmp_path)
    assert "Uncaught" not in log
    rows = [e for e in dom.find("tr") if "row" in e[1].get("class", "").split()]
    kinds = sorted(e[1]["data-kind"] for e in rows)
    assert kinds == ["compare run"] * 4 + ["replay"]
    outcomes = [e[2] for e in dom.find("td", class_="continuation") if e[2]]
    assert outcomes == ["completed (gate accepted)"] * 4
    paths = sorted(e[2] for e in dom.find("td", class_="path"))
    assert paths == ["replay", "runs/bad/1", "runs/bad/2", "runs/good/1", "runs/good/2"]
    links = sorted(e[1]["href"] for e in dom.find("a"))
    assert links == ["./replay/report.html"] + ["./report.html"] * 4
    assert (copy / "replay" / "report.html").is_file()


@pytest.mark.agent
def test_infrastructure_failures_are_counted_apart_and_trajectory_text_stays_text(
    two_variants: Compared, tmp_path: Path
) -> None:
    """The report of the module's compare, with one run's container lost, markup in a tool output and a
    degradation: the tally and the page from models, no container."""
    from replayer.floor.compare_results import CompareResult, RunRecord
    from replayer.floor.results import Degradation
    from replayer.verbs.compare import infrastructure_failure, summaries, with_differences
    from replayer.verbs.report import render_html

    result = CompareResult.model_validate_json((two_variants.out / "compare.json").read_bytes())
    hostile = "<script>document.title='owned'</script>\n<img src=x onerror=alert(1)>"
    runs = []
    for run in result.runs:
        if (run.variant, run.repeat) == ("bad", 2):
            run = RunRecord(
                variant="bad", repeat=2, status="failed", error_kind="sandbox",
                error="the container was killed", dir=run.dir, pins=run.pins,
            )  # fmt: skip
        elif (run.variant, run.repeat) == ("good", 1):
            timeline = [
                e.model_copy(update={"text": hostile}) if e.role == "tool" else e for e in run.timeline
            ]
            run = run.model_copy(update={"timeline": timeline})
        runs.append(run)
    runs, common, reference = with_differences(runs)
    tally = {v.name: v for v in summaries(result.request, runs)}
    # the lost run is neither a pass nor a fail of its variant: 0 of 1, not 0 of 2
    assert (tally["bad"].infrastructure_failures, tally["bad"].failed_runs, tally["bad"].check_pass_rate) == (
        1,
        1,
        0.0,
    )
    assert (tally["good"].infrastructure_failures, tally["good"].check_pass_rate) == (0, 1.0)
    lost = next(r for r in runs if r.status == "failed")
    assert lost.infrastructure_failure == "sandbox: the container was killed"
    # a patch that does not apply is the variant's own failure; a refused gate is the replayer's
    assert infrastructure_failure(lost.model_copy(update={"error_kind": "patch_failed"})) is None
    ok = next(r for r in runs if r.status == "ok")
    assert ok.continuation is not None and infrastructure_failure(ok) is None
    for gate, why in (
        ("refused", "the gate refused the rebuilt prefix"),
        ("accepted", "the cassette holds no such request"),
    ):
        cont = ok.continuation.model_copy(update={"agent_status": "bridge_refused", "gate": gate})
        assert (
            infrastructure_failure(ok.model_copy(update={"continuation": cont})) == f"bridge_refused: {why}"
        )
    degraded = Degradation(reason="Task call toolu_9 in step 2: not rerun", action="historical_kept", step=2)
    page = tmp_path / "report.html"
    page.write_text(
        render_html(
            result.model_copy(
                update={
                    "runs": runs,
                    "variants": list(tally.values()),
                    "common_actions": common,
                    "reference_run": reference,
                    "degradations": [degraded],
                }
            )
        )
    )
    dom, log = _render(page, tmp_path)
    assert "Uncaught" not in log and dom.find("main", id="report", data_rendered="yes")
    rate_row = [e for e in dom.find("tr") if e[1].get("data-row") == "check passed"][0][2]
    assert "2/2 (100%)" in rate_row and "0/1 (0%)" in rate_row
    infra_row = [e for e in dom.find("tr") if e[1].get("data-row") == "infrastructure failures"][0][2]
    assert infra_row == "infrastructure failures01"
    card = [e for e in dom.find("div", class_="run") if e[1]["data-run"] == "bad/2"][0]
    assert "infra" in card[1]["class"].split()
    assert (
        "infrastructure failure, not counted in the pass rate: sandbox: the container was killed" in card[2]
    )
    # the tool output's markup is text: no script ran (the title is the report's), no element was made
    assert [e[2] for e in dom.find("pre", class_="tool-output") if "owned" in e[2]] == [hostile]
    assert len(dom.find("script")) == 2 and dom.find("title")[0][2].startswith("compare: ")
    assert [e[2] for e in dom.find("li", class_="degradation")] == [f"historical_kept: {degraded.reason}"]


@pytest.mark.agent
def test_the_report_says_which_runs_the_mock_answered(two_variants: Compared, tmp_path: Path) -> None:
    """Runs whose continuation.mock is true are said to have had the mock's answers, in the header and on
    their cards; the others are not."""
    from replayer.floor.compare_results import CompareResult
    from replayer.verbs.report import render_html

    result = CompareResult.model_validate_json((two_variants.out / "compare.json").read_bytes())
    runs = [
        r.model_copy(update={"continuation": r.continuation.model_copy(update={"mock": True})})
        if r.variant == "good" and r.continuation
        else r
        for r in result.runs
    ]
    page = tmp_path / "report.html"
    page.write_text(render_html(result.model_copy(update={"runs": runs})))
    dom, log = _render(page, tmp_path)
    assert "Uncaught" not in log
    said = "the answers came from the built-in mock model (--upstream mock), not from a model service"
    mocked = sorted(f"{r.variant}/{r.repeat}" for r in runs if r.continuation and r.continuation.mock)
    assert mocked and len(mocked) < len(runs)
    assert [e[2] for e in dom.find("p", class_="mock")] == [f"runs {', '.join(mocked)}: {said}"]
    for card in dom.find("div", class_="run"):
        assert (said in card[2]) == (card[1]["data-run"] in mocked), card[1]["data-run"]


PATCH_OK = """--- a/hello.py
+++ b/hello.py
@@ -1,4 +1 @@
-def greet():
-    print('goodbye')
-
-greet()
+print('hello, world')
"""
PATCH_STALE = PATCH_OK.replace("goodbye", "hello")
"""Written against the recording's start, not the boundary: it does not apply there."""


@dataclass(frozen=True)
class Variants:
    out: Path
    stdout: str
    log: list[LoggedRequest]
    """The module upstream's main-thread requests."""
    moved: list[LoggedRequest]
    """The other upstream's (variant `elsewhere`)."""
    other: str
    """The other agent version (variant `other`)."""


HINT = "Please print hello, world."


@pytest.fixture(scope="module")
def variants(tmp_path_factory: pytest.TempPathFactory) -> Variants:
    """One compare whose variants the tests below read, three at a time: an environment patch that does not
    apply (`stale`), one that does (`patched`; `both`, the bad fix after it), the bad fix (`bad`), a boundary
    prompt (`hint`), another upstream (`elsewhere`), a step budget of one (`short`), the pinned version and
    another (`pinned`, `other`: the good fix). A model no script names gets `quiet`'s answer."""
    from replayer.floor.pins import load_pins

    root = tmp_path_factory.mktemp("variants")
    (root / "ok.diff").write_text(PATCH_OK)
    (root / "stale.diff").write_text(PATCH_STALE)
    other = load_pins().agents["claude_code"].also[0]
    hint = orjson.dumps({"prompt": HINT, "model": "claude-bad"}).decode()
    quiet = Script(by_history=True, turns=[Turn(blocks=[TextBlock(text="Nothing to do.")])])
    with (
        scripted("claude_code", quiet, expected_key=KEY, by_model=SCRIPTS) as upstream,
        scripted("claude_code", SCRIPTS["claude-good"], expected_key=KEY) as elsewhere,
    ):
        proc = _compare(
            root / "cmp", upstream, "--variant", f"stale=patch={root / 'stale.diff'}",
            "--variant", f"patched=patch={root / 'ok.diff'}", "--variant", "bad=model=claude-bad",
            "--variant", f"both=patch={root / 'ok.diff'},model=claude-bad", "--variant", f"hint={hint}",
            "--variant", f"elsewhere=upstream={elsewhere.url},model=claude-bad",
            "--variant", "short=max_steps=1,model=claude-bad", "--variant", "pinned=model=claude-good",
            "--variant", f"other=model=claude-good,version={other}", "--check", CHECK, "--workers", "3",
        )  # fmt: skip
        log = [r for r in upstream.log if r.main_thread]
        moved = [r for r in elsewhere.log if r.main_thread]
    assert proc.returncode == 0, proc.stderr
    return Variants(root / "cmp", proc.stdout, log, moved, other)


@pytest.mark.agent
def test_a_failing_run_never_stops_the_others_and_patches_apply_at_the_boundary(
    variants: Variants, tmp_path: Path, docker_client
) -> None:
    out = variants.out
    result = orjson.loads((out / "compare.json").read_bytes())
    runs = {r["variant"]: r for r in result["runs"]}
    assert runs["stale"]["status"] == "failed" and runs["stale"]["error_kind"] == "patch_failed"
    assert "does not apply" in runs["stale"]["error"] and runs["stale"]["continuation"] is None
    # the environment patch alone makes the check pass; the agent only answered
    assert runs["patched"]["status"] == "ok" and runs["patched"]["check"]["passed"] is True
    assert [e["text"] for e in runs["patched"]["timeline"]] == ["Nothing to do."]
    assert (
        "+print('hello, world')" in runs["patched"]["patch_diff"] and runs["patched"]["workspace_diff"] == ""
    )
    # the patch and the agent's edits apart: the agent's diff starts from the patched file, not the boundary's
    both = runs["both"]
    assert (
        both["patch_diff"] == runs["patched"]["patch_diff"] and "-    print('goodbye')" in both["patch_diff"]
    )
    assert "-print('hello, world')\n+print('hello world')" in both["workspace_diff"]
    assert "goodbye" not in both["workspace_diff"] and runs["bad"]["patch_diff"] is None
    assert not (out / both["dir"] / "patched-workspace").exists()
    assert runs["bad"]["status"] == "ok" and runs["bad"]["check"]["passed"] is False
    summary = {v["name"]: v for v in result["variants"]}
    assert summary["stale"]["failed_runs"] == 1 and summary["stale"]["check_pass_rate"] == 0.0
    assert "run stale/1: patch_failed: the patch" in variants.stdout
    assert _labelled(docker_client, f"{LABEL}.compare={_compare_id(result)}") == [], "this compare's only"
    dom, _ = _render(out / "report.html", tmp_path)
    stale = [e for e in dom.find("div", class_="run") if e[1]["data-run"] == "stale/1"]
    assert len(stale) == 1 and "failed" in stale[0][1]["class"].split()
    assert "run failed" in stale[0][2] and "patch_failed: the patch" in stale[0][2]
    patched = [e for e in dom.find("div", class_="run") if e[1]["data-run"] == "patched/1"][0]
    assert "check passed" in patched[2] and "+print('hello, world')" in patched[2]
    patch_diffs = {e[2] for e in dom.find("details", class_="patch-diff")}
    agent_diffs = {e[2] for e in dom.find("details", class_="agent-diff")}
    assert len(patch_diffs) == 1 and "+print('hello, world')" in patch_diffs.pop()
    # the bad fix's edits (bad's, hint's and short's alike) and both's, after the patch
    edits = [d for d in agent_diffs if "+print('hello world')" in d]
    assert len(edits) == 2 and any("-print('hello, world')" in d and "(after the patch)" in d for d in edits)


@pytest.mark.agent
def test_prompt_upstream_and_budget_variants(variants: Variants) -> None:
    hint, moved = HINT, variants.moved
    result = orjson.loads((variants.out / "compare.json").read_bytes())
    runs = {r["variant"]: r for r in result["runs"]}
    # the boundary prompt is kept: the first thing after the boundary is that user message
    hinted = runs["hint"]["continuation"]
    assert hinted["input_condition"] == "boundary_user_prompt_appended" and hinted["model"] == "claude-bad"
    assert runs["hint"]["timeline"][0]["role"] == "user" and hint in runs["hint"]["timeline"][0]["text"]
    # another upstream: the shared model name, but that service's answers (the good fix)
    assert len(moved) == 2 and runs["elsewhere"]["check"]["passed"] is True
    assert runs["elsewhere"]["continuation"]["input_condition"] == "replayed_boundary_only"
    # a step budget of one: the second request is held, the agent stopped
    short = runs["short"]["continuation"]
    assert (short["agent_status"], short["steps_used"], short["counters"]["held_requests"]) == (
        "max_steps",
        1,
        1,
    )
    assert {v["name"]: v["agent_status"] for v in result["variants"]}["short"] == {"max_steps": 1}


@pytest.mark.agent
@pytest.mark.serial  # it looks for any new snapshot image on the engine: other modules' compares make them
def test_ctrl_c_stops_every_run_and_removes_containers_and_snapshot(tmp_path: Path, docker_client) -> None:
    stalled = Script(by_history=True, turns=[Turn(blocks=[TextBlock(text="late")], stall_s=120)])
    out = tmp_path / "cmp"
    before = set(_snapshots(docker_client))
    slots = _slots()
    with scripted("claude_code", stalled, expected_key=KEY) as upstream:
        args = ["compare", str(SESSION), "-n", "3", "-w", str(WORKSPACE), "-o", str(out)]
        args += ["--upstream", upstream.url, "--variant", "a=", "--variant", "b=", "--repeat", "2"]
        proc = subprocess.Popen(
            [sys.executable, "-m", "replayer.cli", *args],
            env={**os.environ, "ANTHROPIC_API_KEY": KEY},
            cwd=ROOT,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + 120
            while sum(1 for r in upstream.log if r.main_thread) < 2:  # both parallel runs wait on the model
                assert time.monotonic() < deadline and proc.poll() is None, (
                    "the runs never reached the upstream"
                )
                time.sleep(0.2)
            job = next(tmp_path.glob(".cmp.partial-*/runs/a/1/job.json"))
            compare_id = orjson.loads(job.read_bytes())["compare_id"]
            # two runs going on, the next two made ready ahead of their turn (replayer/pipeline/forkpool.py)
            while len(_labelled(docker_client, f"{LABEL}.compare={compare_id}")) < 4:
                assert time.monotonic() < deadline, "the next runs' containers never started"
                time.sleep(0.2)
            assert len(_labelled(docker_client, f"{LABEL}.compare={compare_id}")) == 4
        finally:
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "replayer: interrupted"
    assert _labelled(docker_client, f"{LABEL}.compare={compare_id}") == []
    assert set(_snapshots(docker_client)) <= before
    assert not out.exists() and not list(tmp_path.glob(".cmp.partial-*"))
    # the pre-started runs' slots unmounted and gone with them (sandboxes/slots.py)
    assert _slots() <= slots


@pytest.mark.agent
@pytest.mark.serial  # gc removes every container and snapshot of the replayer, other tests' too
def test_kept_snapshot_is_labelled_and_gc_removes_it(tmp_path: Path, docker_client) -> None:
    with scripted("claude_code", Script(turns=[]), expected_key=KEY, by_model=SCRIPTS) as upstream:
        proc = _compare(tmp_path / "cmp", upstream, "--variant", "good=model=claude-good", "--keep-snapshot")
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads((tmp_path / "cmp" / "compare.json").read_bytes())
    assert result["snapshot_kept"] and result["snapshot_image"] in _snapshots(docker_client)
    # the snapshot holds the boundary's file system outside the mounts: a container from it runs
    assert (
        docker_client.containers.run(result["snapshot_image"], ["true"], remove=True, network_mode="none")
        == b""
    )
    gc = orjson.loads(replayer("gc", "--json", check=True).stdout)
    assert gc["removed_images"] and result["snapshot_image"] not in _snapshots(docker_client)


@pytest.mark.parametrize(
    ("variant", "message"),
    [
        ("nonsense", "expected NAME=SPEC"),
        ("a=colour=red", "unknown key 'colour'"),
        ("a=max_steps=many", "max_steps"),
    ],
)
def test_malformed_variants_are_usage_errors(variant: str, message: str, tmp_path: Path) -> None:
    proc = replayer("compare", str(SESSION), "-n", "3", "-w", str(WORKSPACE), "-o", str(tmp_path / "o"),
                    "--upstream", "http://127.0.0.1:9", "--variant", variant)  # fmt: skip
    assert proc.returncode == 2 and message in proc.stderr
    assert "Traceback" not in proc.stderr and not (tmp_path / "o").exists()


@pytest.mark.agent
@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--variant", "a=", "--variant", "a=model=x"], 3, "variant names must be unique"),
        (["--variant", "a=version=0.0.1"], 10, "claude_code 0.0.1 is not in the npm registry"),
        (["--variant", "a=patch=/nonexistent.diff"], 3, "is not a readable file"),
        (["--variant", "a=", "--upstream", ""], 2, "no upstream"),
    ],
)
def test_refusals_come_before_any_container(
    args: list[str], code: int, message: str, tmp_path: Path, docker_client
) -> None:
    base = ["compare", str(SESSION), "-n", "3", "-w", str(WORKSPACE), "-o", str(tmp_path / "o")]
    proc = replayer(*base, "--upstream", "http://127.0.0.1:9", *args, env={"ANTHROPIC_API_KEY": KEY})
    assert proc.returncode == code, proc.stderr
    assert message in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists() and not list(tmp_path.glob(".o.partial-*"))


def test_without_the_key_nothing_starts(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    proc = subprocess.run(
        [sys.executable, "-m", "replayer.cli", "compare", str(SESSION), "-n", "3", "-w", str(WORKSPACE),
         "-o", str(tmp_path / "o"), "--upstream", "http://127.0.0.1:9", "--variant", "a="],
        capture_output=True, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 4 and "ANTHROPIC_API_KEY is not set" in proc.stderr
    assert not (tmp_path / "o").exists()


def _bash_turn(tool: str, arguments: dict[str, str]) -> Script:
    call = ToolUseBlock(id="call_cmp_1", name=tool, input=arguments)
    return Script(
        by_history=True,
        model="fake-model",
        turns=[Turn(blocks=[call]), Turn(blocks=[TextBlock(text="Made it.")])],
    )


AGENTS = {
    "openhands_v0": (OPENHANDS.root / "v0" / "trajectory.json", OPENHANDS.root / "v0" / "workspace", 1,
                     _bash_turn("execute_bash", {"command": "echo made > made.txt", "security_risk": "LOW"}),
                     ["--model", "openai/fake-model"]),
}  # fmt: skip
"""The agents whose compare this module runs: every other agent's is test_fanout's (Codex's at its first
boundary of `compare -n a,b`; mini-swe-agent's, OpenCode's, OpenHands V1's and Pi's from the cassette their
standalone continuation recorded, offline), each checked by `made_in_every_run`."""


@pytest.mark.agent
@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_every_agent_that_continues_compares(agent: str, tmp_path: Path) -> None:
    source, workspace, after_step, script, extra = AGENTS[agent]
    # one run: the repeats are the fork pool's, whose runs started ahead Claude Code's two variants' two
    # repeats prove (`two_variants`); here the agent's own continuation, check and timeline in a fork
    out = tmp_path / "cmp"
    with scripted(agent, script, expected_key=KEY) as upstream:
        proc = replayer(
            "compare", str(source), "-n", str(after_step), "-w", str(workspace), "-o", str(out),
            "--upstream", upstream.url, "--variant", "shared=", "--check", "test -f made.txt",
            *extra, env={"OPENAI_API_KEY": KEY},
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    made_in_every_run(out, agent)


def made_in_every_run(out: Path, agent: str) -> None:
    """`agent`'s compare in `out` (one variant, `--check "test -f made.txt"`, each run's agent writing made.txt
    with its shell tool): the check fails at the boundary and passes in every run, each run's timeline (read
    from its continued session) shows the call, its workspace diff the file, its tokens in the agent's
    protocol; every run started ahead of the boundary where slots can be made. (Every agent's but OpenHands
    V0's compare is test_fanout's, `AGENTS`.)"""
    result = orjson.loads((out / "compare.json").read_bytes())
    repeat = len(result["runs"])
    assert result["agent"] == agent and result["boundary_check"]["passed"] is False
    for run in result["runs"]:
        assert run["status"] == "ok", run["error"]
        assert run["continuation"]["gate"] == "accepted", run["continuation"]["mismatch"]
        assert run["check"]["passed"] is True and run["first_difference"] is None
        assert "+made" in run["workspace_diff"]
        calls = [c for e in run["timeline"] for c in e["tool_calls"]]
        assert calls and "made.txt" in calls[0]["arguments"]
    # every run started ahead of the boundary, its container pre-started and given the boundary's
    # own file-system changes (where slots can be made: as root over a btrfs, like limited states)
    if orjson.loads((out / "replay" / "result.json").read_bytes())["sandbox"]["state_disk_limited"]:
        assert [(r["fork_path"], r["fork_fallback"]) for r in result["runs"]] == [
            ("prestarted", None)
        ] * repeat
    summary = result["variants"][0]
    assert summary["check_pass_rate"] == 1.0 and len(summary["steps_used"]) == repeat
    # the scripted upstream reports 100 in / 20 out per answer, in each protocol's own place
    answers = sum(summary["steps_used"])
    assert (summary["input_tokens"], summary["output_tokens"]) == (100 * answers, 20 * answers)


@pytest.mark.agent
def test_an_agent_version_variant_continues_with_that_version(variants: Variants) -> None:
    from replayer.floor.pins import load_pins

    pin, other, out = load_pins().agents["claude_code"], variants.other, variants.out
    versions = sorted({r.headers.get("user-agent", "").split(" ")[0] for r in variants.log})
    assert versions == sorted({f"claude-cli/{pin.version}", f"claude-cli/{other}"})
    result = orjson.loads((out / "compare.json").read_bytes())
    runs = {r["variant"]: r for r in result["runs"] if r["variant"] in ("pinned", "other")}
    assert (
        runs["pinned"]["pins"]["cli_version"] == pin.version and runs["other"]["pins"]["cli_version"] == other
    )
    for run in runs.values():
        assert run["continuation"]["gate"] == "accepted", run["continuation"]["mismatch"]
        assert run["check"]["passed"] is True
    # the replay itself ran the pinned version
    assert orjson.loads((out / "replay" / "result.json").read_bytes())["pins"]["cli_version"] == pin.version
