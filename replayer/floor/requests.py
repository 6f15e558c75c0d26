"""What a verb asks for: a replay, a continuation's settings (every layer of them), a compare and its
variants, the workspace to start from."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BeforeValidator, ConfigDict, Field, PrivateAttr

from replayer.floor.limits import Budgets, Count, GraceSeconds, SandboxLimits, Seconds
from replayer.floor.model_base import Frozen

GIT_WORKSPACE_PREFIX = "git+"
_GIT_REV = r"^[A-Za-z0-9_][A-Za-z0-9._/-]*$"
"""No leading `-`: a revision is never taken for one of git's options."""


class GitWorkspace(Frozen):
    """`--workspace git+URL@REV`: the repository at URL, cloned and checked out at REV (a commit, a tag or
    a branch) as the initial workspace."""

    url: str = Field(min_length=1)
    rev: str = Field(pattern=_GIT_REV)

    @property
    def spec(self) -> str:
        return f"{GIT_WORKSPACE_PREFIX}{self.url}@{self.rev}"


def workspace_spec(value: object) -> object:
    """A string `git+URL@REV` is a GitWorkspace (split at the last `@`, so `git@host:repo` URLs keep
    theirs); any other string is a directory path."""
    if isinstance(value, str) and value.startswith(GIT_WORKSPACE_PREFIX):
        url, sep, rev = value[len(GIT_WORKSPACE_PREFIX) :].rpartition("@")
        if not sep or not url or not re.match(_GIT_REV, rev):
            raise ValueError(f"a git workspace is git+URL@REV (a commit, tag or branch), got {value!r}")
        return GitWorkspace(url=url, rev=rev)
    return value


WorkspaceSpec = Annotated[Path | GitWorkspace, BeforeValidator(workspace_spec)]
"""A workspace directory, or a repository to clone (`git+URL@REV`)."""


class GitCheckout(Frozen):
    """The repository a run's workspace was cloned from, and the commit it was checked out at."""

    url: str
    rev: str
    commit: str


def _empty_is_unset(value: object) -> object:
    return None if value == "" else value


DEFAULT_MAX_REQUESTS = 500
"""A continuation's request budget (main-thread and side calls), docs/bridge.md "Budgets"."""
DEFAULT_MAX_TOKENS = 2_000_000
"""A continuation's token budget, every billed usage field counted (docs/bridge.md "Budgets": at Claude
Sonnet's list prices, at most $6 if all were input, $30 if all were output)."""
DEFAULT_LOOP_LIMIT = 5
"""Rounds in a row sending the same request after the same answer that end a continuation (bridges/loop.py)."""


