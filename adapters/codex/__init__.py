"""Codex: rollout parsing, exec_command and apply_patch reruns with the pinned CLI's semantics, rebuild."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replayer.adapters.base import COMMAND, Adapter, Continuation, Ended, Launch, Rebuild, continued_file
from replayer.adapters.codex import bare, bundle, continue_launch, patch, resume
from replayer.adapters.codex import rerun as driven
from replayer.adapters.codex import session as rollout
from replayer.adapters.codex.continue_launch import config_toml
from replayer.adapters.codex.exec import ExecCommand, cut_output_hint, own_text
from replayer.adapters.codex.gate import CodexGate
from replayer.adapters.forms import NativeForm
from replayer.adapters.sandbox_paths import AGENT_HOME
from replayer.bridges.responses import ResponsesDialect, tools_to_chat
from replayer.bridges.scripted import ItemBlock
from replayer.floor import bundles
from replayer.floor.divergence import COMMON
from replayer.floor.io import Workspace, write_bytes_atomic
from replayer.floor.limits import Budgets
from replayer.floor.pins import load_pins, pinned_version
from replayer.floor.results import AgentStatus, Divergence
from replayer.floor.rundirs import RunDirs
from replayer.floor.trajectory import Observation, ToolCall, ToolKind, Trajectory
from replayer.sandboxes.base import Sandbox


def _provider(native: rollout.Native) -> str | None:
    name = native.meta.get("model_provider")
    return name if isinstance(name, str) and name.isprintable() and name else None


class CodexRerunner:
    def __init__(self, trajectory: Trajectory, sandbox: Sandbox, workspace: Workspace):
        assert trajectory.cwd and trajectory.session_id
        self.workspace = workspace
        self.cwd = trajectory.cwd
        self.exec = ExecCommand(sandbox, trajectory.cwd, bundle.exec_env(trajectory.session_id))

    def run(self, call: ToolCall) -> Observation:
        if call.tool == "exec_command":
            return self.exec.run(call.id, call.input)
        try:
            code, output = patch.apply(str(call.input.get("input", "")), self.workspace, self.cwd)
        except patch.PatchError as exc:
            return Observation(content=str(exc))
        return Observation(content=patch.wrap(code, output))

    def close(self) -> None:
        """Every call is its own process in the sandbox; nothing outlives it."""


class CodexContinuation(Continuation):
    thread_id: str | None
    rollout: str
    """The rebuilt rollout, relative to the agent home."""
    instructions_form: bool = False
    """The CLI sends the base instructions in the request's `instructions` field (rollout.instructions_form)."""
    instructions: str | None = None
    outputs_rendered: bool = True
    """The CLI renders stored shell outputs as text (it offers a freeform apply_patch)."""
    turn: resume.TurnSettings = resume.TurnSettings()
    """The prefix's last recorded turn context (what the continuation keeps of it, and what it cannot)."""
    launched_model: str | None = None
    """The model the CLI is launched with (`-m`; gate_facts): the boundary turn's unless the user names one."""


