"""The Adapter base every agent subclasses (a reader, a rerunner factory, a session writer, a launcher,
what its probe needs, with defaults for what agents share), the per-run tool rerunner it hands out, and
helpers they share."""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict, ValidationError

from replayer.adapters.forms import NativeForm, form_of
from replayer.adapters.sandbox_paths import CONTINUE_SPEC
from replayer.adapters.tool_definitions import shipped_path, wire_tools
from replayer.bridges.chat import ChatDialect
from replayer.bridges.core import Dialect, Gate
from replayer.bridges.scripted import Script, ScriptedUpstream
from replayer.bridges.sidecalls import PROBE, SideCall
from replayer.floor import registry
from replayer.floor.divergence import COMMON
from replayer.floor.errors import BadInput, SandboxError, excerpt, last_line
from replayer.floor.foreign import Folder
from replayer.floor.io import MAX_INPUT_BYTES, write_bytes_atomic
from replayer.floor.limits import Budgets
from replayer.floor.pins import load_pins, pinned_version
from replayer.floor.results import AgentStatus, Divergence
from replayer.floor.rundirs import RunDirs
from replayer.floor.trajectory import HeldSession, Observation, ToolCall, ToolKind, Trajectory
from replayer.sandboxes.base import RunningExec, Sandbox

log = logging.getLogger(__name__)


class Continuation(BaseModel):
    """The facts an adapter's rebuild leaves for its continuation and gate (each adapter subclasses it; saved
    as the replay's continuation.json, which forks read back)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


ContT = TypeVar("ContT", bound=Continuation)
"""The adapter's own continuation facts."""


class Rebuild(BaseModel, Generic[ContT]):
    """What an adapter's rebuild wrote and what the bridge must require."""

    model_config = ConfigDict(extra="forbid")
    native_files: list[Path]
    """Absolute paths of the rebuilt native session files."""
    expected_prefix: list[dict[str, Any]]
    """The model-visible conversation ending at the boundary, in the provider's wire format."""
    agent_home: Path | None = None
    """The isolated agent home (HOME / CODEX_HOME ...) the continuation runs with."""
    continuation: ContT
    """Adapter facts the continuation and its gate need (written to continuation.json)."""
    model: str | None = None
    """The model the session ran at the boundary where a session switches models between turns (Codex);
    None: the adapter's `default_model`. result.json records it (`boundary_model`) for the forks."""


class Launch(BaseModel):
    """What the continuation asks of the agent's command line."""

    model_config = ConfigDict(extra="forbid")
    prompt: str | None
    """The nonce or the boundary prompt; None for an agent that needs no nonce, without a boundary prompt."""
    keep_prompt: bool
    """The prompt is the user's boundary prompt (kept), not a nonce (stripped)."""
    port: int
    """The bridge, on 127.0.0.1 inside the sandbox."""
    model: str | None
    max_steps: int | None


@dataclass(frozen=True)
class Ended(Generic[ContT]):
    """A continuation whose agent has exited: what `finish_continuation` copies out, and where to."""

    trajectory: Trajectory
    rebuild: Rebuild[ContT]
    launch: Launch
    home: Path
    """The agent home after the run: a host copy of the sandbox's that follows no link."""
    dest: Path
    """The result's `continued/` folder."""
    sandbox: Sandbox
    """Still running (OpenCode exports its session inside it)."""


class Rerunner(Protocol):
    """Reruns the calls of one trajectory, in order, with the agent's own tool semantics and state."""

    def run(self, call: ToolCall) -> Observation: ...

    def close(self) -> None:
        """Release what the reruns held (a companion process, a socket alias); called once, always."""
        ...