class ContinueSettings(Frozen):
    """The continuation settings one layer gives, or all layers merged (None: this layer leaves it unset).

    The layers, later over earlier (`merge`): the built-in defaults (`ContinueRequest`'s); the settings
    files and `REPLAYER_*` (`replayer.floor.settings.load` merges those: environment > project file > user file);
    the flags or API arguments (`floor/merge.py` puts them over the settings); then, for one compare
    variant, its spec. A batch manifest line's `continuation` is the only layer of its jobs. `request()`
    turns the merged settings into what the engine receives. docs/cli.md, "Settings" and "One vocabulary"."""

    upstream: Annotated[str | None, BeforeValidator(_empty_is_unset)] = None
    """Base URL of the real model service (the bridge forwards there; the sandbox never sees it)."""
    upstream_key_env: str | None = None
    """Host environment variable holding the upstream credential; only the bridge reads it.
    Default: the agent's own (ANTHROPIC_API_KEY for Claude Code, OPENAI_API_KEY for the chat agents)."""
    boundary_prompt: str | None = None
    """Replaces the nonce and is kept: input condition boundary_user_prompt_appended."""
    max_steps: Count | None = None
    """Main-thread model requests allowed through the bridge."""
    max_requests: Count | None = None
    """Every request forwarded (main-thread and side calls) allowed through the bridge (default 500)."""
    max_tokens: Count | None = None
    """Tokens billed (every usage field the upstream reports, cache and thinking included) the bridge lets
    the continuation spend: a request goes only when its worst case fits (default 2,000,000). Set for a
    compare or a batch, it spans all their continuations."""
    loop_limit: int | None = Field(default=None, ge=1)
    """Main-thread rounds in a row that send the same request again after the same answer, after which
    the continuation ends as `loop` (default 5; bridges/loop.py)."""
    end_leftovers: bool | None = None
    """End the processes the prefix left running in the sandbox (listed in the result) before the agent
    starts (default: end them with a real upstream; list them and leave them with the mock or a cassette;
    `--keep-leftovers`: False)."""
    idle_timeout_s: Seconds | None = None
    """No agent output and no bridge traffic for this long ends the run (default: the adapter's, 300 s;
    OpenCode 600 s)."""
    grace_s: GraceSeconds | None = None
    """After SIGINT, how long the agent gets before its process group is killed (default 10 s)."""
    model: str | None = None
    """Default: the model recorded in the session."""
    agent_env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for the agent (e.g. its retry count); recorded in the result. Merged key by key."""
    record_cassette: Path | None = None
    """Write every model exchange of the continuation and its outcome into this new cassette directory."""
    cassette: Path | None = None
    """Answer from this cassette instead of an upstream (no upstream, no key) and verify the outcome
    against the recording's (docs/cassettes.md)."""

    def merge(self, later: ContinueSettings) -> ContinueSettings:
        """These settings with `later`'s over them: each setting `later` sets wins, `agent_env` is merged
        key by key, and `upstream` / `cassette` are one choice (where the answers come from): a layer that
        sets either replaces both."""
        base, over = _settings_of(self), _settings_of(later)
        given = over.model_dump(exclude_none=True, exclude={"agent_env"})
        merged = base.model_dump(exclude={"agent_env"})
        if "upstream" in given or "cassette" in given:
            merged["upstream"] = merged["cassette"] = None
        return ContinueSettings.model_validate(
            {**merged, **given, "agent_env": {**base.agent_env, **over.agent_env}}
        )

    def request(self) -> ContinueRequest:
        """What the engine receives: these settings, every unset one at its default (no upstream: "")."""
        given = _settings_of(self).model_dump(exclude_none=True)
        return ContinueRequest.model_validate({"upstream": "", **given})


def _settings_of(layer: ContinueSettings) -> ContinueSettings:
    """The continuation settings alone of a model that has more (a variant's spec, a ContinueRequest)."""
    if type(layer) is ContinueSettings:
        return layer
    return ContinueSettings.model_validate(
        {name: getattr(layer, name) for name in ContinueSettings.model_fields}
    )


class ContinueRequest(ContinueSettings):
    """`run --continue`: let the pinned agent go on from the boundary through the bridge."""

    upstream: str
    """Base URL of the real model service ("" when a cassette answers)."""
    grace_s: GraceSeconds = 10.0
    max_requests: Count = DEFAULT_MAX_REQUESTS
    max_tokens: Count = DEFAULT_MAX_TOKENS
    loop_limit: Count = DEFAULT_LOOP_LIMIT
    token_ledger: Path | None = None
    """The file holding `max_tokens` for every continuation of one compare or batch (set by the verb, when
    the user set a budget; never by a settings layer); None: the continuation's own."""
    batch_ledger: Path | None = None
    """The ledger file of the batch's own budget (`replayer batch --max-tokens`, set by the batch; its limit in
    the file), which this continuation's requests fit as well as `max_tokens`."""

    def ends_leftovers(self) -> bool:
        """`end_leftovers`, by default true when a real upstream (not the mock, not a cassette) is paid."""
        if self.end_leftovers is not None:
            return self.end_leftovers
        return bool(self.upstream) and self.upstream.partition(":")[0] != "mock"


