"""The command as a user meets it, without Docker: `--version`, errors that say their cause, `export` that
never overwrites silently, one vocabulary across flags, variant keys and manifest fields, help without
type placeholders and with examples, shell completion."""

from __future__ import annotations

import os
from pathlib import Path

import orjson
import pytest
import typer.main
from typer.testing import CliRunner

from replayer.cli import app
from replayer.floor.errors import AgentError, BridgeRefused, continuation_failure
from replayer.floor.pins import load_pins
from replayer.floor.release import __version__
from replayer.floor.results import BridgeCounters, ContinuationResult, GateMismatch
from replayer.verbs.batch_manifest import ManifestEntry
from replayer.verbs.variants import parse_variant
from tests.conftest import CLAUDE, MINI, replayer

MINI_TRAJECTORY = MINI.fixture("toolcall") / "trajectory.traj.json"
SESSION = CLAUDE.fixture("write_edit") / "session.jsonl"
WORKSPACE = CLAUDE.fixture("write_edit") / "workspace"


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    return lines[0]


# --version ---------------------------------------------------------------------------------------
def test_version_prints_the_replayer_and_every_pinned_agent() -> None:
    proc = replayer("--version", check=True)
    lines = proc.stdout.splitlines()
    assert lines[0] == f"replayer {__version__}"
    for agent, pin in load_pins().agents.items():
        assert any(line.split()[:2] == [agent, pin.version] for line in lines), (agent, proc.stdout)


# errors with the cause ---------------------------------------------------------------------------
def _continuation(
    status: str, mismatch: GateMismatch | None = None, exit_code: int | None = 1
) -> ContinuationResult:
    return ContinuationResult(
        input_condition="replayed_boundary_only",
        gate="refused" if mismatch else "accepted",
        mismatch=mismatch,
        agent_status=status,  # type: ignore[arg-type]
        agent_exit_code=exit_code,
        steps_used=0 if mismatch else 1,
        model="m",
        counters=BridgeCounters(),
        files={"agent_stdout": "agent/stdout.jsonl", "agent_stderr": "agent/stderr.log"},
        duration_s=1.0,
    )


def test_a_refused_continuation_says_the_gates_first_difference_as_values() -> None:
    mismatch = GateMismatch(path="messages[2].content[1].content", expected="2 a.txt\n", actual="3 a.txt\n")
    error = continuation_failure(_continuation("bridge_refused", mismatch), Path("runs/x"))
    assert isinstance(error, BridgeRefused) and error.exit_code == 8
    assert str(error) == (
        "the first main-thread request does not carry the rebuilt prefix at messages[2].content[1].content: "
        'expected "2 a.txt\\n", got "3 a.txt\\n" (see runs/x/result.json, continuation.mismatch)'
    )


def test_a_json_value_keeps_its_quotes() -> None:
    mismatch = GateMismatch(path="input[7]", expected='{"type":"message"}', actual='{"type":"reasoning"}')
    message = str(continuation_failure(_continuation("bridge_refused", mismatch), Path("o")))
    assert 'at input[7]: expected "{"type":"message"}", got "{"type":"reasoning"}" (see' in message


def test_a_difference_deep_in_a_long_value_is_shown_where_it_is() -> None:
    same = "line\n" * 200
    mismatch = GateMismatch(path="input[3].output", expected=same + "old tail" * 40, actual=same + "new tail")
    message = str(continuation_failure(_continuation("bridge_refused", mismatch), Path("o")))
    assert 'expected "…line\\nline\\n' in message and "old tail" in message and "new tail" in message
    assert "\n" not in message and len(message) < 400, message


def test_a_failed_agent_says_its_last_stderr_line() -> None:
    stderr = b"starting\n\x1b[31mError: 401 Unauthorized (the key is not valid)\x1b[0m\n\n  \n"
    error = continuation_failure(_continuation("agent_error"), Path("runs/x"), stderr, b'{"type": "x"}\n')
    assert isinstance(error, AgentError) and error.exit_code == 9
    assert str(error) == (
        "the continued agent failed (exit 1): 'Error: 401 Unauthorized (the key is not valid)' "
        "(see runs/x/agent/stderr.log)"
    )