class StepwiseRerunner(ABC):
    """Reruns a trajectory one step at a time: the first call asked for of a step reruns the whole step,
    which gives the fresh observation of each of its calls (a companion's answer, or the tool results a
    driven CLI sends next)."""

    name: ClassVar[str]
    """The agent as errors name it."""

    def __init__(self, trajectory: Trajectory):
        self.steps = {s.index: s for s in trajectory.steps}
        self.step_of = {c.id: s.index for s in trajectory.steps for c in s.calls}
        self.fresh: dict[str, Observation] = {}
        self.kept: frozenset[str] = frozenset()
        """Calls the plan keeps historical (--allow-degraded): a driven CLI is not fed them (it may lack the
        tool, or run a subagent the replay model cannot answer); a companion's result for one is unused."""

    def run(self, call: ToolCall) -> Observation:
        if call.id not in self.fresh:
            self.run_step(self.step_of[call.id])
        if call.id not in self.fresh:
            step = self.step_of[call.id]
            raise SandboxError(f"{self.name} made no observation for call {call.id} in step {step}")
        return self.fresh[call.id]

    @abstractmethod
    def run_step(self, index: int) -> None:
        """Rerun step `index`, filling `fresh` with its calls' observations."""

    def clean_home_copy(self, home: Path) -> None:
        """Remove from `home`, a host copy of the agent home taken between two steps (a boundary one replay
        passes, replayer/pipeline/multiboundary.py), what `close` removes from the live one in the sandbox: the copy
        is then the home a replay that ended at that boundary leaves. The copy holds no links."""
        return None  # a companion leaves its home as it is

    @abstractmethod
    def close(self) -> None: ...


NativeT = TypeVar("NativeT")
"""The adapter's own parsed form of a native file, kept on the trajectory for the rebuild."""


class Pinned(ABC):
    """An agent known by its name in the pin file."""

    name: str
    """Key of this agent in the pin file and in results."""

    def version(self) -> str:
        """The pinned version of this agent (the one that runs)."""
        return load_pins().agents[self.name].version


class Reader(Pinned, Generic[NativeT]):
    """Detect an agent's native format and parse it into the typed trajectory."""

    native_type: type[NativeT]
    """The class of what `parse` keeps of the native file (`Trajectory.keep_native`)."""
    takes_task: bool = False
    """The native format may lack the first prompt, which `task` then supplies (OpenCode's event log)."""

    forms: ClassVar[tuple[NativeForm, ...]]
    """The native forms this agent's trajectories come in (adapters/forms.py)."""

    @classmethod
    def detect(cls, head: list[Any]) -> bool:
        """Whether the first parsed records of a file (`adapters.head.read_head`) are of one of its forms."""
        return cls.form(head) is not None

    @classmethod
    def form(cls, head: list[Any]) -> NativeForm | None:
        """Which of its forms the first parsed records of a file are of."""
        return form_of(cls.forms, head)

    @abstractmethod
    def parse(self, path: Path, task: str | None = None) -> Trajectory:
        """`task` is given only to an adapter that `takes_task`."""

    def first_timestamp(self, trajectory: Trajectory) -> datetime.datetime | None:
        """When the session began, as the file records it, for a format that names no agent version
        (`oldest_inferred_release`); None: not recorded, or not asked."""
        return None

    def inferred_cwd(self, trajectory: Trajectory) -> str | None:
        """The working directory a file that records none reveals (`replayer.cwdinfer`), or None."""
        return None

    def native(self, trajectory: Trajectory) -> NativeT:
        """What `parse` kept of the native file beside the trajectory."""
        return trajectory.native_as(self.native_type)

    @classmethod
    def sessions_held(cls, path: Path, first_line: bytes) -> list[HeldSession] | None:
        """The sessions of `path` when it is a file of this agent's that may hold several (adapters/held.py;
        [] when it holds fewer than two), None when it is no such file."""
        return None


