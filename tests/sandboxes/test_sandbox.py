"""The Docker backend with a real engine: no network, limits, deadlines that kill the whole process
group, no container outliving the command (Ctrl-C included), and `replayer gc`."""

from __future__ import annotations

import signal
import subprocess
import time
import uuid
from pathlib import Path

import orjson
import pytest

from replayer.floor.errors import SandboxError
from replayer.floor.pins import load_pins
from replayer.sandboxes.docker import LABEL, DockerSandbox
from tests.conftest import CLAUDE, ROOT, replayer, replayer_argv

pytestmark = pytest.mark.docker


def test_container_has_no_network_and_limits(box: DockerSandbox) -> None:
    attrs = box.client.api.inspect_container(box.container.id)
    host = attrs["HostConfig"]
    assert host["NetworkMode"] == "none"
    assert host["Memory"] > 0 and host["PidsLimit"] > 0 and host["NanoCpus"] > 0
    assert attrs["Config"]["Labels"][LABEL] == "1"
    res = box.exec(["bash", "-c", "ls /sys/class/net"], workdir="/", timeout_s=30)
    assert res.stdout.split() == [b"lo"]


def test_deadline_kills_the_whole_process_group(box: DockerSandbox) -> None:
    started = time.monotonic()
    res = box.exec(["bash", "-c", "sleep 300 & sleep 300 & wait"], workdir="/", timeout_s=1)
    assert res.timed_out and res.exit_code is None
    assert time.monotonic() - started < 60
    left = box.exec(["bash", "-c", "ps -eo args | grep -c '^sleep 300$' || true"], workdir="/", timeout_s=30)
    assert left.stdout.strip() == b"0"


def test_exit_code_and_streams(box: DockerSandbox) -> None:
    res = box.exec(["bash", "-c", "echo out; echo err >&2; exit 7"], workdir="/testbed", timeout_s=30)
    assert (res.exit_code, res.stdout, res.stderr, res.timed_out) == (7, b"out\n", b"err\n", False)


def test_a_command_is_one_exec_and_the_ended_ones_files_are_gone_before_the_next_runs(
    box: DockerSandbox,
) -> None:
    since = time.time()
    for _ in range(3):
        assert box.exec(["true"], workdir="/", timeout_s=30).exit_code == 0
    seen = box.exec(["ls", "/run/replayer"], workdir="/", timeout_s=30)
    filters = {"container": box.container.id, "event": "exec_create"}
    created = list(box.client.events(since=since, until=time.time(), filters=filters, decode=True))
    assert len(created) == 4  # no exec of its own to remove a command's process-group file
    assert len(seen.stdout.split()) == 1  # its own: the three ended ones' were removed before it ran


def _labelled(docker_client) -> set[str]:
    return {c.name for c in docker_client.containers.list(all=True, filters={"label": LABEL})}


@pytest.mark.serial  # it watches every labelled container
def test_ctrl_c_leaves_no_container_and_no_output(docker_client, tmp_path: Path) -> None:
    before = _labelled(docker_client)
    out = tmp_path / "o"
    name = "shell_state"  # its step 13 runs three seconds in the background; step 8 waits one
    cmd = replayer_argv("run", str(CLAUDE.fixture(name) / "session.jsonl"), "-n", "13")
    cmd += ["-w", str(CLAUDE.fixture(name) / "workspace"), "-o", str(out)]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (_labelled(docker_client) - before):
        time.sleep(0.1)
    assert _labelled(docker_client) - before, "the run never started a container"
    time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert err.strip() == "replayer: interrupted"
    assert _labelled(docker_client) - before == set()
    assert not out.exists() and not list(tmp_path.glob(".o.partial-*"))


@pytest.mark.serial  # gc removes every container of the replayer, other tests' too
def test_gc_removes_leftovers(docker_client) -> None:
    leftover = DockerSandbox.start(
        docker_client,
        load_pins().base_image.tag,
        binds={},
        workdir="/",
        run_id=f"left-{uuid.uuid4().hex[:8]}",
    )
    name = leftover.container.name
    proc = replayer("gc", "--json", check=True)
    assert name in orjson.loads(proc.stdout)["removed"]
    assert name not in _labelled(docker_client)


def test_files_are_read_and_written_inside_the_container(box: DockerSandbox, tmp_path: Path) -> None:
    box.write_file("/testbed/sub/a.txt", b"one\n")
    assert (tmp_path / "sub" / "a.txt").read_bytes() == b"one\n"  # through the bind mount
    box.write_file("/root/note", b"\x00two")
    assert box.read_file("/root/note") == b"\x00two"
    assert box.exec(["cat", "/root/note"], workdir="/", timeout_s=30).stdout == b"\x00two"
    with pytest.raises(SandboxError, match="size limit"):
        box.read_file("/root/note", max_bytes=2)
    box.exec(["ln", "-s", "/etc/passwd", "/root/link"], workdir="/", timeout_s=30)
    for refused in ("/root/link", "/root", "/root/absent"):
        with pytest.raises(SandboxError, match="not a regular file"):
            box.read_file(refused)


def test_the_replay_models_forwarder_listens_no_longer_once_the_reruns_close(
    box: DockerSandbox, tmp_path: Path
) -> None:
    """The reruns' replay model is reached in the container through a forwarder on 127.0.0.1:8763 (socat);
    the continuation runs in the same container next and must find nothing of it listening there (issue 42,
    Why 9)."""
    from replayer.adapters.driven import PORT, ReplayModel

    probe = ["bash", "-c", f"(exec 3<>/dev/tcp/127.0.0.1/{PORT}) 2>/dev/null"]
    model = ReplayModel(box, tmp_path, "/testbed", "m")
    assert box.exec(probe, workdir="/", timeout_s=30).exit_code == 0
    model.close()
    assert box.exec(probe, workdir="/", timeout_s=30).exit_code != 0, "nothing listens on the port"
    left = box.exec(["bash", "-c", "cat /proc/[0-9]*/cmdline | tr '\\0' ' '"], workdir="/", timeout_s=30)
    assert b"socat" not in left.stdout, left.stdout