class CodexAdapter(Adapter[rollout.Native, CodexContinuation]):
    kept_answer_headers = ("x-codex-.*",)  # the CLI reads its turn state and model headers
    continuation_type = CodexContinuation
    output_normalizers = (*COMMON, "random_ids")
    native_type = rollout.Native
    name = bundle.NAME
    needs_nonce = True
    reruns_own_code = False
    drives_other_versions = True
    oldest_own_version = "0.36.0"
    """The first release with `codex exec resume`, which the driven rerun and the continuation call (0.34
    has `exec` alone)."""
    stand_in_version = bare.RESUMED_BY
    """An older rollout is driven by the oldest verified release that resumes the rollouts of that time."""
    probe_native = "rollout.jsonl"
    probe_recordings = ("codex/turn_context/0.101.0/turn_context", "codex/exec", "codex/versions/*/probe")
    """0.101's workspace-write session (reasoning items, a web search call) heads the probes of 0.101 to 0.124:
    the later versions' own sandbox (bwrap) cannot run in the container, so their workspace-write recordings
    hold its failures, which no rerun reproduces."""
    probe_shell = {
        "exec_command": {"cmd": COMMAND},
        "shell_command": {"command": COMMAND},
        "shell": {"command": ["bash", "-lc", COMMAND]},
    }

    def probe_items(self, step: int) -> list[Any]:
        """A reasoning item with the server's id before each probe call: the later CLIs keep the id in the
        rollout, and send it (paginated form) or not (the instructions form)."""
        item: dict[str, Any] = {"type": "reasoning", "id": f"rs_probe_{step:02d}", "content": None}
        item["summary"] = [{"type": "summary_text", "text": f"Probe step {step}."}]
        return [ItemBlock(item={**item, "encrypted_content": f"gAAAAB-probe-{step:02d}"})]

    forms = (
        NativeForm(
            "rollout", rollout.looks_like_enveloped, "the {type, payload} records of the CLIs since mid 2025"
        ),
        NativeForm(
            "bare rollout", bare.looks_bare, "the CLIs of mid 2025 before the envelope (up to about 0.33)"
        ),
    )

    def parse(self, path: Path, task: str | None = None) -> Trajectory:
        return rollout.parse(path)

    def own_text(self, tool: str, text: str) -> str | None:
        return own_text(text)

    def rerun_hint(self, divergences: list[Divergence]) -> str | None:
        return cut_output_hint(divergences)

    def classify(self, call: ToolCall, trajectory: Trajectory) -> tuple[ToolKind, str | None]:
        if call.id in self.native(trajectory).aborted:
            return "pure", None  # the user interrupted it: the CLI's own "aborted" observation is kept
        if call.tool in bundle.PURE_TOOLS:
            return "pure", None
        if trajectory.recorded_on == "windows" and call.tool in bundle.WINDOWS_SHELL_TOOLS:
            return "unknown", f"{call.tool!r}: {bundle.WINDOWS_SHELL_REASON}"
        if call.tool in bundle.CODE_MODE_TOOLS and call.input.keys() <= {"input"}:
            return "unknown", f"{call.tool!r}: {bundle.CODE_MODE_REASON}"
        if self.drives(bundle.version()):
            # the CLI of that version runs its own tools, those of its era included
            if call.tool in bundle.DRIVEN_TOOLS:
                return "rerun", None
            return "unknown", f"unknown tool {call.tool!r}"
        if call.tool not in bundle.RERUN_TOOLS:
            return "unknown", f"unknown tool {call.tool!r}"
        if call.tool == "exec_command":
            if not isinstance(call.input.get("cmd"), str):
                return "unknown", "exec_command without a cmd string (the CLI answered a parse error)"
            if call.input.get("tty"):
                return "unknown", "exec_command with tty=true (a PTY session, later fed by write_stdin)"
        return "rerun", None

    def sandbox_binds(self, trajectory: Trajectory, dirs: RunDirs) -> dict[str, tuple[Path, bool]]:
        # The pinned bundle holds the rg that the reimplemented exec_command puts on PATH (the pinned
        # version's); the running version's bundle holds the CLI that continues.
        pinned = pinned_version(self.name)
        binds = {
            AGENT_HOME: (dirs.home, False),
            bundle.agent_mount(): (load_pins().bundle_dir(self.name), True),
            bundle.agent_mount(pinned): (bundles.bundle_dir(self.name, pinned), True),
        }
        if bundle.cli().needs_node:
            binds[bundles.NODE_MOUNT] = (bundles.host_node(), True)
        if self.drives(bundle.version()):
            binds[driven.WORK_MOUNT] = (dirs.work("codex-driven"), False)
        return binds

    def rerunner(
        self, trajectory: Trajectory, sandbox: Sandbox, dirs: RunDirs, budgets: Budgets
    ) -> CodexRerunner | driven.DrivenRerunner:
        if self.drives(bundle.version()):
            home = Workspace(dirs.home, AGENT_HOME)
            return driven.DrivenRerunner(
                trajectory, sandbox, dirs.work("codex-driven"), home, budgets, self.default_model(trajectory)
            )
        assert trajectory.cwd
        return CodexRerunner(trajectory, sandbox, dirs.workspace_at(trajectory.cwd))

    def rebuild(
        self, trajectory: Trajectory, after_step: int, observations: dict[str, Observation], dest: Path
    ) -> Rebuild[CodexContinuation]:
        native = self.native(trajectory)
        outputs = {call_id: obs.content for call_id, obs in observations.items()}
        records = rollout.prefix_records(native, after_step, outputs)
        turn = resume.recorded(records)
        old_form = resume.sends_instructions_form(native, bundle.version())  # the continuing version's form
        home = dest / "home"
        path = home / ".codex" / rollout.session_path(native.meta, native.file_name)
        write_bytes_atomic(path, rollout.to_jsonl(records))
        write_bytes_atomic(
            home / ".codex" / "config.toml",
            config_toml(turn.model or self.default_model(trajectory), _provider(native), turn=turn).encode(),
        )
        return Rebuild(
            native_files=[path],
            model=turn.model,
            expected_prefix=rollout.wire_input(native, records, paginated_wire=not old_form),
            agent_home=home,
            continuation=CodexContinuation(
                thread_id=trajectory.session_id,
                rollout=str(path.relative_to(home)),
                instructions_form=old_form,
                instructions=rollout.wire_instructions(native),
                outputs_rendered=rollout.freeform_apply_patch(native),
                turn=turn,
            ),
        )

    def continued_prefix(self, result_dir: Path, model: str | None = None) -> list[dict[str, Any]] | None:
        with continued_file(result_dir, "rollout.jsonl") as path:
            if path is None:
                return None
            continued = self.native(rollout.parse(path))
        kept = [r for r in continued.records if rollout.kept_record(r)]
        old_form = resume.sends_instructions_form(continued, bundle.version())  # the version that continued
        return rollout.wire_input(continued, kept, paginated_wire=not old_form)

    def chat_tools(self, native: Path) -> list[dict[str, Any]]:
        return tools_to_chat(super().chat_tools(native))

    # continuation -----------------------------------------------------------------------------
    def dialect(self) -> ResponsesDialect:
        return ResponsesDialect()

    def observation_text(self, content: str) -> str:
        """A shell or apply_patch output's JSON (`{"output", "metadata"}`) as the text newer CLIs send."""
        return rollout.structured_text(content) or content

    def gate(self, rebuild: Rebuild[CodexContinuation], prompt: str | None, keep_prompt: bool) -> CodexGate:
        assert prompt is not None
        cont = rebuild.continuation
        return CodexGate(
            rebuild.expected_prefix,
            prompt,
            keep_prompt=keep_prompt,
            instructions_form=cont.instructions_form,
            instructions=cont.instructions,
            outputs_rendered=cont.outputs_rendered,
            insertions=resume.insertions(bundle.version(), cont.turn, cont.launched_model),
            model=cont.launched_model,
        )

    def default_model(self, trajectory: Trajectory) -> str | None:
        return rollout.last_model(self.native(trajectory))

    def continuation_refusal(self, trajectory: Trajectory, model: str | None) -> str | None:
        if not trajectory.session_id:
            return "the rollout's session_meta has no thread id"
        return None

    def gate_facts(
        self,
        box: Sandbox,
        trajectory: Trajectory,
        rebuild: Rebuild[CodexContinuation],
        model: str | None,
        boundary_prompt: str | None = None,
    ) -> Rebuild[CodexContinuation]:
        """The model the CLI is launched with: the gate expects the CLI's `<model_switch>` message only when
        it is not the boundary turn's."""
        cont = rebuild.continuation.model_copy(update={"launched_model": model})
        return rebuild.model_copy(update={"continuation": cont})

    def continue_command(self, trajectory: Trajectory, launch: Launch) -> tuple[list[str], dict[str, str]]:
        return continue_launch.command(trajectory, launch)

    def continuation_metadata(self, launch: Launch, rebuild: Rebuild[CodexContinuation]) -> dict[str, Any]:
        """The model the CLI was launched with (`-m`) against the boundary turn's (another one: the CLI inserts
        a `<model_switch>` message, which the gate notes)."""
        if launch.model is None:
            return {}
        return {"codex_model": {"launched": launch.model, "boundary_turn": rebuild.continuation.turn.model}}

    def reported_status(self, trajectory: Trajectory, stdout: bytes, continued: Path) -> AgentStatus:
        return continue_launch.status(trajectory, stdout)

    def finish_continuation(self, ended: Ended[CodexContinuation]) -> dict[str, str]:
        rebuild, launch = ended.rebuild, ended.launch
        assert launch.prompt is not None and rebuild.agent_home is not None
        return continue_launch.finish(
            rebuild.native_files[0],
            ended.home,
            rebuild.agent_home,
            ended.dest,
            launch.prompt,
            launch.keep_prompt,
        )
