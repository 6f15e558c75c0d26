"""Every option, declared once: its name (the API keyword, the settings key, the variant key), its type, and
in its `Option`: default, help, flags, which settings layers may set it with what a project file of a folder
the user has not trusted may do with it, and the request fields it feeds. The command's flags
(`cli/options.py`), the settings' variables and trust rules (`settings.py`) and the one merge into a request
(`merge.py`) read it from here. docs/cli.md, "Settings" and "One vocabulary"."""

from __future__ import annotations

import functools
import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Literal, TypedDict, get_args, get_type_hints

from pydantic import AfterValidator

from replayer.floor.limits import SandboxLimits

PathLike = str | os.PathLike[str]

EngineName = Literal["docker", "podman"]


def _registry_url(value: str) -> str:
    parts = urllib.parse.urlsplit(value.strip())
    if parts.scheme not in ("https", "http") or not parts.hostname or len(value) > 2048 or parts.query:
        raise ValueError(
            "a registry is an http(s) URL with a host and no query (e.g. https://registry.example)"
        )
    return value.strip().rstrip("/")


RegistryUrl = Annotated[str, AfterValidator(_registry_url)]
"""A package registry's base URL, without its trailing slash."""
"""The container engines (sandboxes/engines.py)."""

Untrusted = Literal["may", "tighter", "never"]
"""What a project file of a folder the user has not trusted may do with a setting: set it, only tighten
it (a limit), or never set it."""


@dataclass(frozen=True)
class Layers:
    """The settings layers under an option's flag: the user's and the project's file (the key is the
    option's name) and, where `env` names one, a `REPLAYER_*` variable."""

    env: str | None
    untrusted: Untrusted
    why: str = ""
    """Why a folder the user has not trusted may not set it (untrusted == "never")."""


@dataclass(frozen=True)
class Option:
    """One option's declaration (its name and type are the key and type it annotates)."""

    flags: tuple[str, ...] = ()
    """The command's flags (none: a setting or API argument only)."""
    help: str = ""
    metavar: str | None = None
    default: Any = None
    layers: Layers | None = None
    """The settings layers that may set it (None: the flag or API argument alone)."""
    feeds: tuple[str, ...] = ()
    """The request fields it sets: `image` (ReplayRequest, CompareRequest), `continuation.model`
    (ReplayRequest.continuation, CompareRequest.defaults)."""
    flag_type: Any = None
    """What the flag parses, where it is not the API's type (a list of KEY=VALUE, a spec): `cli/options.py`
    turns it into the API's."""
    min: int | None = None
    hidden: bool = False
    show_default: bool = True
    name: str = ""
    """Filled in from the key it annotates."""
    type: Any = None
    """Filled in from the type it annotates."""


def _opt(*flags: str, **fields: Any) -> Option:
    return Option(flags=flags, **fields)


class ReplayOptions(TypedDict, total=False):
    """What `prepare`, `run` and `compare` take alike (the command's options of the same names)."""

    allow_degraded: Annotated[
        bool,
        _opt(
            "--allow-degraded",
            help="Keep historical observations where a rerun is impossible; recorded.",
            default=False,
            feeds=("allow_degraded",),
        ),
    ]
    force: Annotated[
        bool,
        _opt("--force", help="Replace an existing output directory.", default=False, feeds=("force",)),
    ]
    task: Annotated[
        str | None,
        _opt(
            "--task",
            metavar="TEXT",
            help="The first user prompt, for an OpenCode event log (it does not print it).",
            feeds=("task",),
        ),
    ]
    cwd: Annotated[
        str | None,
        _opt(
            "--cwd",
            metavar="PATH",
            help="The working directory, for a file that records none (inferred where its paths reveal it) "
            "or a relative one.",
            feeds=("cwd",),
        ),
    ]
    session: Annotated[
        str | None,
        _opt(
            "--session",
            metavar="ID",
            help="The session to replay, of a file that holds several (`inspect` lists them).",
            feeds=("session",),
        ),
    ]
    agent_version: Annotated[
        str | None,
        _opt(
            "--agent-version",
            metavar="VERSION",
            help="Run this agent version (default: the one the file records or implies, else the pinned one).",
            feeds=("agent_version",),
        ),
    ]
    require_verified: Annotated[
        bool,
        _opt(
            "--require-verified",
            help="Refuse a version that is not verified instead of running it.",
            default=False,
            feeds=("require_verified",),
        ),
    ]


_NOT_YOURS = "it would send your key and the conversation to another server"


