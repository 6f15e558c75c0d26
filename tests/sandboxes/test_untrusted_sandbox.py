"""An attacker-controlled prefix: a historical Bash call that plants links to host files, links to
/proc/self/environ and /dev/zero, FIFOs, device nodes and a set-user-ID binary in the agent home and the
workspace, and fills the disk. Nothing of the host may reach the output or the continued agent, and
nothing it writes may pass the disk quota (real Docker, the real pinned Claude Code for the continuation).
"""

from __future__ import annotations

import os
import secrets
import socket
import stat
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from replayer.bridges.scripted import Script, TextBlock, ToolUseBlock, Turn
from replayer.floor.errors import SandboxError
from replayer.floor.limits import SandboxLimits
from replayer.floor.pins import load_pins
from replayer.sandboxes.committable import PATH_MAX, engine_refusal
from replayer.sandboxes.docker import SNAPSHOT_LABEL, DockerSandbox, remove_images
from replayer.sandboxes.quota import FS_ROOT, STATE_ROOT, StateDir, nested_subvolumes, sweep_states
from replayer.sandboxes.seccomp import BTRFS_IOCTLS
from tests.conftest import CLAUDE, replayer
from tests.support.continuing import scripted
from tests.support.sessions import patched_session

pytestmark = pytest.mark.docker

KEY = f"sk-ant-upstream-{secrets.token_hex(8)}"
OTHER_SECRET = f"sk-other-{secrets.token_hex(8)}"
DISK = 120 << 20
QUOTA = 48 << 20


HOME_KEPT = "$HOME/.claude/projects/-testbed/df04a3bb-08cf-50e0-8e89-ad8ecf7e8717"
"""Where the prefix's commands plant in the agent home: the folder the driven CLI's home keeps (its
persisted outputs; the rest of the home is emptied in the sandbox before the host copies it)."""
HOME_KEPT_REL = HOME_KEPT.replace("$HOME", "home")


def _attack(host_secret: Path, fill: bool) -> str:
    host_dir = host_secret.parent
    fills = [
        # a nested subvolume would be outside the state's qgroup (issue 32): refused by the profile
        'python3 -c \'import fcntl, os, struct; fcntl.ioctl(os.open("/testbed", 0), 0x5000940E,'
        ' bytearray(struct.pack("q4088s", 0, b"nested")))\' 2>&1'
        " | grep -o 'Operation not permitted' | sed 's/^/subvolume: /'",
        "dd if=/dev/zero of=/testbed/nested/big bs=1M count=300 2>&1 | grep -o 'No such file or directory'",
        'dd if=/dev/zero of=/testbed/big bs=1M count=300 2>&1 | grep -o "Disk quota exceeded"',
        # the last: with the container's own disk full, the rerun's output stops here
        'dd if=/dev/zero of=/tmp/rootbig bs=1M count=300 2>&1 | grep -o "Disk quota exceeded"',
    ]
    return "; ".join(
        [
            f"mkdir -p {HOME_KEPT}",
            f"ln -s {host_secret} {HOME_KEPT}/leak",
            f"ln -s {host_dir} {HOME_KEPT}/leakdir",
            f"ln -s /proc/self/environ {HOME_KEPT}/env",
            f"ln -s /dev/zero {HOME_KEPT}/zero",
            f"mkfifo {HOME_KEPT}/fifo",
            f"mknod {HOME_KEPT}/null c 1 3",
            f"ln -s {host_secret} /testbed/wsleak",
            "mkfifo /testbed/wsfifo",
            "mknod /testbed/dev c 1 5",
            "cp /bin/sh /testbed/suid && chmod 4755 /testbed/suid",
            *(fills if fill else []),
            "echo done",
        ]
    )


