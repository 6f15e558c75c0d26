"""Every refusal is a one-line error with its documented exit code, and leaves no output behind."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.conftest import CLAUDE, replayer
from tests.support.sessions import patched_session

SESSION = str(CLAUDE.fixture("parallel") / "session.jsonl")
WORKSPACE = str(CLAUDE.fixture("parallel") / "workspace")


def _refused(proc, code: int, needle: str, out: Path | None = None) -> None:
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout
    if out is not None:
        assert not out.exists()
        assert not list(out.parent.glob(f".{out.name}.partial-*"))


def _without_last_result(tmp_path: Path) -> Path:
    """The recorded parallel session cut before its last tool result, as an interrupted run leaves it."""
    lines = (CLAUDE.fixture("parallel") / "session.jsonl").read_bytes().splitlines()
    cut = max(i for i, line in enumerate(lines) if b"toolu_parallel_03" in line and b'"tool_result"' in line)
    path = tmp_path / "interrupted.jsonl"
    path.write_bytes(b"\n".join(lines[:cut]) + b"\n")
    return path


def test_not_a_trajectory(tmp_path: Path) -> None:
    junk = tmp_path / "notes.txt"
    junk.write_text("hello\nworld\n")
    _refused(replayer("inspect", str(junk)), 3, "not a trajectory of a known agent")


def test_unknown_json_format(tmp_path: Path) -> None:
    other = tmp_path / "other.jsonl"
    other.write_bytes(orjson.dumps({"type": "event", "payload": {}}) + b"\n")
    _refused(
        replayer("prepare", str(other), "-n", "1", "-o", str(tmp_path / "o")),
        3,
        "unknown format",
        tmp_path / "o",
    )


def test_missing_trajectory(tmp_path: Path) -> None:
    _refused(replayer("inspect", str(tmp_path / "nope.jsonl")), 3, "does not exist")


def test_boundary_beyond_the_last_batch(tmp_path: Path) -> None:
    out = tmp_path / "o"
    _refused(replayer("prepare", SESSION, "-n", "3", "-o", str(out)), 4, "beyond the last step (2", out)


def test_boundary_that_would_split_a_batch(tmp_path: Path) -> None:
    path = _without_last_result(tmp_path)
    out = tmp_path / "o"
    _refused(replayer("prepare", str(path), "-n", "1", "-o", str(out)), 4, "would split step 1", out)
    proc = replayer("inspect", str(path), "--json", check=True)
    steps = orjson.loads(proc.stdout)["steps"]
    assert steps[0]["complete"] is False
    assert [c["has_observation"] for c in steps[0]["calls"]] == [True, True, False]
    # the boundary before the incomplete batch is fine
    replayer("prepare", str(path), "-n", "0", "-o", str(out), check=True)


@pytest.mark.agent
def test_unknown_tool_is_refused_then_degraded_on_request(tmp_path: Path) -> None:
    session = str(CLAUDE.fixture("mixed_tools") / "session.jsonl")
    ws = str(CLAUDE.fixture("mixed_tools") / "workspace")
    out = tmp_path / "o"
    _refused(replayer("run", session, "-n", "2", "-w", ws, "-o", str(out)), 4, "unknown tool 'WebFetch'", out)
    replayer("run", session, "-n", "2", "-w", ws, "-o", str(out), "--allow-degraded", check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["degradations"] == [
        {
            "action": "historical_kept",
            "call_id": "toolu_mixed_tools_02",
            "reason": "unknown tool 'WebFetch' in step 2 (call toolu_mixed_tools_02)",
            "step": 2,
            "tool": "WebFetch",
        }
    ]
    statuses = [(d["tool"], d["kind"], d["status"]) for d in result["divergences"]]
    assert statuses == [("TaskCreate", "pure", "historical_kept"), ("WebFetch", "unknown", "historical_kept")]


def test_a_version_outside_the_pins_is_prepared_and_said_unverified(tmp_path: Path) -> None:
    lines = (CLAUDE.fixture("single") / "session.jsonl").read_bytes().splitlines()
    path = tmp_path / "old.jsonl"
    path.write_bytes(
        b"\n".join(line.replace(b'"version":"2.1.197"', b'"version":"2.0.1"') for line in lines) + b"\n"
    )
    out = tmp_path / "o"
    replayer("prepare", str(path), "-n", "1", "-o", str(out), check=True)
    result = orjson.loads((out / "result.json").read_bytes())
    assert result["degradations"] == []
    assert (result["version"]["version"], result["version"]["status"]) == ("2.0.1", "unverified")


def test_workspace_missing(tmp_path: Path) -> None:
    out = tmp_path / "o"
    _refused(
        replayer("run", SESSION, "-n", "1", "-w", str(tmp_path / "absent"), "-o", str(out)),
        5,
        "workspace",
        out,
    )


def test_docker_not_reachable(tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = replayer(
        "run",
        SESSION,
        "-n",
        "1",
        "-w",
        WORKSPACE,
        "-o",
        str(out),
        env={"DOCKER_HOST": "unix:///nonexistent.sock"},
    )
    _refused(proc, 6, "Docker is not reachable (DockerException); run replayer setup", out)


@pytest.mark.agent
def test_image_missing(tmp_path: Path) -> None:
    out = tmp_path / "o"
    proc = replayer("run", SESSION, "-n", "1", "-w", WORKSPACE, "-o", str(out), "--image", "no-such-image:1")
    _refused(
        proc,
        6,
        "image 'no-such-image:1' is not in the Docker engine (the base image: run replayer setup; "
        "any other: docker pull or docker load it)",
        out,
    )


def test_output_exists(tmp_path: Path) -> None:
    out = tmp_path / "o"
    out.mkdir()
    (out / "keep").write_text("mine")
    _refused(replayer("prepare", SESSION, "-n", "1", "-o", str(out)), 7, "exists")
    assert (out / "keep").read_text() == "mine"
    replayer("prepare", SESSION, "-n", "1", "-o", str(out), "--force", check=True)
    assert not (out / "keep").exists() and (out / "result.json").exists()


@pytest.mark.parametrize("value", ["-1"])
def test_negative_boundary(value: str, tmp_path: Path) -> None:
    _refused(replayer("prepare", SESSION, "-n", value, "-o", str(tmp_path / "o")), 4, "must be >= 0")


@pytest.mark.agent
def test_input_is_never_modified(tmp_path: Path) -> None:
    before = (CLAUDE.fixture("parallel") / "session.jsonl").read_bytes()
    replayer("run", SESSION, "-n", "2", "-w", WORKSPACE, "-o", str(tmp_path / "o"), check=True)
    assert (CLAUDE.fixture("parallel") / "session.jsonl").read_bytes() == before


@pytest.mark.agent
def test_symlink_in_the_workspace_is_never_followed(tmp_path: Path) -> None:
    """A Read of a symlink to a file outside the workspace: the copy keeps the link as a link and the real
    CLI reads it inside the sandbox, where its target does not exist; the host file is never read."""
    secret = tmp_path / "secret.txt"
    secret.write_text("outside\n")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_text("alpha\n")
    (ws / "hello.py").symlink_to(secret)
    session = str(CLAUDE.fixture("parallel") / "session.jsonl")
    out = tmp_path / "o"
    proc = replayer("run", session, "-n", "1", "-w", str(ws), "-o", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    result = orjson.loads(proc.stdout)
    read = next(d for d in result["divergences"] if d["call_id"] == "toolu_parallel_01")
    assert read["status"] == "different"
    assert "outside" not in (out / "expected_prefix.json").read_text()
    assert "outside" not in (out / "reruns.json").read_text()


@pytest.mark.agent
@pytest.mark.parametrize(
    ("call", "field", "bad"), [("toolu_single_01", "timeout", "soon"), ("toolu_single_02", "offset", "abc")]
)
def test_a_call_input_of_the_wrong_type_is_answered_by_the_cli_not_crashed(
    call: str, field: str, bad: str, tmp_path: Path
) -> None:
    """A Bash `timeout` or a Read `offset` that is a string: the CLI's own schema rejects it, and its
    answer is the fresh observation (the real CLI reruns the pinned version too)."""
    session = patched_session(tmp_path / "session.jsonl", call, {field: bad})
    args = ["run", str(session), "-n", "2", "-w", str(CLAUDE.fixture("single") / "workspace")]
    proc = replayer(*args, "-o", str(tmp_path / "out"), "--json")
    assert proc.returncode == 0, proc.stderr
    found = {d["call_id"]: d for d in orjson.loads(proc.stdout)["divergences"]}
    assert found[call]["status"] == "different"
    reruns = orjson.loads((tmp_path / "out" / "reruns.json").read_bytes())
    fresh = next(r["fresh"] for r in reruns if r["call_id"] == call)
    assert "InputValidationError" in fresh and f"`{field}`" in fresh  # the CLI's own words