class RunOptions(ReplayOptions, total=False):
    """What `run` and `compare` take besides: the sandbox, and the continuation (for `compare`, the
    settings every variant starts from). None, or not given: the settings' value, else the default."""

    image: Annotated[
        str | None,
        _opt(
            "--image",
            metavar="IMAGE",
            help="Sandbox image (default: the project's base image); auto: the environment image the "
            "trajectory names (SWE-bench style).",
            layers=Layers("REPLAYER_IMAGE", "never", "it would choose what every sandbox starts from"),
            feeds=("image",),
        ),
    ]
    limits: Annotated[
        SandboxLimits | str | None,
        _opt(
            "--limits",
            metavar="SPEC",
            help="Container limits, any of memory=4g,pids=1024,cpus=2,disk=8g,files=200000,output=32g (disk: "
            "the quota of the container's file system and of the workspace + agent home; output: all a run's "
            "boundaries write, default 4 x disk; recorded in result.json).",
            layers=Layers("REPLAYER_LIMITS", "tighter"),
            feeds=("limits",),
            flag_type=str | None,
        ),
    ]
    """A SandboxLimits, or a `--limits` spec whose keys replace the settings' ones, key by key."""
    upstream: Annotated[
        str | None,
        _opt(
            "--upstream",
            metavar="URL|mock[:FILE]",
            help="Model service base URL; `mock` is the built-in offline model (no key, a short final "
            'answer), `mock:FILE` answers from a script of turns (docs/cli.md, "The mock model").',
            layers=Layers("REPLAYER_UPSTREAM", "never", _NOT_YOURS),
            feeds=("continuation.upstream",),
        ),
    ]
    upstream_key_env: Annotated[
        str | None,
        _opt(
            "--upstream-key-env",
            metavar="VAR",
            help="Host variable with the upstream key (only the bridge reads it); "
            "default ANTHROPIC_API_KEY for Claude Code, OPENAI_API_KEY for chat-completions agents.",
            layers=Layers(
                "REPLAYER_UPSTREAM_KEY_ENV", "never", "it would choose which host variable is sent as the key"
            ),
            feeds=("continuation.upstream_key_env",),
        ),
    ]
    boundary_prompt: Annotated[
        str | None,
        _opt(
            "--boundary-prompt",
            metavar="TEXT",
            help="A user prompt after the boundary, instead of the nonce.",
            feeds=("continuation.boundary_prompt",),
        ),
    ]
    max_steps: Annotated[
        int | None,
        _opt(
            "--max-steps",
            metavar="K",
            help="Main-thread model requests allowed.",
            feeds=("continuation.max_steps",),
        ),
    ]
    max_requests: Annotated[
        int | None,
        _opt(
            "--max-requests",
            metavar="K",
            min=1,
            help="Every model request the bridge forwards, main-thread and side calls (default 500).",
            feeds=("continuation.max_requests",),
        ),
    ]
    max_tokens: Annotated[
        int | None,
        _opt(
            "--max-tokens",
            metavar="T",
            min=1,
            help="Tokens billed (every usage field, cache and thinking included) the bridge lets the continuation "
            "spend; a request goes only when its worst case fits (default 2000000; set for compare, it spans all "
            "variants).",
            layers=Layers("REPLAYER_MAX_TOKENS", "tighter"),
            feeds=("continuation.max_tokens",),
        ),
    ]
    loop_limit: Annotated[
        int | None,
        _opt(
            "--loop-limit",
            metavar="N",
            min=1,
            help="Rounds in a row sending the same request after the same answer that end the run as `loop` "
            "(default 5).",
            feeds=("continuation.loop_limit",),
        ),
    ]
    end_leftovers: Annotated[
        bool | None,
        _opt(
            "--end-leftovers/--keep-leftovers",
            help="End (or keep) the processes the prefix left running (listed in the result) before the agent "
            "starts (default: end them with a real upstream, keep them with the mock or a cassette).",
            feeds=("continuation.end_leftovers",),
        ),
    ]
    idle_timeout: Annotated[
        float | None,
        _opt(
            "--idle-timeout",
            metavar="SECONDS",
            help="Seconds without output or traffic (default 300; OpenCode 600).",
            feeds=("continuation.idle_timeout_s",),
        ),
    ]
    model: Annotated[
        str | None,
        _opt(
            "--model",
            metavar="MODEL",
            help="Model for the continuation (default: recorded).",
            feeds=("continuation.model",),
        ),
    ]
    agent_env: Annotated[
        dict[str, str] | None,
        _opt(
            "--agent-env",
            metavar="KEY=VALUE",
            help="KEY=VALUE for the agent's environment, its reruns and its continuation (repeatable).",
            feeds=("agent_env", "continuation.agent_env"),
            flag_type=list[str] | None,
        ),
    ]
    """Merged key by key over a lower layer's (a compare variant adds to it)."""
    cassette: Annotated[
        PathLike | None,
        _opt(
            "--cassette",
            metavar="DIR",
            help="Answer from this cassette, offline (no upstream), and verify the outcome (docs/cassettes.md).",
            feeds=("continuation.cassette",),
            flag_type=Path | None,
        ),
    ]
    """Or the one of this trajectory and boundary in a folder of them; upstream and cassette are one
    choice, where the answers come from: a layer that sets either replaces both below it."""
    record_cassette: Annotated[
        PathLike | None,
        _opt(
            "--record-cassette",
            metavar="DIR",
            help="Record the continuation's model traffic and outcome into a new cassette (docs/cassettes.md).",
            feeds=("continuation.record_cassette",),
            flag_type=Path | None,
        ),
    ]
    """(`run` only) Also write the continuation's model traffic and outcome into this new cassette folder."""


