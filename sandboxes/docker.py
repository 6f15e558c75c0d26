"""The Docker engine behind the seam (sandboxes/base.py): start, exec with deadlines and process-group kill,
read and write files, forward a port, snapshot, cleanup. sandboxes/podman.py drives Podman through the same
code, by its Docker-compatible API."""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Self

import docker
import docker.errors
import requests
from docker.types import LogConfig, Mount

from replayer.floor import signals
from replayer.floor.errors import SandboxError, last_line
from replayer.floor.limits import SandboxLimits
from replayer.floor.owner import owner, owner_alive
from replayer.sandboxes import leftovers, seccomp, slots
from replayer.sandboxes.base import (
    LABEL,
    MAX_FILE_BYTES,
    MAX_OUTPUT_BYTES,
    OWNER_LABEL,
    SNAPSHOT_LABEL,
    Ahead,
    ExecResult,
    SandboxSpec,
    WatchedExec,
)
from replayer.sandboxes.committable import engine_refusal, refusal
from replayer.sandboxes.quota import limit_layer, used_up

RUN_DIR = "/run/replayer"
"""A tmpfs in every container (the execs' process-group files): mounted at create, so that no exec is
needed before the container is ready."""
_KILL_GRACE_S = 5.0
DROPPED_CAPABILITIES = ["MKNOD", "NET_RAW", "SETFCAP", "AUDIT_WRITE", "SYS_CHROOT"]
"""No device nodes in the bind-mounted workspace or home (they would be devices on the host), no raw
sockets, no file capabilities; what the agents' tools use (chown, kill, setuid in the container) stays.
No btrfs subvolume or quota administration either (sandboxes/seccomp.py)."""
ENGINE_FILES = Path(__file__).parent / "etc"
"""The sandbox's /etc/hosts, /etc/hostname and /etc/resolv.conf, bind-mounted read-only: the engine's own
copies are read-write files in its data root, outside the run's disk quota (a process in the sandbox could
fill the engine's file system through them). Its hosts file's content (the bridge is reached at 127.0.0.1),
the container's hostname, and no name server (the sandbox has no network)."""
NO_LOG = LogConfig(type=LogConfig.types.NONE)
"""No container log: what the container's processes write to its standard output (root can reach it through
/proc/1/fd/1) would go to an uncapped log in the engine's data root. The replayer reads output by exec
only."""
_LIVE: dict[str, docker.DockerClient] = {}
"""Containers this process created and has not removed yet: what `stop_live` sweeps."""
_SPAWNED: dict[str, str] = {}
"""Name -> id of the live containers `spawn` started a process in: their removal makes sure it is gone."""


@contextlib.contextmanager
def engine_errors(doing: str, engine: str = "Docker") -> Iterator[None]:
    """Docker SDK and transport errors as one-line SandboxErrors (an engine that stopped answering)."""
    try:
        yield
    except docker.errors.APIError as exc:
        raise SandboxError(f"{doing} failed: {exc.explanation or exc}") from None
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        raise SandboxError(
            f"the {engine} engine stopped answering during {doing} ({type(exc).__name__}); "
            f"run replayer setup{'' if engine == 'Docker' else ' --engine ' + engine.lower()}, then replayer gc"
        ) from None


def sweep_orphans(client: docker.DockerClient) -> list[str]:
    """Remove the containers whose owning process on this host is gone (killed with -9, or its engine
    restarted under it); returns their names. Uses the listing's own labels: a container that goes away
    meanwhile (another process removing its own) is no error."""
    removed = []
    with engine_errors("the sweep of orphaned containers"):
        listed = client.api.containers(all=True, filters={"label": OWNER_LABEL})
    for entry in listed:
        if owner_alive((entry.get("Labels") or {}).get(OWNER_LABEL, "")):
            continue
        with contextlib.suppress(docker.errors.APIError):
            client.api.remove_container(entry["Id"], force=True)
        removed.append((entry.get("Names") or [entry["Id"]])[0].lstrip("/"))
    return removed