class Rerunning(Pinned):
    """How each historical call is replayed, and the per-run rerunner that replays them."""

    reruns_own_code: bool = True
    """The tools are rerun by the agent's own code at the version that runs (False: by the replayer's
    reimplementation of the pinned version's tools)."""
    drives_other_versions: bool = False
    """Reruns at a version other than the pinned one drive that version's own CLI (the replay model)."""
    oldest_own_version: str | None = None
    """The oldest version whose own code the adapter drives (None: any); a file of an older version runs
    `stand_in_version`, and the result says so."""
    stand_in_version: str | None = None
    """The release that runs a file older than `oldest_own_version`: the nearest one that drives its kind
    of file (None: the pinned one)."""
    oldest_inferred_release: str | None = None
    """For a format that names no version: the oldest release a replay runs as the one current at the
    session's first timestamp (the registry's publish times; the oldest the suite runs this agent's files
    with); never newer than the pin. None: such a file runs the pinned version, the registry not asked."""
    output_normalizers: tuple[str, ...] = COMMON
    """What any rerun's output may differ by from the historical one (names in replayer.divergence.NORMALIZERS)."""

    def substitution(self, trajectory: Trajectory) -> str | None:
        """Why a class the file names cannot run as itself (a fork's own subclass, not in the agent's package)
        while the agent's built-in class it extends can stand in for it with --allow-degraded (recorded as a
        degradation); None: the file names only the agent's own classes (the default)."""
        return None

    def drives(self, version: str) -> bool:
        """Whether reruns at `version` drive that version's own CLI: an adapter that can, at any version but
        the pinned one, whose reimplemented tools the suite proves equal to the driven CLI
        (REPLAYER_RERUN=driven drives the pinned one too)."""
        return self.drives_other_versions and (
            version != pinned_version(self.name) or os.environ.get("REPLAYER_RERUN") == "driven"
        )

    walk_order_tools: frozenset[str] = frozenset()
    """Tools that list files in a parallel directory walk's order: their outputs also compare as sorted lines."""

    def normalizers(self, tool: str) -> tuple[str, ...]:
        """The normalizers a rerun of `tool` is compared under (`replayer.divergence.divergence_of`)."""
        return (*self.output_normalizers, *(("walk_order",) if tool in self.walk_order_tools else ()))

    def own_text(self, tool: str, text: str) -> str | None:
        """The observation's own text (what the command or tool printed) inside the model-visible `text` of
        a `tool` call, without the agent's wrapper (exit code, ids, timings); divergence positions are
        measured on it. None: the whole text is its own (the default)."""
        return None

    def rerun_hint(self, divergences: list[Divergence]) -> str | None:
        """A word on differences this agent's CLI is known to make by itself (the result's hints), so that a
        reader can tell them from a difference of the sandbox. None: nothing known (the default)."""
        return None

    @abstractmethod
    def classify(self, call: ToolCall, trajectory: Trajectory) -> tuple[ToolKind, str | None]:
        """How a call is replayed; for "unknown", why it cannot be rerun."""

    @abstractmethod
    def sandbox_binds(self, trajectory: Trajectory, dirs: RunDirs) -> dict[str, tuple[Path, bool]]:
        """Extra mounts the reruns need (container path -> host path, read-only), besides the workspace."""

    @abstractmethod
    def rerunner(self, trajectory: Trajectory, sandbox: Sandbox, dirs: RunDirs, budgets: Budgets) -> Rerunner:
        """`dirs`: the run's state folders (the workspace copy is `dirs.workspace_at(trajectory.cwd)`)."""
        ...


class SessionWriter(Pinned, Generic[ContT]):
    """Write the native session prefix at a boundary, and read the continued one back."""

    continuation_type: type[ContT]
    """The model of what `rebuild` leaves in `Rebuild.continuation`."""

    def load_continuation(self, path: Path) -> ContT:
        """The continuation facts a rebuild saved at `path` (continuation.json)."""
        try:
            return self.continuation_type.model_validate_json(path.read_bytes())
        except OSError as exc:
            raise BadInput(f"cannot read {path}: {exc.strerror}") from None
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "file"
            raise BadInput(f"{path}: not {self.name}'s continuation: {where}: {first['msg']}") from None

    @abstractmethod
    def rebuild(
        self, trajectory: Trajectory, after_step: int, observations: dict[str, Observation], dest: Path
    ) -> Rebuild[ContT]:
        """Write the native session prefix ending after step `after_step`, with `observations` in place.

        `dest/home` is the agent home; reruns may already have written side files there."""

    @abstractmethod
    def continued_prefix(self, result_dir: Path, model: str | None = None) -> list[dict[str, Any]] | None:
        """The continued conversation (the boundary's prefix and what followed) in this agent's wire form,
        from the cleaned continued native session; None when the job did not continue. `model`: the one the
        continuation was launched with, as its result records it (None: the continued session's own)."""

    def chat_tools(self, native: Path) -> list[dict[str, Any]]:
        """The tool definitions the running version's CLI (the pinned one unless `running_version` says
        another) offers with this rebuilt session, in chat form (recorded data)."""
        return list(recorded_tools(self.name, self.version()))

    def tools_data_name(self) -> str:
        """The name this agent's tool definitions are kept under (adapters/NAME/data, the capture cache)."""
        return self.name