class CompareOptions(RunOptions, total=False):
    """What `compare` takes besides: the variants' runs and the check after each (the run options are the
    settings every variant starts from)."""

    repeat: Annotated[
        int,
        _opt("--repeat", "-r", metavar="R", min=1, help="Runs per variant.", default=1, feeds=("repeat",)),
    ]
    workers: Annotated[
        int | None,
        _opt(
            "--workers",
            "-j",
            metavar="N",
            min=1,
            help="Runs at once (default: the workers setting, else 2).",
            layers=Layers("REPLAYER_WORKERS", "tighter"),
            feeds=("parallel",),
        ),
    ]
    """Also the setting of batch's `-j` (jobs at once)."""
    check: Annotated[
        str | None,
        _opt(
            "--check",
            metavar="COMMAND",
            help="Shell command run in each run's container afterwards.",
            feeds=("check",),
        ),
    ]
    check_timeout: Annotated[
        float,
        _opt(
            "--check-timeout",
            metavar="SECONDS",
            help="Seconds for the check.",
            default=600.0,
            feeds=("check_timeout_s",),
        ),
    ]
    keep_snapshot: Annotated[
        bool,
        _opt(
            "--keep-snapshot",
            help="Leave the boundary image (replayer gc removes it).",
            default=False,
            feeds=("keep_snapshot",),
        ),
    ]


class SettingOptions(TypedDict, total=False):
    """The settings that are no option of `run` or `compare`."""

    engine: Annotated[
        EngineName | None,
        _opt(
            help="The container engine every sandbox runs on: docker (default) or podman (`--engine`).",
            layers=Layers(
                "REPLAYER_ENGINE",
                "never",
                "it would choose which engine, and which daemon, runs every sandbox",
            ),
        ),
    ]

    bundles: Annotated[
        Path | None,
        _opt(
            help="The versioned agent bundle cache (default: the pin file's, /var/lib/sandbox-replayer/bundles).",
            layers=Layers(
                "REPLAYER_BUNDLES",
                "never",
                "it would choose the agent code the replayer runs, on the host too",
            ),
        ),
    ]
    npm_registry: Annotated[
        RegistryUrl | None,
        _opt(
            help="The npm registry (or mirror) agent bundles install from and versions are asked of "
            "(default: https://registry.npmjs.org).",
            layers=Layers(
                "REPLAYER_NPM_REGISTRY",
                "never",
                "it would choose where the host downloads the agent code it runs",
            ),
        ),
    ]
    pypi_index: Annotated[
        RegistryUrl | None,
        _opt(
            help="The Python package index (or mirror, its simple API) agent bundles install from and versions "
            "are asked of (default: https://pypi.org/simple).",
            layers=Layers(
                "REPLAYER_PYPI_INDEX",
                "never",
                "it would choose where the host downloads the agent code it runs",
            ),
        ),
    ]
    workspaces: Annotated[
        Path | None,
        _opt(
            help="The clone cache of `--workspace git+URL@REV` (default: workspaces/ beside the bundle cache).",
            layers=Layers(
                "REPLAYER_WORKSPACES", "never", "it would choose where clones are written on the host"
            ),
        ),
    ]
    verdicts: Annotated[
        Path | None,
        _opt(
            help="Where `verify` stores verdicts and runs read them (default: verdicts/ beside the bundle cache).",
            layers=Layers(
                "REPLAYER_VERDICTS",
                "never",
                "it would choose where verdicts are written and which ones are believed",
            ),
        ),
    ]
    trusted: Annotated[
        list[Path] | None,
        _opt(
            help="The user's file only: folders whose replayer.toml may set every setting (`replayer trust DIR`).",
            layers=Layers(None, "never", "only your own file says which folders you trust"),
        ),
    ]
    pinned: Annotated[
        dict[str, str] | None,
        _opt(
            help="The user's file only: the sha256 of each trusted file's content (`replayer trust` writes it).",
            layers=Layers(None, "never", "only your own file says which files you trust"),
        ),
    ]


@functools.cache
def declared(of: type) -> Mapping[str, Option]:
    """The options a TypedDict of them declares, by name, in their order, each with its name and type."""
    found = {}
    for name, hint in get_type_hints(of, include_extras=True).items():
        tp, meta = get_args(hint)[:2]
        found[name] = replace(meta, name=name, type=tp)
    return found


OPTIONS: Mapping[str, Option] = {**declared(CompareOptions), **declared(SettingOptions)}
"""Every option, by name."""


def layered() -> dict[str, Layers]:
    """The options the settings layers may set, and how."""
    return {name: o.layers for name, o in OPTIONS.items() if o.layers is not None}