def _remove(client: docker.DockerClient, name: str) -> None:
    try:
        with engine_errors("container removal"):
            client.api.remove_container(name, force=True)
    except SandboxError as exc:
        said = str(exc).lower()  # Docker says "No such container", Podman "no such container"
        if "no such container" not in said and "already in progress" not in said:
            raise  # else removed already, or gc or a sweep is removing it
    _LIVE.pop(name, None)
    spawned = _SPAWNED.pop(name, None)
    if spawned is not None:  # a detached exec outside the container's PID namespace survives it
        leftovers.kill_left(spawned)


def stop_live() -> list[str]:
    """Remove every container this process started and still holds (after an interruption)."""
    names = list(_LIVE)
    for name in names:
        with contextlib.suppress(Exception):
            _remove(_LIVE[name], name)
    return names


def _limit_writable_layer(container: Any, limit_bytes: int) -> Path | None:
    """A disk quota on a created (not yet started) container's own file system, where the engine's data
    root is a local btrfs (sandboxes/quota.py): the limited layer folder; None elsewhere."""
    container.reload()
    upper = (container.attrs.get("GraphDriver") or {}).get("Data", {}).get("UpperDir")
    try:
        return Path(upper).parent if upper and limit_layer(Path(upper), limit_bytes) else None
    except OSError:  # a remote engine: its data root is not on this host
        return None


def missing_image(image: str, engine: str = "docker") -> SandboxError:
    setup = "replayer setup" + ("" if engine == "docker" else f" --engine {engine}")
    return SandboxError(
        f"image {image!r} is not in the {engine.capitalize()} engine (the base image: run {setup}; "
        f"any other: {engine} pull or {engine} load it)"
    )


def connect() -> docker.DockerClient:
    """A client that answers, or SandboxError naming why not."""
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:  # the SDK raises several unrelated types for an absent engine
        raise SandboxError(f"Docker is not reachable ({type(exc).__name__}); run replayer setup") from None
    return client


class DockerBackend:
    """Starts DockerSandboxes on the engine the environment names."""

    def start(self, spec: SandboxSpec) -> DockerSandbox:
        return DockerSandbox.start_from(spec)


class DockerEngine(DockerBackend):
    """The Docker engine as the replayer uses it (the `Engine` of sandboxes/base.py): the daemon
    `DOCKER_HOST` names, else this machine's, which `replayer setup` starts (docker_up.sh)."""

    name = "docker"
    label = "Docker"
    up_script = "docker_up.sh"
    up_args: list[str] = []
    tools = {"dockerd": "docker.io", "docker": "docker.io"}
    prestarts = True
    connect: Callable[[], docker.DockerClient] = staticmethod(connect)

    def check(self) -> None:
        self.connect()

    def errors(self, doing: str) -> contextlib.AbstractContextManager[None]:
        return engine_errors(doing, self.label)

    def image_attrs(self, image: str) -> dict[str, Any] | None:
        client = self.connect()
        with self.errors("image lookup"):
            try:
                return dict(client.images.get(image).attrs)
            except docker.errors.ImageNotFound:
                return None

    def provide_image(self, tag: str, archive: Path | None) -> None:
        client = self.connect()
        with self.errors(f"loading {archive}" if archive else f"pulling {tag}"):
            if archive is not None:
                with open(archive, "rb") as fh:
                    client.images.load(fh)
            else:
                client.images.pull(tag)

    def missing_image(self, image: str) -> SandboxError:
        return missing_image(image, self.name)

    def remove_containers(self, label: str) -> list[str]:
        return remove_containers(self.connect(), label)

    def remove_images(self, label: str) -> list[str]:
        return remove_images(self.connect(), label)

    def gc(self) -> tuple[list[str], list[str]]:
        return gc(self.connect())

    def sweep_forwarders(self) -> list[int]:
        return sweep_forwarders(self.connect())

    def stop_live(self) -> list[str]:
        return stop_live()

    def __init__(self, ahead: Callable[[], Ahead] | None = None):
        self._ahead = ahead
        """What keeps a container ahead (sandboxes/ahead.py, which is built on this module)."""

    def ahead(self) -> Ahead | None:
        return self._ahead() if self._ahead is not None else None