@pytest.mark.parametrize(
    ("last", "says"),
    [
        (  # Claude Code's stream-json end of a run the upstream broke (as it printed it, shortened)
            b'{"type":"result","subtype":"success","is_error":true,"api_error_status":502,"num_turns":1,'
            b'"result":"API Error: 502 upstream unreachable: ServerDisconnectedError.","usage":{}}',
            "'API Error: 502 upstream unreachable: ServerDisconnectedError.'",
        ),
        (b'{"type":"turn.failed","error":{"message":"stream disconnected"}}', "'stream disconnected'"),
        (b'{"type":"x","count":3}', '\'{"type":"x","count":3}\''),
        (b"plain text", "'plain text'"),
    ],
)
def test_a_failed_agent_without_stderr_says_its_last_output_line(last: bytes, says: str) -> None:
    stdout = b'{"type": "turn.started"}\n' + last + b"\n"
    error = continuation_failure(_continuation("agent_error", exit_code=0), Path("o"), b"\n", stdout)
    assert str(error) == f"the continued agent failed (exit 0): {says} (see o/agent/stdout.jsonl)"


def test_a_failed_agent_that_wrote_nothing_says_so() -> None:
    silent = continuation_failure(_continuation("agent_error", exit_code=None), Path("o"))
    assert str(silent) == "the continued agent failed (no exit code) and wrote nothing (see o/agent)"


@pytest.mark.parametrize("status", ["completed", "max_steps", "idle_timeout"])
def test_an_ordinary_end_is_no_error(status: str) -> None:
    assert continuation_failure(_continuation(status), Path("o"), b"Error: x\n") is None


def test_an_error_quoting_brackets_prints_them_as_text() -> None:
    proc = replayer("inspect", "/nonexistent/[/x] [bold]y.jsonl")
    assert proc.returncode == 3
    assert _one_line(proc.stderr) == "replayer: bad_input: /nonexistent/[/x] [bold]y.jsonl does not exist"


