"""Podman behind the seam (sandboxes/base.py): Debian's podman 4.3, driven through its Docker-compatible API
(`podman system service` on a unix socket that `replayer setup --engine podman` starts) by the Docker
engine's code, with what differs here:

- the seccomp profile is a file on the host (the compatible API takes a path, not the profile's text);
- `nofile` and `nproc` limits are given (Podman's defaults are above this host's hard limits: "error setting
  rlimit type 7");
- a commit takes its labels as `LABEL` changes (the compatible API ignores the configuration's labels);
- no pre-started fork slots and no container ahead (its overlay layers are not Docker's, and a slot's
  later mounts are not propagated): forks and batch jobs start their containers when asked;
- no disk quota on its data root (/var/lib/containers is not the btrfs file system docker_up.sh makes).

docs/engines.md lists the differences."""

from __future__ import annotations

import hashlib
import resource
from pathlib import Path
from typing import Any

import docker
from docker.types import Ulimit

from replayer.floor.errors import SandboxError
from replayer.floor.io import write_bytes_atomic
from replayer.floor.limits import SandboxLimits
from replayer.sandboxes import seccomp
from replayer.sandboxes.base import SandboxSpec
from replayer.sandboxes.docker import DockerEngine, DockerSandbox

SOCKET = Path("/run/sandbox-replayer/podman.sock")
"""The API socket `replayer setup --engine podman` serves (podman_up.sh)."""
PROFILES = Path("/var/lib/sandbox-replayer/seccomp")
"""The seccomp profile files, named by their content's hash."""


def connect() -> docker.DockerClient:
    """A client of Podman's API socket that answers, or SandboxError naming why not."""
    try:
        client = docker.DockerClient(base_url=f"unix://{SOCKET}", timeout=120)
        client.ping()
    except Exception as exc:  # the SDK raises several unrelated types for an absent engine
        raise SandboxError(
            f"Podman is not reachable at {SOCKET} ({type(exc).__name__}); run replayer setup --engine podman"
        ) from None
    return client


def profile_file() -> Path:
    """The sandboxes' seccomp profile as a file the engine reads (written once per content)."""
    text = seccomp.security_opt().removeprefix("seccomp=").encode()
    path = PROFILES / f"{hashlib.sha256(text).hexdigest()[:16]}.json"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
        write_bytes_atomic(path, text)
    return path


_LIMITS = {
    "nofile": ("Max open files", resource.RLIMIT_NOFILE),
    "nproc": ("Max processes", resource.RLIMIT_NPROC),
}


def _ulimit(name: str) -> Ulimit:
    """The service's own hard limit (what a Docker container inherits from dockerd; the OCI runtime refuses
    more), read from its /proc entry, else this process's."""
    row, which = _LIMITS[name]
    hard = resource.getrlimit(which)[1]
    try:
        pid = int(Path(f"{SOCKET}.pid").read_text())
        for line in Path(f"/proc/{pid}/limits").read_text().splitlines():
            if line.startswith(row):
                hard = int(line[len(row) :].split()[1])
    except (OSError, ValueError, IndexError):
        pass  # another user's service, or not this host's: this process's own limit
    hard = 1 << 20 if hard == resource.RLIM_INFINITY or hard < 0 else hard
    return Ulimit(name=name, soft=hard, hard=hard)


class PodmanSandbox(DockerSandbox):
    """One Podman container, as a DockerSandbox is one Docker container."""

    prestarts = False
    engine = "podman"

    @classmethod
    def connect(cls) -> docker.DockerClient:
        return connect()

    @classmethod
    def engine_options(cls, limits: SandboxLimits) -> dict[str, Any]:
        return {
            "security_opt": ["no-new-privileges", f"seccomp={profile_file()}"],
            "ulimits": [_ulimit("nofile"), _ulimit("nproc")],
        }

    def commit(self, repository: str, tag: str | None, labels: dict[str, str]) -> Any:
        changes = [f"LABEL {key}={value}" for key, value in labels.items()]
        return self.container.commit(repository=repository, tag=tag, changes=changes, pause=False)


class PodmanEngine(DockerEngine):
    """Podman as the replayer uses it: see the module's docstring."""

    name = "podman"
    label = "Podman"
    up_script = "podman_up.sh"
    up_args = [str(SOCKET)]
    tools = {"podman": "podman"}
    prestarts = False
    connect = staticmethod(connect)

    def start(self, spec: SandboxSpec) -> PodmanSandbox:
        return PodmanSandbox.start_from(spec)