class Launcher(ABC, Generic[ContT]):
    """Continue the pinned agent from the rebuilt session through the bridge."""

    key_env: str = "OPENAI_API_KEY"
    """The host variable the upstream key is read from by default."""
    needs_nonce: bool = False
    """The agent resumes only with a new user prompt (a nonce, stripped by the gate)."""
    idle_timeout_s: float = 300.0
    """Default continuation idle timeout (no output and no bridge traffic)."""
    side_calls: tuple[SideCall, ...] = (PROBE,)
    """The side calls the agent makes besides its main thread (what the gate routes as `side`); the
    bridge refuses any other, and any asking for more output than its shape allows (bridges/sidecalls.py).
    Default: bodiless GET/HEAD probes only."""

    def side_call_models(self, version: str) -> tuple[str, ...]:
        """The models this version of the CLI sends its own side calls to besides the main thread's (a small
        model for titles and summaries), as its recordings show: the bridge serves side calls naming them,
        within the side calls' share of the budget (`BridgeConfig.side_models`). Default: none."""
        return ()

    @staticmethod
    def main_thread(path: str, body: Any) -> bool:
        """Whether a request to the model (its path, its parsed body) is the agent's main conversation rather
        than one of its side calls (a title, a warm-up). Default: every request is."""
        return True

    kept_answer_headers: tuple[str, ...] = ()
    """Answer headers the agent's CLI reads (and may record in its session), which a cassette keeps besides
    the common ones: patterns matched whole, any case."""

    def dialect(self) -> Dialect:
        """The model protocol the agent speaks (the bridge's key header and error shape)."""
        return ChatDialect()

    def observation_text(self, content: str) -> str:
        """An observation as a report shows it: its text, out of any JSON wrapper the wire puts it in
        (default: as sent)."""
        return content

    @abstractmethod
    def gate(self, rebuild: Rebuild[ContT], prompt: str | None, keep_prompt: bool) -> Gate:
        """The pure prefix gate for a continuation resumed with `prompt`."""

    @abstractmethod
    def default_model(self, trajectory: Trajectory) -> str | None: ...

    def continuation_refusal(self, trajectory: Trajectory, model: str | None) -> str | None:
        """Why this trajectory cannot be continued (checked before any container starts), or None."""
        return None

    @abstractmethod
    def continue_command(self, trajectory: Trajectory, launch: Launch) -> tuple[list[str], dict[str, str]]:
        """argv and environment of the pinned agent inside the sandbox."""

    def gate_facts(
        self,
        box: Sandbox,
        trajectory: Trajectory,
        rebuild: Rebuild[ContT],
        model: str | None,
        boundary_prompt: str | None = None,
    ) -> Rebuild[ContT]:
        """The rebuild completed with what only the agent's own code can tell (asked in the sandbox after the
        reruns, before the gate is made and the agent starts; `boundary_prompt` is the user's, when one is
        appended); by default the rebuild as made."""
        return rebuild

    def gate_facts_at_boundary(
        self,
        rerunner: Rerunner,
        trajectory: Trajectory,
        rebuild: Rebuild[ContT],
        model: str | None,
        boundary_prompt: str | None = None,
    ) -> Rebuild[ContT]:
        """`gate_facts` told as the replay passes the boundary, by the reruns' own process while it lives
        (one start of the agent's code less); `gate_facts` then keeps facts told for the same model and
        prompt. By default the rebuild as made (`gate_facts` asks)."""
        return rebuild

    def continuation_metadata(self, launch: Launch, rebuild: Rebuild[ContT]) -> dict[str, Any]:
        """Facts about how the continuation runs, recorded in the result (e.g. who enforces the step budget)."""
        return {}

    @abstractmethod
    def reported_status(self, trajectory: Trajectory, stdout: bytes, continued: Path) -> AgentStatus:
        """The outcome the agent's own output reports, once it exited with code 0 (`continued`: the folder
        of what `finish_continuation` wrote)."""

    @abstractmethod
    def finish_continuation(self, ended: Ended[ContT]) -> dict[str, str]:
        """Copy the continued native session out of `ended.home` into `ended.dest`, cleaned of the envelope;
        the result's files it wrote (key -> path in the result)."""