# inspect shows what each call acts on ------------------------------------------------------------
def test_inspect_shows_each_calls_command_or_path_so_a_boundary_is_picked_without_json() -> None:
    from tests.conftest import CODEX

    proc = replayer("inspect", str(CODEX.fixture("exec") / "rollout.jsonl"), env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    rows = {line.split("│")[1].strip(): line for line in proc.stdout.splitlines() if line.count("│") > 3}
    assert "main argument" in proc.stdout and "cat a.txt" in rows["1"], proc.stdout


@pytest.mark.parametrize(
    ("arguments", "shown"),
    [
        ({"command": "ls -la\n  && pwd", "description": "list"}, "ls -la && pwd"),
        ({"command": ["bash", "-lc", "cat a.txt"]}, "bash -lc cat a.txt"),
        ({"file_path": "/testbed/a.txt", "limit": 5}, "/testbed/a.txt"),
        ({"command": "view", "path": "/workspace/x.py"}, "view /workspace/x.py"),
        ({"pattern": "def main", "path": "src"}, "def main src"),
        ({"subject": "Look at a.txt"}, "Look at a.txt"),
        ({"timeout": 5}, "-"),
        ({"command": "x" * 100}, "x" * 59 + "…"),
    ],
)
def test_a_calls_main_argument_is_one_short_line(arguments: dict, shown: str) -> None:
    from replayer.cli.inspect import main_argument

    assert main_argument(arguments) == shown


# export never overwrites silently ---------------------------------------------------------------
def test_export_refuses_an_existing_file_unless_forced(tmp_path: Path) -> None:
    prefix, records = tmp_path / "prefix", tmp_path / "records.jsonl"
    replayer("prepare", str(MINI_TRAJECTORY), "-n", "1", "-o", str(prefix), check=True)
    records.write_bytes(b"yesterday's records\n")
    again = replayer("export", str(prefix), "--format", "atif", "-o", str(records))
    assert again.returncode == 7
    assert _one_line(again.stderr) == f"replayer: output: {records} exists (--force replaces it)"
    assert records.read_bytes() == b"yesterday's records\n"
    forced = replayer("export", str(prefix), "--format", "atif", "-o", str(records), "--force", "--json")
    assert forced.returncode == 0, forced.stderr
    assert orjson.loads(records.read_bytes())["schema_version"] == "ATIF-v1.7"
    result = (prefix / "result.json").read_bytes()
    refused = replayer("export", str(prefix), "-o", str(prefix / "result.json"), "--force")
    assert refused.returncode == 7 and "is a file of the exported" in _one_line(refused.stderr)
    assert (prefix / "result.json").read_bytes() == result


# one vocabulary -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("spec", "same_as"),
    [
        ("boundary_prompt=Run the tests first.", "prompt=Run the tests first."),
        ("boundary-prompt=Run the tests first.", "prompt=Run the tests first."),
        ("upstream_key_env=MY_KEY", "key_env=MY_KEY"),
        ("upstream-key-env=MY_KEY", "key_env=MY_KEY"),
        ("agent_env.RETRIES=0,agent-env.DEBUG=1", "env.RETRIES=0,env.DEBUG=1"),
        ("agent_version=2.0.64", "version=2.0.64"),
        ("idle-timeout=30,max-steps=4", "idle_timeout=30,max_steps=4"),
        ('{"boundary_prompt": "hi", "agent_env": {"A": "1"}}', '{"prompt": "hi", "agent_env": {"A": "1"}}'),
        ('{"upstream-key-env": "K", "env": {"A": "1"}}', "upstream_key_env=K,env.A=1"),
    ],
)
def test_variant_keys_are_the_flag_names_too(spec: str, same_as: str) -> None:
    assert parse_variant(f"v={spec}") == parse_variant(f"v={same_as}")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("prompt=a,boundary_prompt=b", "prompt is given twice"),
        ("colour=red", "unknown key 'colour' (known: agent_version (version), model, boundary_prompt"),
        ('{"colour": "red"}', "unknown key 'colour'"),
        ("agent_env=A", "unknown key 'agent_env'"),
        ("[1]", "expected key=value"),
    ],
)
def test_variant_key_mistakes_say_what_is_known(spec: str, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_variant(f"v={spec}")
    assert message in str(caught.value)


def _compare(*args: str) -> tuple[int, str]:
    """compare up to its first refusal without a key (exit 4): every option was accepted by then."""
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    base = ["compare", str(SESSION), "-n", "3", "-w", str(WORKSPACE), "-o", "/nonexistent/o"]
    proc = replayer(*base, "--upstream", "http://127.0.0.1:9", *args, env=env)
    return proc.returncode, proc.stderr


def test_compare_takes_workers_as_batch_does() -> None:
    for option in ("-j", "--workers"):
        code, err = _compare("--variant", "a=boundary-prompt=hi,agent_env.X=1", option, "3")
        assert code == 4 and "ANTHROPIC_API_KEY is not set" in err, (option, err)
    code, err = _compare("--variant", "a=", "--parallel", "4")
    assert code == 2 and "No such option: --parallel" in err, "one name for one thing"
    code, err = _compare("--variant", "a=", "-j", "0")
    assert code == 2 and "'--workers' / '-j'" in err


def test_the_manifest_mode_run_is_replay() -> None:
    assert ManifestEntry.model_validate({"trajectory": "t", "mode": "run"}).mode == "replay"
    assert ManifestEntry.model_validate({"trajectory": "t", "mode": "replay"}).mode == "replay"


@pytest.mark.parametrize(
    ("mode", "message"),
    [("run", "mode replay needs an existing workspace"), ("walk", "manifest line 1: mode: Input should be")],
)
def test_a_manifest_says_run_as_the_verb_does(mode: str, message: str, tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.jsonl"
    manifest.write_text(orjson.dumps({"trajectory": str(MINI_TRAJECTORY), "mode": mode}).decode() + "\n")
    proc = replayer("batch", "--trust-manifest", str(manifest), "-o", str(tmp_path / "out"))
    assert proc.returncode == 3 and message in _one_line(proc.stderr)


# help and completion ------------------------------------------------------------------------------
def _verbs(group: object = None, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    group = group or typer.main.get_command(app)
    found = []
    for name, cmd in getattr(group, "commands", {}).items():
        found += _verbs(cmd, (*path, name)) if hasattr(cmd, "commands") else [(*path, name)]
    return found


def test_help_has_no_type_placeholders_and_every_verb_has_examples() -> None:
    """The root and `compare` through the console entry point; every other verb through the same app in
    this process (a process each would cost the suite seconds)."""
    verbs = _verbs()
    assert {("run",), ("compare",), ("batch",), ("export",), ("bundles", "add")} <= set(verbs)
    helps = {v: CliRunner().invoke(app, [*v, "--help"], prog_name="replayer").output for v in verbs}
    helps[()] = replayer("--help", check=True).stdout
    helps[("compare",)] = replayer("compare", "--help", check=True).stdout
    for verb, text in helps.items():
        for placeholder in ("<bool>", "<str>", "<list", "<float>", "<int>"):
            assert placeholder not in text, (verb, placeholder)
        lines = [line.strip() for line in text.splitlines()]
        if verb:
            first = lines[lines.index("Examples:") + 1]
            assert f"{first} ".startswith(f"replayer {' '.join(verb)} "), (verb, first)
    assert "--install-completion" in helps[()] and "--version" in helps[()]
    for verb in ("compare", "batch"):  # one name for one thing
        assert "--workers" in helps[(verb,)] and "-j" in helps[(verb,)], verb
        assert "--parallel" not in helps[(verb,)], verb


def test_shell_completion_completes_verbs_and_options() -> None:
    # the script click prints for bash by name (--show-completion guesses the shell from the parent process)
    script = replayer(env={"_REPLAYER_COMPLETE": "source_bash"}, check=True).stdout
    assert "complete -o default -F _replayer_completion replayer" in script
    env = {"_REPLAYER_COMPLETE": "complete_bash", "COMP_WORDS": "replayer comp", "COMP_CWORD": "1"}
    assert replayer(env=env, check=True).stdout.split() == ["compare"]
    env = {"_REPLAYER_COMPLETE": "complete_bash", "COMP_WORDS": "replayer compare --worke", "COMP_CWORD": "2"}
    assert replayer(env=env, check=True).stdout.split() == ["--workers"]


# progress and logging ------------------------------------------------------------------------------
def test_verbose_logs_the_pipeline_and_without_it_stderr_stays_empty(tmp_path: Path) -> None:
    args = ["prepare", str(SESSION), "-n", "2"]
    plain = replayer(*args, "-o", str(tmp_path / "plain"), check=True)
    assert plain.stderr == ""  # not a terminal: no progress either
    verbose = replayer(*args, "-o", str(tmp_path / "verbose"), "-v", check=True)
    assert f"prepare {SESSION} after step 2" in verbose.stderr
    assert "plan: claude_code" in verbose.stderr and f"wrote {tmp_path / 'verbose'}" in verbose.stderr
    assert (
        " DEBUG replayer.pipeline.engine: " in verbose.stderr
        and verbose.stdout.splitlines()[0] == plain.stdout.splitlines()[0]
    )
    quiet_json = replayer(*args, "-o", str(tmp_path / "json"), "--json", "-q", check=True)
    assert orjson.loads(quiet_json.stdout)["after_step"] == 2 and quiet_json.stderr == ""