class DockerSandbox:
    """One container with no network, resource limits and the run's label: a Deployment and its Runtime
    (sandboxes/base.py)."""

    dropped_capabilities = DROPPED_CAPABILITIES
    prestarts = True
    """Forks may be started before the boundary like it (sandboxes/base.py `Layered`)."""
    engine = "docker"

    def __init__(self, client: docker.DockerClient, container: Any, image_id: str):
        self.client = client
        self.container = container
        self.name: str = container.name
        self.image_id = image_id
        self.disk_limited = False
        """Whether the container's own file system has a disk quota (see sandboxes/quota.py)."""
        self.layer: Path | None = None
        """The limited subvolume that holds its overlay layer, when disk_limited."""
        self.limits = SandboxLimits()
        self.ended_pgid_files: list[str] = []
        """The process-group files of execs that ended: the next exec's wrapper removes them (one exec
        fewer per command than removing each by its own exec)."""

    @classmethod
    def start(
        cls,
        client: docker.DockerClient,
        image: str,
        *,
        binds: dict[str, tuple[Path, bool]],
        workdir: str,
        run_id: str,
        limits: SandboxLimits | None = None,
        labels: dict[str, str] | None = None,
        propagated: frozenset[str] = frozenset(),
        command: list[str] | None = None,
    ) -> Self:
        """binds: container path -> (host path, read_only); labels: besides the replayer's own;
        propagated: the bind targets that receive the host's later mounts (SandboxSpec.propagated).

        Interruption-safe: a Ctrl-C at any moment leaves either no container or one this process removes
        (here, or in the CLI's sweep of live sandboxes)."""
        limits = limits or SandboxLimits()
        with engine_errors("image lookup"):
            try:
                image_obj = client.images.get(image)
            except docker.errors.ImageNotFound:
                raise missing_image(image, cls.engine) from None
        sweep_orphans(client)
        mounts = [
            Mount(
                target=target,
                source=str(src),
                type="bind",
                read_only=ro,
                propagation="rslave" if target in propagated else None,
            )
            for target, (src, ro) in binds.items()
        ]
        mounts += [
            Mount(target=f"/etc/{f.name}", source=str(f), type="bind", read_only=True)
            for f in sorted(ENGINE_FILES.iterdir())
        ]
        name = f"replayer-{run_id}"
        container = None
        _LIVE[name] = client
        try:
            with signals.deferred():
                container = client.containers.create(
                    image_obj.id,
                    command=command or ["sleep", "infinity"],
                    network_mode="none",
                    mem_limit=limits.memory,
                    memswap_limit=limits.memory,
                    pids_limit=limits.pids,
                    nano_cpus=int(limits.cpus * 1e9),
                    cap_drop=DROPPED_CAPABILITIES,
                    **cls.engine_options(limits),
                    labels={**(labels or {}), LABEL: "1", f"{LABEL}.run": run_id, OWNER_LABEL: owner()},
                    mounts=mounts,
                    working_dir=workdir,
                    tmpfs={RUN_DIR: "mode=755"},
                    init=True,
                    hostname="replay",
                    log_config=NO_LOG,
                    name=name,
                )
            box = cls(client, container, image_obj.id)
            box.limits = limits
            box.layer = _limit_writable_layer(container, limits.disk_bytes)
            box.disk_limited = box.layer is not None
            with signals.deferred():
                container.start()
        except BaseException as exc:
            with signals.deferred(), contextlib.suppress(SandboxError):
                _remove(client, name)
            if isinstance(exc, docker.errors.APIError):
                raise SandboxError(f"container failed to start: {exc.explanation or exc}") from None
            if isinstance(exc, (docker.errors.DockerException, requests.exceptions.RequestException)):
                raise SandboxError(f"container failed to start: {type(exc).__name__}") from None
            raise
        return box

    @classmethod
    def engine_options(cls, limits: SandboxLimits) -> dict[str, Any]:
        """What this engine is told at create besides what every engine is told: the security options."""
        return {"security_opt": ["no-new-privileges", seccomp.security_opt()]}

    @classmethod
    def connect(cls) -> docker.DockerClient:
        return connect()

    @classmethod
    def start_from(cls, spec: SandboxSpec) -> Self:
        """`start` of what `spec` describes, on the engine the environment names."""
        return cls.start(
            cls.connect(),
            spec.image,
            binds=spec.binds,
            workdir=spec.workdir,
            run_id=spec.run_id,
            limits=spec.limits,
            labels=spec.labels,
            propagated=spec.propagated,
            command=spec.command,
        )

    def exec(
        self,
        argv: list[str],
        *,
        workdir: str,
        env: dict[str, str] | None = None,
        timeout_s: float,
        max_output_bytes: int = MAX_OUTPUT_BYTES,
        kill_on_timeout: bool = True,
    ) -> ExecResult:
        """Run argv in its own process group; on the deadline kill the whole group (or leave it running)."""
        handle = self.start_exec(argv, workdir=workdir, env=env, max_output_bytes=max_output_bytes)
        finished = handle.wait(timeout_s)
        if not finished and kill_on_timeout:
            handle.signal(9)
            handle.wait(_KILL_GRACE_S)
        return handle.result(timed_out=not finished, cleanup=finished or kill_on_timeout)

    def start_exec(
        self,
        argv: list[str],
        *,
        workdir: str,
        env: dict[str, str] | None = None,
        max_output_bytes: int = MAX_OUTPUT_BYTES,
    ) -> ExecHandle:
        """Start argv in its own process group (setsid) and return at once; output is collected as it comes."""
        pgid_file = f"{RUN_DIR}/{uuid.uuid4().hex}.pgid"
        ended, self.ended_pgid_files = self.ended_pgid_files, []
        remove = f"rm -f {' '.join(ended)}; " if ended else ""  # our own names: RUN_DIR/<hex>.pgid
        wrapped = ["setsid", "-w", "bash", "-c", remove + 'echo $$ > "$0"; exec "$@"', pgid_file, *argv]
        api = self.client.api
        with engine_errors("exec"):
            exec_id = api.exec_create(
                self.container.id, wrapped, workdir=workdir, environment=env or {}, stdout=True, stderr=True
            )["Id"]
            stream = api.exec_start(exec_id, stream=True, demux=True)
        return ExecHandle(self, exec_id, stream, pgid_file, max_output_bytes)

    def _run_quiet(self, argv: list[str]) -> None:
        with contextlib.suppress(SandboxError), engine_errors("exec"):
            self.container.exec_run(argv)

    def spawn(self, argv: list[str], *, workdir: str = "/", env: dict[str, str] | None = None) -> None:
        """Start a background process (e.g. a forwarder) that lives as long as the container."""
        api = self.client.api
        _SPAWNED[self.name] = self.container.id
        with engine_errors("exec"):
            exec_id = api.exec_create(self.container.id, argv, workdir=workdir, environment=env or {})["Id"]
            api.exec_start(exec_id, detach=True)

    def forward_port(self, port: int, unix_socket: str) -> None:
        """Inside the container, 127.0.0.1:port -> a mounted unix socket (the container has no network): the
        forwarder started in a session of its own, outliving the exec that starts it and waits for it to
        listen (one exec, not two: each costs the engine tens of milliseconds of CPU)."""
        _SPAWNED[self.name] = self.container.id
        script = (
            'setsid socat "TCP-LISTEN:$0,bind=127.0.0.1,fork,reuseaddr" "UNIX-CONNECT:$1" </dev/null >/dev/null 2>&1 & '
            "for i in $(seq 100); do (exec 3<>/dev/tcp/127.0.0.1/$0) 2>/dev/null && exit 0; sleep 0.05; done; exit 1"
        )
        started = self.exec(["bash", "-c", script, str(port), unix_socket], workdir="/", timeout_s=30)
        if started.exit_code != 0:
            raise SandboxError(f"port forwarder on 127.0.0.1:{port} did not come up")

    def stop_forward(self, port: int) -> None:
        """Kill every process of `forward_port`'s command line on `port` (the listener and the children it
        forked for connections) until none is left."""
        script = (
            'for i in $(seq 100); do found=; for p in /proc/[0-9]*; do case "$(tr "\\0" " " <"$p/cmdline")" in '
            '"socat TCP-LISTEN:$0,"*) found=1; kill -9 "${p#/proc/}";; esac 2>/dev/null; done; '
            '[ -z "$found" ] && exit 0; sleep 0.05; done; exit 1'
        )
        if self.exec(["bash", "-c", script, str(port)], workdir="/", timeout_s=30).exit_code != 0:
            raise SandboxError(f"the port forwarder on 127.0.0.1:{port} did not stop")

    def read_file(self, path: str, max_bytes: int = MAX_FILE_BYTES) -> bytes:
        """A regular file's bytes, read by `cat` inside the container (no link followed at the end)."""
        script = (
            'test -f "$1" && test ! -L "$1" || { echo "not a regular file" >&2; exit 1; }; exec cat -- "$1"'
        )
        res = self.exec(
            ["sh", "-c", script, "read", path], workdir="/", timeout_s=60, max_output_bytes=max_bytes
        )
        if res.exit_code != 0 or res.output_truncated:
            why = "is over the size limit" if res.output_truncated else last_line(res.stderr)
            raise SandboxError(f"cannot read {path} in the sandbox: {why or 'cat failed'}")
        return res.stdout

    def write_file(self, path: str, data: bytes) -> None:
        """Create or replace `path` (parents made as needed), by the engine's archive upload."""
        parent, _, name = path.rstrip("/").rpartition("/")
        made = self.exec(["mkdir", "-p", "--", parent or "/"], workdir="/", timeout_s=60)
        if made.exit_code != 0:
            raise SandboxError(
                f"cannot write {path} in the sandbox: {last_line(made.stderr) or 'mkdir failed'}"
            )
        archive = io.BytesIO()
        with tarfile.open(fileobj=archive, mode="w") as tar:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, int(time.time())
            tar.addfile(info, io.BytesIO(data))
        with engine_errors("file upload"):
            self.container.put_archive(parent or "/", archive.getvalue())

    def mount_points(self) -> list[str]:
        """The mount points the container's processes see (its /proc/PID/mountinfo, read on the host)."""
        with engine_errors("container inspection"):
            self.container.reload()
        pid = self.container.attrs["State"]["Pid"]
        return [point for point, _ in slots.mount_points(Path(f"/proc/{pid}/mountinfo"))]

    def disk_used_up(self) -> bool:
        return self.layer is not None and used_up(self.layer)

    def snapshot(self, tag: str, labels: dict[str, str]) -> str:
        """Commit the container's file system (not its bind mounts, not its processes) as an image; its id.
        Paused from the check to the commit: a complete snapshot within the disk limit
        (sandboxes/committable.py), or SandboxError saying why not."""
        repository, _, version = tag.partition(":")
        with engine_errors("snapshot"):
            self.container.pause()
        try:
            with engine_errors("snapshot"):
                self.container.reload()
            upper = Path((self.container.attrs.get("GraphDriver") or {}).get("Data", {}).get("UpperDir", ""))
            readable = upper.is_absolute() and os.access(upper, os.R_OK | os.X_OK) and upper.is_dir()
            try:
                if readable:
                    why = refusal(upper, self.limits.disk_bytes)
                else:  # another host's engine, or not root: the engine's own account
                    with engine_errors("snapshot"):
                        why = engine_refusal(self.client.api, self.container.id, self.limits.disk_bytes)
            except OSError as exc:
                why = f"the container's layer could not be read ({exc.strerror or exc})"
            if why is not None:
                raise SandboxError(f"the snapshot is refused: {why}")
            with engine_errors("snapshot"):
                image = self.commit(repository, version or None, {**labels, SNAPSHOT_LABEL: "1"})
        finally:
            with engine_errors("snapshot"):
                self.container.unpause()
        return str(image.id)

    def commit(self, repository: str, tag: str | None, labels: dict[str, str]) -> Any:
        """The paused container committed as an image carrying `labels`."""
        return self.container.commit(repository=repository, tag=tag, conf={"Labels": labels}, pause=False)

    def remove_snapshots(self, label: str) -> list[str]:
        return remove_images(self.client, label)

    def image_attrs(self, image: str) -> dict[str, Any]:
        with engine_errors("snapshot inspection"):
            return dict(self.client.images.get(image).attrs)

    def stop(self) -> None:
        with signals.deferred():
            _remove(self.client, self.name)

    def __enter__(self) -> DockerSandbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ExecHandle(WatchedExec):
    """A running exec: its output so far, the time of its last output, signals to its process group."""

    def __init__(self, box: DockerSandbox, exec_id: str, stream: Any, pgid_file: str, max_output_bytes: int):
        self.box = box
        self.exec_id = exec_id
        self.pgid_file = pgid_file
        self.max_output_bytes = max_output_bytes
        self.stdout = bytearray()
        self.stderr = bytearray()
        self.truncated = False
        self._lines_upto = 0
        self.started = time.monotonic()
        self.last_output = self.started
        self._reader = threading.Thread(target=self._pump, args=(stream,), daemon=True)
        self._reader.start()

    def _pump(self, stream: Any) -> None:
        with contextlib.suppress(docker.errors.DockerException, requests.exceptions.RequestException):
            self._read(stream)  # a broken stream ends the exec; result() then asks the engine

    def _read(self, stream: Any) -> None:
        for chunk_out, chunk_err in stream:
            for buf, chunk in ((self.stdout, chunk_out), (self.stderr, chunk_err)):
                if not chunk:
                    continue
                self.last_output = time.monotonic()
                room = self.max_output_bytes - len(self.stdout) - len(self.stderr)
                if room < len(chunk):
                    self.truncated = True
                buf.extend(chunk[: max(room, 0)])

    def wait(self, timeout_s: float) -> bool:
        """True when the process ended (its output stream closed) within the timeout."""
        self._reader.join(timeout_s)
        return not self._reader.is_alive()

    def signal(self, signum: int) -> None:
        """Send signum to the whole process group."""
        self.box._run_quiet(["sh", "-c", f'p=$(cat {self.pgid_file} 2>/dev/null) && kill -{signum} -"$p"'])

    def result(self, timed_out: bool, cleanup: bool = True) -> ExecResult:
        done = not self._reader.is_alive()
        with engine_errors("exec"):
            exit_code = (
                self.box.client.api.exec_inspect(self.exec_id).get("ExitCode")
                if done and not timed_out
                else None
            )
        if cleanup:
            self.box.ended_pgid_files.append(self.pgid_file)
        return ExecResult(
            exit_code=exit_code,
            stdout=bytes(self.stdout),
            stderr=bytes(self.stderr),
            timed_out=timed_out,
            output_truncated=self.truncated,
            duration_s=time.monotonic() - self.started,
        )


