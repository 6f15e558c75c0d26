"""`replayer export --format chat`: one record per prefix of every landed agent, with the tool definitions
the pinned CLI sent on the wire and provenance; loadable with `datasets`; secrets redacted and counted."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from replayer.adapters import recorded_tools
from replayer.pipeline.engine import load
from tests.conftest import CLAUDE, CODEX, MINI, OPENCODE, replayer
from tests.support import batches
from tests.support.batches import every_source_batch, every_source_records


def _batch_and_export(tmp_path: Path, manifest: Path) -> tuple[Path, list[dict]]:
    replayer("batch", "--trust-manifest", str(manifest), "-o", str(tmp_path / "out"), "-j", "2", check=True)
    records = tmp_path / "records.jsonl"
    replayer("export", str(tmp_path / "out"), "--format", "chat", "-o", str(records), check=True)
    return records, [orjson.loads(line) for line in records.read_bytes().splitlines()]


@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A batch of every boundary of every recorded source, made once for the test run (test_batch.py reads
    it too); its count."""
    out, summary = every_source_batch(tmp_path_factory)
    return out, summary["jobs"]


@pytest.fixture(scope="module")
def chat(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """That batch exported in the chat form, once for the test run (test_batch.py compares a resumed batch's
    export with it)."""
    return every_source_records(tmp_path_factory)


@pytest.mark.docker  # an OpenCode import runs in a sandbox
def test_every_prefix_is_a_record_that_datasets_loads(batch: tuple[Path, int], chat: Path) -> None:
    import datasets

    _, expected = batch
    path = chat
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    assert len(records) == expected
    table = datasets.load_dataset("json", data_files=str(path), split="train")
    assert table.num_rows == expected and {"messages", "tools", "metadata"} <= set(table.column_names)
    by_agent = {r["metadata"]["agent"]: r for r in records if r["metadata"]["boundary"] == 1}
    claude, codex = by_agent["claude_code"], by_agent["codex"]
    mini_tools = {
        r["metadata"]["source_sha256"]: r["tools"]
        for r in records
        if r["metadata"]["agent"] == "mini_swe_agent"
    }
    lengths = sorted(len(t) for t in mini_tools.values())
    assert len(lengths) >= 3 and lengths[-1] == 1 and set(lengths[:-1]) == {0}, (
        "bash in tool-call mode only (not text, not 1.x)"
    )
    assert {t["function"]["name"] for t in claude["tools"]} >= {"Bash", "Read", "Edit", "Write"}
    assert [t["function"]["name"] for t in codex["tools"]][:2] == ["exec_command", "write_stdin"]
    assert "apply_patch" in {t["function"]["name"] for t in codex["tools"]}
    assert all(r["metadata"]["pinned_version"] for r in records)
    assert all(m["role"] in ("system", "user", "assistant", "tool") for r in records for m in r["messages"])
    # the chat form keeps every call paired with its result
    for record in records:
        calls = [c["id"] for m in record["messages"] for c in m.get("tool_calls") or []]
        results = [m["tool_call_id"] for m in record["messages"] if m["role"] == "tool"]
        assert calls == results, record["metadata"]
    texts = {r["metadata"]["source_sha256"] for r in records if not r["tools"]}
    assert texts, "text-mode mini-swe-agent trajectories offer no tools"
    # mini-swe-agent 1.x's CLI sent its request without tools: kept, so that no export runs it again
    from replayer.adapters.tool_definitions import NoTools, no_tools_path

    ones = {
        r["metadata"]["agent_version"]: r["metadata"]["tools"]
        for r in records
        if r["metadata"]["agent_version"] in ("1.17.5", "1.15.0")
    }
    assert set(ones) == {"1.17.5", "1.15.0"}, ones
    for version, tools in ones.items():
        kept = NoTools.model_validate_json(no_tools_path("mini_swe_agent", version).read_bytes())
        assert (
            tools["source"] == "pinned_fallback" and tools["note"] == f"mini_swe_agent {version}: {kept.why}"
        )


def test_tool_definitions_are_the_ones_the_cli_sent() -> None:
    sent = next(r for r in reversed(CLAUDE.requests("parallel")) if r["body"].get("tools"))["body"]["tools"]
    assert recorded_tools("claude_code", "2.1.197") == sent
    codex_sent = orjson.loads((CODEX.fixture("exec") / "upstream.jsonl").read_bytes().splitlines()[-1])[
        "body"
    ]["tools"]
    assert recorded_tools("codex", "0.171.0") == codex_sent
    mini_sent = orjson.loads((MINI.fixture("toolcall") / "upstream.jsonl").read_bytes().splitlines()[-1])[
        "body"
    ]["tools"]
    assert recorded_tools("mini_swe_agent", "2.4.6") == mini_sent


def test_a_version_whose_cli_sends_no_tools_is_not_run_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A capture that found the version's CLI offering no tools (mini-swe-agent 1.x, text-based) is kept, so
    the next export gives the same note without running that CLI: here its bundle is not even installed (an
    empty bundle cache), so only the kept finding can say it. One kept by another replayer is not read."""
    from replayer.adapters.tool_definitions import NoTools, keep_no_tools, no_tools_path
    from replayer.floor import settings
    from replayer.floor.release import __version__
    from replayer.verbs.tool_capture import source_for

    monkeypatch.setenv("REPLAYER_BUNDLES", str(tmp_path))
    settings.forget()
    try:
        assert "is not installed" in str(source_for("mini_swe_agent", "1.17.5").note)
        why = "mini_swe_agent 1.17.5 sent no request with tools (gate accepted, agent max_steps)"
        kept = NoTools(
            agent="mini_swe_agent",
            version="1.17.5",
            why=why,
            replayer=__version__,
            probe="p",
            captured_at="t",
        )
        keep_no_tools(kept.model_copy(update={"replayer": "0.0.1"}))
        assert "is not installed" in str(source_for("mini_swe_agent", "1.17.5").note)
        keep_no_tools(kept)
        assert no_tools_path("mini_swe_agent", "1.17.5").parent == tmp_path / "tool-definitions"
        found = source_for("mini_swe_agent", "1.17.5")
        assert (found.source, found.note) == ("pinned_fallback", f"mini_swe_agent 1.17.5: {why}")
    finally:
        settings.forget()  # read once per process: the next tests read the real bundle cache


def test_secrets_are_redacted_and_counted(tmp_path: Path) -> None:
    secret = "sk-ant-api03-" + "Q" * 40
    doc = json.loads((MINI.fixture("toolcall") / "trajectory.traj.json").read_text())
    doc["messages"][3]["content"] = doc["messages"][3]["content"].replace(
        "README.md", f"key {secret} at https://bob:hunter2@example.com/x"
    )
    traj = tmp_path / "secret.traj.json"
    traj.write_text(json.dumps(doc, indent=2))
    path, records = _batch_and_export(
        tmp_path, batches.manifest(tmp_path, [{"trajectory": str(traj), "boundaries": [1]}])
    )
    assert secret.encode() not in path.read_bytes() and b"hunter2" not in path.read_bytes()
    assert records[0]["metadata"]["redactions"] == 2
    assert "[REDACTED]" in records[0]["messages"][3]["content"]


@pytest.mark.docker  # an OpenCode import runs in a sandbox
def test_atif_records_are_valid_v1_7_trajectories(
    batch: tuple[Path, int], chat: Path, tmp_path: Path
) -> None:
    import datasets

    from tests.support.atif import Trajectory

    out, expected = batch
    path = tmp_path / "atif.jsonl"
    replayer("export", str(out), "--format", "atif", "-o", str(path), check=True)
    trajectories = [Trajectory.model_validate_json(line) for line in path.read_bytes().splitlines()]
    assert len(trajectories) == expected
    assert {t.agent.name for t in trajectories} == {
        "claude_code",
        "codex",
        "mini_swe_agent",
        "opencode",
        "pi",
    }
    calls = sum(len(s.tool_calls or []) for t in trajectories for s in t.steps)
    results = sum(len(s.observation.results) for t in trajectories for s in t.steps if s.observation)
    assert calls == results > 0, "every call is answered in its own step"
    assert all(s.is_copied_context for t in trajectories for s in t.steps)
    assert datasets.load_dataset("json", data_files=str(path), split="train").num_rows == expected
    for line, trajectory in zip(chat.read_bytes().splitlines(), trajectories, strict=True):
        record = orjson.loads(line)
        assert trajectory.trajectory_id == record["metadata"]["job"], "the same order in both formats"
        assert (trajectory.extra or {})["sandbox_replayer"] == record["metadata"]


@pytest.mark.agent
def test_continued_jobs_export_the_prefix_and_what_followed(tmp_path: Path) -> None:
    from replayer.bridges.scripted import Script, ScriptedUpstream, TextBlock, Turn
    from tests.conftest import CLAUDE
    from tests.support.continuing import KEY

    sources = [
        (CLAUDE.fixture("parallel") / "session.jsonl", CLAUDE.fixture("parallel") / "workspace"),
        (CODEX.fixture("exec") / "rollout.jsonl", CODEX.fixture("exec") / "workspace"),
        (MINI.fixture("toolcall") / "trajectory.traj.json", MINI.fixture("toolcall") / "workspace"),
        (OPENCODE.fixture("tools") / "export.json", OPENCODE.fixture("tools") / "workspace"),
    ]
    script = Script(turns=[Turn(blocks=[TextBlock(text="All done here.")], repeat=True)])
    with ScriptedUpstream(script, expected_key=KEY) as upstream:
        options = {"upstream": upstream.url, "max_steps": 1, "upstream_key_env": "EXPORT_TEST_KEY"}
        options["agent_env"] = {"CLAUDE_CODE_MAX_RETRIES": "0", "MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT": "1"}
        lines = [
            {
                "trajectory": str(t),
                "boundaries": [1],
                "mode": "continue",
                "workspace": str(w),
                "continuation": options,
            }
            for t, w in sources
        ]
        manifest = batches.manifest(tmp_path, lines)
        proc = replayer(
            "batch",
            "--trust-manifest",
            str(manifest),
            "-o",
            str(tmp_path / "out"),
            "-j",
            "1",
            "--json",
            "--trust-manifest",  # ours: it names the upstream and the key variable
            env={"EXPORT_TEST_KEY": KEY},
        )
        assert proc.returncode == 0, proc.stderr
        assert orjson.loads(proc.stdout)["done"] == 4
    path = tmp_path / "records.jsonl"
    replayer("export", str(tmp_path / "out"), "-o", str(path), check=True)
    from replayer import adapters

    for line in path.read_bytes().splitlines():
        record = orjson.loads(line)
        meta = record["metadata"]
        job = tmp_path / "out" / "jobs" / meta["job"]
        expected = orjson.loads((job / "expected_prefix.json").read_bytes())
        prefix = adapters.by_name(meta["agent"]).dialect().to_chat(expected)
        assert meta["mode"] == "continue" and meta["continuation"]["steps_used"] == 1, meta
        assert meta["continuation"]["prefix_messages"] == len(prefix)
        assert record["messages"][: len(prefix)] == prefix, meta["agent"]
        assert len(record["messages"]) > len(prefix), "the continuation follows the prefix"
        assert KEY not in line.decode()


def test_export_refusals_are_one_line(tmp_path: Path) -> None:
    not_batch = replayer("export", str(tmp_path), "-o", str(tmp_path / "x.jsonl"))
    assert not_batch.returncode == 3, not_batch.stderr
    assert "neither a result directory nor a batch directory" in not_batch.stderr
    assert len(not_batch.stderr.strip().splitlines()) == 1 and not (tmp_path / "x.jsonl").exists()
    unknown = replayer("export", str(tmp_path), "--format", "parquet", "-o", str(tmp_path / "x.jsonl"))
    assert unknown.returncode == 2 and "unknown format 'parquet'" in unknown.stderr


def _prepared_export(tmp_path: Path, trajectory: Path, fmt: str = "chat", **env: str) -> tuple[dict, dict]:
    """The one record and the summary of exporting a prepared boundary of `trajectory`."""
    replayer(
        "prepare",
        str(trajectory),
        "--after-step",
        "1",
        "--out",
        str(tmp_path / "prep"),
        "--force",
        check=True,
    )
    out = tmp_path / f"{fmt}.jsonl"
    proc = replayer(
        "export", str(tmp_path / "prep"), "--format", fmt, "-o", str(out), "--json", "--force", env=env
    )
    assert proc.returncode == 0, proc.stderr
    return orjson.loads(out.read_bytes()), orjson.loads(proc.stdout)


@pytest.mark.agent
def test_a_session_of_an_older_version_is_exported_with_that_versions_tools(tmp_path: Path) -> None:
    """Claude Code 2.0.64's session: its own CLI's definitions (Glob, Grep, TodoWrite), captured once from
    that version's bundle in the sandbox and cached; not the pinned version's (Agent, CronCreate...)."""
    from replayer import installer
    from replayer.adapters import tool_definitions

    installer.ensure("claude_code", "2.0.64")  # the project's own install (a no-op when it is there)
    cache = tool_definitions.cache_path("claude_code", "2.0.64")
    cache.unlink(missing_ok=True)
    record, summary = _prepared_export(tmp_path, CLAUDE.fixture("versions/2.0.64/probe") / "session.jsonl")
    names = {t["function"]["name"] for t in record["tools"]}
    assert {"Glob", "Grep", "TodoWrite", "Bash"} <= names and not {"CronCreate", "Workflow"} & names
    session = CLAUDE.fixture("versions/2.0.64/probe") / "session.jsonl"
    model = load(session)[0].default_model(load(session)[1])  # the CLI is captured talking to it
    assert model and record["metadata"]["tools"] == {
        "version": "2.0.64",
        "source": "captured",
        "model": model,
    }
    assert summary["pinned_tools"] == 0
    captured = tool_definitions.CapturedTools.model_validate_json(cache.read_bytes())
    assert (captured.agent, captured.version, captured.model) == ("claude_code", "2.0.64", model)
    assert captured.probe.startswith("claude_code/versions/2.0.64/")
    # once: the next export reads the cache (the capture's time stays), ATIF says the same version
    atif, _ = _prepared_export(tmp_path, CLAUDE.fixture("versions/2.0.64/probe") / "session.jsonl", "atif")
    assert (
        tool_definitions.CapturedTools.model_validate_json(cache.read_bytes()).captured_at
        == captured.captured_at
    )
    assert atif["agent"]["version"] == "2.0.64"
    assert {t["function"]["name"] for t in atif["agent"]["tool_definitions"]} == names


def test_without_the_recording_versions_bundle_the_pinned_tools_stand_in_and_say_so(tmp_path: Path) -> None:
    """Codex 0.58.0's session with no bundle of 0.58.0 (an empty bundle cache): the pinned set, recorded."""
    from replayer.floor.pins import pinned_version

    (tmp_path / "bundles").mkdir()
    trajectory = CODEX.fixture("versions/0.58.0/probe") / "rollout.jsonl"
    record, summary = _prepared_export(tmp_path, trajectory, REPLAYER_BUNDLES=str(tmp_path / "bundles"))
    tools = record["metadata"]["tools"]
    assert tools["source"] == "pinned_fallback" and tools["version"] == pinned_version("codex")
    assert (
        "codex@0.58.0 is not installed" in tools["note"] and record["metadata"]["agent_version"] == "0.58.0"
    )
    assert summary["pinned_tools"] == 1
    assert [t["function"]["name"] for t in record["tools"]][:2] == ["exec_command", "write_stdin"]
    assert not list((tmp_path / "bundles").iterdir())  # nothing was installed or cached


@pytest.mark.agent
def test_a_continuation_is_the_agents_own_and_the_prefix_alone_is_copied_context(tmp_path: Path) -> None:
    """ATIF: the prefix's steps are copied context (Harbor: not for training), the continuation's are not,
    and `agent.version` is the version that ran it (here not the recorded one, nor the pin); the chat
    record states the same split. Validated by Harbor's validator (tests/support/atif.py)."""
    from tests.support.atif import Trajectory

    turns = tmp_path / "turns.json"
    call = {"type": "tool_use", "id": "call_own_1", "name": "Bash", "input": {"command": "echo own"}}
    turns.write_bytes(orjson.dumps({"turns": [{"blocks": [{"type": "text", "text": "Mine."}, call]}]}))
    single = CLAUDE.fixture("single")
    out = tmp_path / "out"
    replayer(
        *("run", str(single / "session.jsonl"), "-n", "1", "-w", str(single / "workspace"), "-o", str(out)),
        *("--agent-version", "2.1.196", "--continue", "--upstream", f"mock:{turns}"),
        check=True,
    )
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["version"]["version"] == "2.1.196" and result["continuation"]["agent_status"] == "completed"
    atif_path, chat_path = tmp_path / "atif.jsonl", tmp_path / "chat.jsonl"
    replayer("export", str(out), "--format", "atif", "-o", str(atif_path), check=True)
    replayer("export", str(out), "-o", str(chat_path), check=True)
    trajectory = Trajectory.model_validate_json(atif_path.read_bytes())
    chat = orjson.loads(chat_path.read_bytes())
    copied = chat["metadata"]["copied_context_messages"]
    assert copied == chat["metadata"]["continuation"]["prefix_messages"]
    assert chat["metadata"]["agent_messages"] == len(chat["messages"]) - copied > 0
    assert chat["metadata"]["ran_version"] == "2.1.196"
    flags = [s.is_copied_context for s in trajectory.steps]
    split = flags.index(False)
    assert flags == [True] * split + [False] * (len(flags) - split), flags
    own = trajectory.steps[split:]
    assert [c.function_name for s in own for c in s.tool_calls or []] == ["Bash"]
    assert any(s.source == "agent" and s.message == "Mine." for s in own)
    assert "own" in str([r.content for s in own if s.observation for r in s.observation.results])
    assert not any(
        c.tool_call_id == "call_own_1" for s in trajectory.steps[:split] for c in s.tool_calls or []
    )
    assert trajectory.agent.version == "2.1.196"
    model = result["continuation"]["model"]
    assert model and {s.model_name for s in own if s.source == "agent"} == {model}
    assert all(s.model_name is None for s in trajectory.steps[:split])


def test_a_recorded_version_that_is_no_release_names_no_file_the_export_reads(tmp_path: Path) -> None:
    """A results folder is someone else's: its `agent_version` is put in the paths of the tool definitions the
    export looks up, so one that is no release (`../..`) finds none of them, and the pinned set stands in."""
    from replayer.verbs import tool_capture

    planted = tmp_path / "planted"
    planted.mkdir()
    (planted / "tools.json").write_bytes(b"[]")
    hostile = "../" * 12 + str(planted).lstrip("/")
    found = tool_capture.source_for("claude_code", hostile)
    assert found.source == "pinned_fallback" and "is not a release" in (found.note or "")