class ReplayRequest(Frozen):
    mode: Literal["prepare", "run"]
    trajectory: Path
    after_step: int
    out: Path
    workspace: WorkspaceSpec | None = None
    image: str | None = None
    """The sandbox image; `auto`: the environment image the trajectory names (SWE-bench style)."""
    allow_degraded: bool = False
    force: bool = False
    budgets: Budgets = Field(default_factory=Budgets)
    continuation: ContinueRequest | None = None
    task: str | None = None
    """The first user prompt, for a native format that does not store it (OpenCode's event log)."""
    cwd: str | None = None
    """The working directory, for a file that records none (--cwd); refused when the file records another."""
    session: str | None = None
    """The session to replay, for a file that holds several (an OpenHands evaluation output's instance_id,
    an OpenCode session id); for any other file, its own session id or nothing."""
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    labels: dict[str, str] = Field(default_factory=dict)
    """Extra container labels (a batch labels its containers to remove those of a dead run)."""
    agent_version: str | None = None
    """The agent version to run, stated (default: the one the file records or implies)."""
    require_verified: bool = False
    """Refuse a version that is not verified instead of running it and saying so."""
    agent_env: dict[str, str] = Field(default_factory=dict)
    """The recording's environment (--agent-env) for every rerun command; the continuation gets it
    through `continuation.agent_env`."""
    _named: dict[str, object] = PrivateAttr(default_factory=dict)
    """Fields read through a held folder (an untrusted manifest's names, `/proc/PID/fd/N/NAME`: live only
    while the batch runs) as the user named them: what the result reports (`reported`)."""

    def naming(self, named: dict[str, object]) -> ReplayRequest:
        """This request, reported with `named`'s values for its fields."""
        self._named = named
        return self

    def reported(self) -> ReplayRequest:
        """The request as the result says it: the names the user gave, not the held paths read."""
        return self.model_copy(update=self._named) if self._named else self


class VariantSpec(ContinueSettings):
    """What one compare variant changes from the shared continuation settings (None: keep them)."""

    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )
    boundary_prompt: str | None = Field(default=None, alias="prompt")
    """A boundary prompt (input condition boundary_user_prompt_appended); `prompt` in compare.json."""
    version: str | None = None
    """The agent's version (a bundle `replayer bundles add AGENT@VERSION` installed)."""
    patch: Path | None = None
    """A unified diff applied to the workspace at the boundary (git apply, in the run's container)."""


class Variant(Frozen):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
    spec: VariantSpec = Field(default_factory=VariantSpec)


class CompareRequest(Frozen):
    """`replayer compare`: one replay to the boundary, then every variant R times from its snapshot."""

    trajectory: Path
    after_step: int
    workspace: WorkspaceSpec
    out: Path
    variants: list[Variant]
    repeat: Count = 1
    parallel: Count = 2
    check: str | None = None
    """A shell command run in each run's container after the continuation (and once at the boundary)."""
    check_timeout_s: Seconds = 600.0
    defaults: ContinueRequest
    """The continuation settings every variant starts from."""
    image: str | None = None
    allow_degraded: bool = False
    force: bool = False
    task: str | None = None
    cwd: str | None = None
    """The working directory, for a file that records none (--cwd); refused when the file records another."""
    session: str | None = None
    """The session to replay, for a file that holds several (an OpenHands evaluation output's instance_id,
    an OpenCode session id); for any other file, its own session id or nothing."""
    budgets: Budgets = Field(default_factory=Budgets)
    keep_snapshot: bool = False
    """Leave the snapshot image behind (labelled; `replayer gc` removes it)."""
    limits: SandboxLimits = Field(default_factory=SandboxLimits)
    agent_version: str | None = None
    """As in ReplayRequest: the version the replay (and every variant without `version=`) runs."""
    require_verified: bool = False