def _run(root: Path, fill: bool, turns: list[Turn] | None) -> dict:
    """One hostile run (with a continuation when `turns` are given)."""
    root.mkdir()
    host = root / "host"
    host.mkdir()
    token = secrets.token_hex(16)
    host_secret = host / "secret.txt"
    host_secret.write_text(f"host-secret-{token}\n")
    session = patched_session(
        root / "session.jsonl", "toolu_single_01", {"command": _attack(host_secret, fill)}
    )
    workspace = root / "ws"
    workspace.mkdir()
    for item in (CLAUDE.fixture("single") / "workspace").iterdir():
        (workspace / item.name).write_bytes(item.read_bytes())
    out = root / "out"
    args = ["run", str(session), "-n", "1", "-w", str(workspace), "-o", str(out), "--limits", f"disk={DISK}"]
    env = {"ANTHROPIC_API_KEY": KEY, "OPENAI_API_KEY": OTHER_SECRET, "REPLAYER_TEST_SECRET": OTHER_SECRET}
    log: list = []
    if turns is None:
        proc = replayer(*args, "--json", env=env)
    else:
        with scripted("claude_code", Script(turns=turns), expected_key=KEY) as upstream:
            proc = replayer(*args, "--continue", "--upstream", upstream.url, "--json", env=env)
            log = [r.model_dump(mode="json") for r in upstream.log]
    return {
        "proc": proc,
        "out": out,
        "token": token,
        "host_secret": host_secret,
        "log": log,
        "result": orjson.loads((out / "result.json").read_bytes()) if (out / "result.json").exists() else {},
    }