COMMAND = "{command}"
"""Where a probe's shell command goes in a shell tool's input (`Probing.probe_shell`)."""
PATH = "{path}"
"""Where a probe's absolute file path goes in a read tool's input (`Probing.probe_read`)."""


def filled(template: Any, marker: str, value: str) -> Any:
    """`template` (an adapter's tool input) with each string `marker` replaced by `value`."""
    if isinstance(template, Mapping):
        return {k: filled(v, marker, value) for k, v in template.items()}
    if isinstance(template, list | tuple):
        return [filled(v, marker, value) for v in template]
    return value if template == marker else template


class Probing:
    """What `replayer verify` needs to record a probe session with a version of the agent (replayer/verbs/verify.py
    runs the probe; the defaults: no probe)."""

    probe_native: str | None = None
    """The native file's name in a probe recording; None: the agent has no probe."""
    probe_recordings: tuple[str, ...] = ()
    """Recordings the probe may start from: folder patterns under tests/fixtures, each with a meta.json."""
    probe_shell: Mapping[str, Mapping[str, Any]] = {}
    """The agent's shell tools, the preferred first, each with its input for a command (`COMMAND` marks
    where it goes)."""
    probe_read: Mapping[str, Mapping[str, Any]] = {}
    """Its file-read tools, each with its input for an absolute path (`PATH` marks where); none: the probe
    reads the file with the shell."""
    probe_finish: tuple[str, Mapping[str, Any]] | None = None
    """A tool call (name, input) that ends the session when the version offers that tool (a finish tool)."""
    probe_submit: str | None = None
    """A shell command that ends the session (a submit command); None: the session ends with a text
    answer."""
    answer_pause_s: float = 0.0
    """How long the built-in mock and the probe's scripted model wait before each answer they make up."""
    probe_model: str | None = None
    """The model the probe's continuations name when the probe recording names none the agent can run with
    (OpenHands V0's bare event lists); None: the one the recording names."""

    def probe_items(self, step: int) -> list[Any]:
        """Protocol items (scripted `ItemBlock`s) the probe's model puts before step `step`'s call, so that every
        boundary's prefix holds them (Codex: a reasoning item with the server's id); default none."""
        return []

    def probe_text_action(self, version: str, step: int, command: str) -> str | None:
        """The text of model turn `step` running `command`, for a version offering no shell tool (actions
        written in the text, the last one running `probe_submit`); None: such a version cannot be probed."""
        return None

    def probe_upstream(self) -> type[ScriptedUpstream]:
        """The scripted model service on the agent's wire."""
        return ScriptedUpstream


class Adapter(Reader[NativeT], Rerunning, SessionWriter[ContT], Launcher[ContT], Probing):
    """One agent: read its native format, rerun its tools, write its session, continue it, probe a version.
    Subclasses set `name` and implement the abstract methods; the attributes' defaults fit an agent whose own
    code reruns its tools and resumes without a nonce through the chat dialect, without a probe."""

    def scripted_upstream(self, script: Script, **options: Any) -> ScriptedUpstream:
        """The scripted model service on the agent's wire, answering its side calls aside (`main_thread`)."""
        return self.probe_upstream()(script, main_thread=self.main_thread, **options)


# helpers the adapters share ---------------------------------------------------------------------
OUTPUT_LOG_CHARS = 8000
"""How much of a silent CLI's stdout and stderr (each, its end) the debug log (`-v`) shows."""