def remove_containers(client: docker.DockerClient, label: str = LABEL) -> list[str]:
    """Remove the containers carrying `label` (`key` or `key=value`); returns their names."""
    removed = []
    with engine_errors("container removal"):
        listed = client.api.containers(all=True, filters={"label": label})
    for entry in listed:
        with contextlib.suppress(docker.errors.APIError):
            client.api.remove_container(entry["Id"], force=True)
        removed.append((entry.get("Names") or [entry["Id"]])[0].lstrip("/"))
    return removed


def remove_images(client: docker.DockerClient, label: str = SNAPSHOT_LABEL) -> list[str]:
    """Remove the snapshot images carrying `label` (never an image without the snapshot label)."""
    removed = []
    # one label filter, the snapshot label checked here: Podman 4.3 answers two label filters with none
    for image in client.images.list(filters={"label": label}):
        if SNAPSHOT_LABEL not in image.labels:
            continue
        with contextlib.suppress(docker.errors.NotFound):
            client.images.remove(image.id, force=True)
        removed.append(image.tags[0] if image.tags else image.short_id)
    return removed


def gc(client: docker.DockerClient) -> tuple[list[str], list[str]]:
    """Remove every container and snapshot image the replayer left behind; returns their names."""
    return remove_containers(client), remove_images(client)


def sweep_forwarders(client: docker.DockerClient) -> list[int]:
    """Kill the port forwarders (`forward_port`) left running on the host by a container the engine no
    longer has (sandboxes/leftovers.py); their pids."""

    def ids() -> list[str]:
        with engine_errors("container listing"):
            return [c["Id"] for c in client.api.containers(all=True, quiet=True)]

    return leftovers.sweep_forwarders(ids)