@pytest.fixture(scope="module")
def attack(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Links, special files, a set-user-ID binary, and the workspace and the container's disk filled."""
    return _run(tmp_path_factory.mktemp("attack") / "fill", fill=True, turns=None)


@pytest.fixture(scope="module")
def continued(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The same links, then a continuation whose first call looks at what the agent home holds."""
    look = "ls -la $HOME; cat $HOME/leak; cat $HOME/leakdir/secret.txt; env; tr '\\0' '\\n' < /proc/1/environ; echo END"
    turns = [
        Turn(blocks=[ToolUseBlock(id="toolu_look_1", name="Bash", input={"command": look})]),
        Turn(blocks=[TextBlock(text="Finished.")]),
    ]
    return _run(tmp_path_factory.mktemp("attack") / "continue", fill=False, turns=turns)


def _entries(root: Path) -> list[Path]:
    found = []
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk follows no link to a directory
        found += [Path(dirpath) / n for n in dirnames + filenames]
    return found


@pytest.mark.agent
def test_the_run_completes_and_records_its_confinement(attack: dict) -> None:
    assert attack["proc"].returncode == 0, attack["proc"].stderr
    sandbox = attack["result"]["sandbox"]
    assert sandbox["limits"]["disk_bytes"] == DISK
    assert sandbox["state_disk_limited"] and sandbox["container_disk_limited"]
    assert "MKNOD" in sandbox["capabilities_dropped"]
    # both quotas used up, and said so: the rerun itself shows only `Exit code 1` and what came before
    assert sandbox["disk_used_up"] == ["state", "container"]
    assert any("used up its disk limit (120 MiB)" in hint for hint in attack["result"]["hints"])
    skipped = set(sandbox["skipped"])
    for name, kind in (("leak", "symlink"), ("env", "symlink"), ("zero", "symlink"), ("fifo", "fifo")):
        assert f"{HOME_KEPT_REL}/{name} ({kind})" in skipped
    assert "state/workspace/wsfifo (fifo)" in skipped


@pytest.mark.agent
@pytest.mark.parametrize("which", ["attack", "continued"])
def test_no_host_content_and_no_key_reaches_the_output(which: str, request: pytest.FixtureRequest) -> None:
    run = request.getfixturevalue(which)
    assert run["proc"].returncode == 0, run["proc"].stderr
    needles = [run["token"].encode(), KEY.encode(), OTHER_SECRET.encode()]
    for path in _entries(run["out"]):
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        assert not any(n in data for n in needles), f"{path} holds a host secret or a key"


@pytest.mark.parametrize("which", ["attack", "continued"])
def test_no_special_file_no_setuid_and_no_link_out_of_the_agent_home(
    which: str, request: pytest.FixtureRequest
) -> None:
    run = request.getfixturevalue(which)
    for path in _entries(run["out"]):
        mode = path.lstat().st_mode
        assert stat.S_ISDIR(mode) or stat.S_ISREG(mode) or stat.S_ISLNK(mode), f"{path} is a special file"
        assert not mode & (stat.S_ISUID | stat.S_ISGID), f"{path} kept a set-ID bit"
        if stat.S_ISLNK(mode):  # only the workspace keeps links (as links, never followed)
            assert "state/workspace" in str(path), f"{path} is a link outside the workspace"
    assert run["host_secret"].read_text().startswith("host-secret-")


@pytest.mark.agent
def test_the_disk_quota_bounds_what_the_container_writes(attack: dict) -> None:
    reruns = orjson.loads((attack["out"] / "reruns.json").read_bytes())
    fresh = next(r["fresh"] for r in reruns if r["call_id"] == "toolu_single_01")
    assert fresh.count("Operation not permitted") >= 2  # both mknod calls (the excerpt may cut the second)
    rebuilt = (attack["out"] / attack["result"]["native_files"][0]).read_text()
    assert rebuilt.count("Disk quota exceeded") >= 2  # the workspace's and the container's own
    assert (
        "subvolume: Operation not permitted" in rebuilt
        and not (attack["out"] / "state" / "workspace" / "nested").exists()
    )
    total = sum(p.lstat().st_blocks * 512 for p in _entries(attack["out"]))
    assert total < 2 * DISK
    big = attack["out"] / "state" / "workspace" / "big"
    assert big.stat().st_size <= DISK


@pytest.mark.agent
def test_the_continued_agent_sees_no_planted_link(continued: dict) -> None:
    assert continued["proc"].returncode == 0, continued["proc"].stderr
    assert continued["result"]["sandbox"]["disk_used_up"] == [] and not continued["result"]["hints"]
    result = continued["result"]["continuation"]
    assert (result["gate"], result["agent_status"]) == ("accepted", "completed")
    body = orjson.dumps(continued["log"][-1]["body"]).decode()
    assert "END" in body  # the look-around ran and its output reached the model
    # the links the prefix made are still there (the container's own state, kept for fidelity), but
    # they point into the container, and no host content was ever copied behind them
    assert continued["token"] not in body
    assert KEY not in body and OTHER_SECRET not in body and "PATH=" in body  # env printed, no key in it
    assert "cat: /home/replay/leak: No such file or directory" in body


NEST = """
import fcntl, os, struct, sys
from sandboxes_seccomp_requests import REQUESTS
fd = os.open(sys.argv[1], os.O_RDONLY)
for name, request in REQUESTS.items():
    for high in (0, 1 << 32):  # the kernel reads the request as 32 bits: high bits change nothing
        args = bytearray(struct.pack("q4088s", 0, f"{name}-{high}".encode()))
        try:
            fcntl.ioctl(fd, request | high, args)
            print(name, "done")
        except OSError as exc:
            print(name, exc.strerror)
"""


@pytest.fixture
def limited_box(docker_client, tmp_path: Path) -> Iterator[tuple[DockerSandbox, StateDir]]:
    """A container over a quota-limited state (a btrfs subvolume of QUOTA bytes) at /testbed."""
    state = StateDir.create(QUOTA, fallback_parent=tmp_path)
    try:
        assert state.limited, "the state root is not a btrfs file system with quotas (replayer setup)"
        (state.path / "workspace").mkdir()
        (tmp_path / "tools").mkdir()
        requests = {name.removeprefix("BTRFS_IOC_"): value for name, value in BTRFS_IOCTLS.items()}
        (tmp_path / "tools" / "sandboxes_seccomp_requests.py").write_text(f"REQUESTS = {requests!r}\n")
        (tmp_path / "tools" / "nest.py").write_text(NEST)
        with DockerSandbox.start(
            docker_client,
            load_pins().base_image.tag,
            binds={"/testbed": (state.path / "workspace", False), "/tools": (tmp_path / "tools", True)},
            workdir="/testbed",
            run_id=f"test-{uuid.uuid4().hex[:8]}",
            limits=SandboxLimits(disk_bytes=QUOTA),
        ) as box:
            yield box, state
    finally:
        state.remove()


def _sh(box: DockerSandbox, script: str) -> str:
    res = box.exec(["bash", "-c", "exec 2>&1; " + script], workdir="/testbed", timeout_s=120)
    return res.stdout.decode(errors="replace")


def test_the_sandbox_cannot_create_snapshot_or_flag_a_subvolume(
    limited_box: tuple[DockerSandbox, StateDir],
) -> None:
    box, state = limited_box
    out = _sh(box, "python3 /tools/nest.py /testbed")
    for name in (n.removeprefix("BTRFS_IOC_") for n in BTRFS_IOCTLS):
        assert out.count(f"{name} Operation not permitted") == 2, out
    assert "done" not in out
    assert nested_subvolumes(state.path) == []
    # the attack of issue 32: a nested subvolume, then more than the quota written into it
    out = _sh(box, f"dd if=/dev/zero of=/testbed/SUBVOL_CREATE-0/big bs=1M count={2 * QUOTA >> 20}")
    assert "No such file or directory" in out
    out = _sh(box, f"dd if=/dev/zero of=/testbed/big bs=1M count={2 * QUOTA >> 20}")
    assert "Disk quota exceeded" in out
    assert (state.path / "workspace" / "big").stat().st_size <= QUOTA


def test_ordinary_tools_still_work_under_the_profile(limited_box: tuple[DockerSandbox, StateDir]) -> None:
    box, _ = limited_box
    script = (
        "set -e; echo one > a.txt; cp --reflink=always a.txt b.txt; "  # FICLONE, a btrfs-type ioctl
        "git init -q . && git add a.txt && git -c user.name=t -c user.email=t@t commit -qm one; "
        "git log --format=%s; python3 -c 'import os, pty, termios; m, s = pty.openpty(); "
        "print(len(termios.tcgetattr(s)))'; echo ALL-OK"
    )
    out = _sh(box, script)
    assert out.splitlines()[-3:] == ["one", "7", "ALL-OK"], out


def test_removal_and_the_sweep_delete_nested_read_only_subvolumes(tmp_path: Path) -> None:
    """A subvolume nested before the profile existed (made here as root from the host side), marked
    read-only inside a sealed state: a run's removal and the sweep of dead runs' states delete it."""

    def nest(root: Path) -> None:
        for sub in (root / "workspace" / "n1", root / "workspace" / "n1" / "n2"):
            subprocess.run(["btrfs", "-q", "subvolume", "create", str(sub)], check=True)
            (sub / "data").write_bytes(b"x" * 4096)
        for sub in (root / "workspace" / "n1" / "n2", root / "workspace" / "n1", root):
            subprocess.run(["btrfs", "-q", "property", "set", "-ts", str(sub), "ro", "true"], check=True)

    state = StateDir.create(QUOTA, fallback_parent=tmp_path)
    assert state.limited
    (state.path / "workspace").mkdir()
    nest(state.path)
    assert [p.name for p in nested_subvolumes(state.path)] == ["n1", "n2"]
    state.remove()
    assert not state.path.exists()

    dead = STATE_ROOT / f"{socket.gethostname()}_1_1_{uuid.uuid4().hex[:12]}"  # pid 1, another start
    subprocess.run(["btrfs", "-q", "subvolume", "create", str(dead)], check=True)
    (dead / "workspace").mkdir()
    nest(dead)
    assert dead.name in sweep_states()
    assert not dead.exists()
    listed = subprocess.run(["btrfs", "subvolume", "list", str(FS_ROOT)], capture_output=True, text=True)
    assert dead.name not in listed.stdout and state.path.name not in listed.stdout


@pytest.fixture
def boundary_box(docker_client) -> Iterator[DockerSandbox]:
    """A container whose snapshots this test takes (its images removed at the end)."""
    with DockerSandbox.start(
        docker_client,
        load_pins().base_image.tag,
        binds={},
        workdir="/",
        run_id=f"test-{uuid.uuid4().hex[:8]}",
        limits=SandboxLimits(disk_bytes=QUOTA),
    ) as box:
        yield box
    remove_images(docker_client, f"{SNAPSHOT_LABEL}.test={box.name}")


def _snapshot(box: DockerSandbox) -> str:
    return box.snapshot(f"sandbox-replayer/test:{box.name}", labels={f"{SNAPSHOT_LABEL}.test": box.name})


def _deep_path(length: int) -> str:
    """A path under /tmp of exactly `length` bytes, of 100-byte folder names."""
    path = "/tmp"
    while length - len(path) > 2 * 101:
        path += "/" + "d" * 100
    return path + "/" + "f" * (length - len(path) - 1)


def _image_has(docker_client, image: str, path: str) -> bool:
    script = 'test -f "$1" && echo found || echo missing'
    out = docker_client.containers.run(
        image, ["sh", "-c", script, "sh", path], remove=True, network_mode="none"
    )
    return out.strip() == b"found"


def test_a_snapshot_is_complete_or_refused_for_deep_paths(docker_client, boundary_box: DockerSandbox) -> None:
    box = boundary_box
    upper = box.container.attrs["GraphDriver"]["Data"]["UpperDir"]
    keep = PATH_MAX - len(upper.encode())
    at_limit, over = _deep_path(keep), _deep_path(keep + 1)
    for path in (at_limit, over):
        made = box.exec(
            ["sh", "-c", 'mkdir -p "${1%/*}" && echo deep > "$1"', "sh", path], workdir="/", timeout_s=60
        )
        assert made.exit_code == 0, made.stderr
    # what the engine does without the check: the longer path is silently missing from the image
    raw = box.container.commit(conf={"Labels": {f"{SNAPSHOT_LABEL}.test": box.name, SNAPSHOT_LABEL: "1"}})
    assert _image_has(docker_client, raw.id, at_limit) and not _image_has(docker_client, raw.id, over)

    with pytest.raises(
        SandboxError, match=rf"levels and {keep + 1} bytes deep: docker commit keeps paths of at most {keep}"
    ):
        _snapshot(box)
    # where the layer cannot be read here (another host's engine, not root): the engine's account
    assert "file name too long" in (engine_refusal(box.client.api, box.container.id, QUOTA) or "")
    box.exec(["rm", "--", over], workdir="/", timeout_s=60)
    assert _image_has(docker_client, _snapshot(box), at_limit)


def test_a_sparse_file_over_the_disk_limit_refuses_the_snapshot(
    docker_client, boundary_box: DockerSandbox
) -> None:
    box = boundary_box
    sparse = box.exec(["truncate", "-s", str(4 * QUOTA), "/tmp/sparse"], workdir="/", timeout_s=60)
    assert sparse.exit_code == 0
    used = box.exec(["du", "-k", "/tmp/sparse"], workdir="/", timeout_s=60).stdout.split()[0]
    assert int(used) < 1024  # free under the quota: holes
    with pytest.raises(
        SandboxError, match=r"apparent size, holes included.*largest: /tmp/sparse, 192\.0 MiB"
    ):
        _snapshot(box)
    assert "apparent size, holes included" in (engine_refusal(box.client.api, box.container.id, QUOTA) or "")
    box.exec(["truncate", "-s", str(QUOTA // 2), "/tmp/sparse"], workdir="/", timeout_s=60)
    assert engine_refusal(box.client.api, box.container.id, QUOTA) is None
    assert _image_has(docker_client, _snapshot(box), "/tmp/sparse")


def test_compare_refuses_a_boundary_whose_holes_would_become_data(tmp_path: Path) -> None:
    """Issue 32's attack, scaled down: a sparse file in the container's /tmp, free under the quota,
    several times the disk limit in apparent size: compare refuses the snapshot in one line."""
    command = f"truncate -s {4 * QUOTA} /tmp/sparse && du -k /tmp/sparse"
    session = patched_session(tmp_path / "session.jsonl", "toolu_single_01", {"command": command})
    workspace = tmp_path / "ws"
    workspace.mkdir()
    for item in (CLAUDE.fixture("single") / "workspace").iterdir():
        (workspace / item.name).write_bytes(item.read_bytes())
    out = tmp_path / "out"
    with scripted(
        "claude_code", Script(turns=[Turn(blocks=[TextBlock(text="Finished.")])]), expected_key=KEY
    ) as up:
        proc = replayer(
            "compare", str(session), "-n", "1", "-w", str(workspace), "-o", str(out), "--upstream", up.url,
            "--variant", "a=", "--limits", f"disk={QUOTA}", env={"ANTHROPIC_API_KEY": KEY},
        )  # fmt: skip
    assert proc.returncode == 6, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "the snapshot is refused" in lines[0] and "largest: /tmp/sparse, 192.0 MiB" in lines[0]
    assert not out.exists()