def no_request(handle: RunningExec, cli: str, what: str, reason: str | None = None) -> SandboxError:
    """The error of a CLI that sent no model request when one was due: `reason` (the adapter's reading of its
    output) or its last error line, else the last line of its stdout (where a CLI printing JSON events says
    why), and where the rest is: its whole stdout and stderr go to the debug log, which `-v` prints."""
    out = bytes(handle.stdout).decode(errors="replace")
    err = bytes(handle.stderr).decode(errors="replace")
    log.debug(
        "%s sent no model request for %s; its stdout (%d chars, the end):\n%s\nits stderr (%d chars, the end):\n%s",
        cli, what, len(out), out[-OUTPUT_LOG_CHARS:], len(err), err[-OUTPUT_LOG_CHARS:],
    )  # fmt: skip
    if reason is None:
        reason = handle.last_stderr_line() if err.strip() else None
    if reason is None:
        line = last_line(out)
        reason = f"nothing on stderr; its stdout ends {excerpt(line, 300)}" if line else "no output at all"
    ended = "it exited" if handle.wait(0) else "it is still running"
    return SandboxError(f"{cli} sent no model request for {what} ({ended}): {reason} (its whole output: -v)")


def stdout_events(stdout: bytes) -> list[dict[str, Any]]:
    """The JSON objects an agent printed one per line (other lines, such as warnings, are skipped)."""
    events = []
    for line in stdout.splitlines():
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def copy_continued(continued: Path, dest: Path, name: str, key: str) -> dict[str, str]:
    """The continued native file copied as it is to `dest/name` (the result's `continued/`), listed in the
    result's files under `key`; nothing when the agent left no file."""
    if not continued.is_file():
        return {}
    write_bytes_atomic(dest / name, continued.read_bytes())
    return {key: f"continued/{name}"}


def write_continue_spec(home: Path, spec: dict[str, Any]) -> None:
    """The companion's continuation spec, written into the rebuilt home (read at `CONTINUE_SPEC_PATH`)."""
    write_bytes_atomic(home / CONTINUE_SPEC, orjson.dumps(spec, option=orjson.OPT_INDENT_2))


def recorded_tools(agent: str, version: str) -> list[Any]:
    """The tool definitions `version`'s CLI sent on the wire: the pinned versions' ship with the adapter
    (captured by tests/capture_tools.py), another version's once captured from its own CLI
    (adapters/tool_definitions.py)."""
    tools = wire_tools(agent, version)
    if tools is None:
        path = shipped_path(agent, version)
        raise BadInput(f"no recorded tool definitions for {agent} {version} ({path})")
    return tools


def provider_model_refusal(agent: str, model: str | None) -> str | None:
    """Why `model` is not named `provider/model` (as OpenCode and Pi name models), or None."""
    provider, _, name = (model or "").partition("/")
    return None if provider and name else f"{agent} models are named provider/model, not {model!r}"


def last_event(stdout: bytes, kind: str) -> dict[str, Any] | None:
    """The last JSON line of type `kind` an agent printed (a companion's `exit` event, say)."""
    return next((e for e in reversed(stdout_events(stdout)) if e.get("type") == kind), None)


@contextlib.contextmanager
def continued_file(result_dir: Path, name: str) -> Iterator[Path | None]:
    """A result's continued native file `continued/<name>` read the foreign way (a results folder may be a
    download): a path to the very file opened without following a link, a regular file within the input
    bound (`Folder.pinned`); None when the job did not continue. Anything else there is refused.
    `result_dir` itself is one the user named or one a reader found without a link."""
    with Folder.open(result_dir, given=True) as folder:
        if folder.kind(f"continued/{name}") == "missing":
            yield None
            return
        with folder.pinned(f"continued/{name}", MAX_INPUT_BYTES) as path:
            yield path


def first_time(stamps: Iterable[Any]) -> datetime.datetime | None:
    """The first of a file's recorded `stamps` that is an ISO time (`Reader.first_timestamp`), or None."""
    for stamp in stamps:
        if isinstance(stamp, str) and (when := registry.instant(stamp)) is not None:
            return when
    return None
