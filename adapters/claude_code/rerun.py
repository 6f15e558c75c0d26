"""Rerun a Claude Code session with the CLI of the version that runs, driven by the replay model.

The CLI starts with the session's first prompt (`-p`, the session's own id) and every main-thread
request it sends is answered with the next historical assistant turn: its text and the tool calls the
replay reruns, with their original ids. The CLI executes its own tools, so each fresh observation is
rendered exactly as that version renders it (its stream-json `user` events carry the tool_result the
model would see and the structured `tool_use_result`). A later prompt of the session resumes it
(`--resume`). Each request is checked against the replay so far: it must carry every turn fed, in
order, so a CLI that goes its own way is caught at the step where it does.

A compaction is not fed (as for Codex): it replaced the history the recording's CLI sent the model, not what
any tool did. The steps after it are fed as the steps before it, the history the compaction summarized
first: an auto compaction (mid-turn) goes on in the same run, a manual one (`/compact`, then a prompt)
resumes with the next prompt. The replay model reports a small usage, so the CLI never compacts on its own;
its requests after that point carry the history uncompacted. What the continuation resumes is the rebuilt
session, which keeps the compaction's boundary and summary as recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from replayer.adapters.base import StepwiseRerunner, stdout_events
from replayer.adapters.claude_code import bundle, chain, wire
from replayer.adapters.claude_code.session import Native, StepSpan, project_dir_name
from replayer.adapters.driven import PORT, STEP_MARGIN_S, ReplayModel
from replayer.adapters.sandbox_paths import AGENT_HOME, REPLAY_MODEL_KEY, local_url
from replayer.bridges.scripted import CustomToolBlock, TextBlock, ToolUseBlock, Turn
from replayer.floor import bundles
from replayer.floor.errors import PlanRefused, SandboxError
from replayer.floor.io import remove_entry
from replayer.floor.limits import Budgets
from replayer.floor.pins import load_pins
from replayer.floor.trajectory import Observation, Trajectory
from replayer.sandboxes.base import RunningExec, Sandbox

WORK_MOUNT = "/run/replayer-claude"


def cli_env(port: int, key: str) -> dict[str, str]:
    """The environment the replayer gives the CLI: its home, the model service on `port`, nothing fetched."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": AGENT_HOME,
        "TERM": "dumb",
        "SHELL": "/bin/bash",
        "IS_SANDBOX": "1",
        "ANTHROPIC_BASE_URL": local_url(port, ""),
        "ANTHROPIC_API_KEY": key,
        "DISABLE_TELEMETRY": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }


def cli_argv(prompt: str, session_args: list[str], model: str | None) -> list[str]:
    version = load_pins().agents["claude_code"].version
    claude = f"{bundle.agent_mount(version)}/{bundles.cli_path('claude_code', version).path}"
    argv = [claude, *session_args, "-p", prompt, "--output-format", "stream-json", "--verbose"]
    argv += ["--dangerously-skip-permissions"]
    return argv + (["--model", model] if model else [])


COMPACT_COMMAND = "<command-name>/compact</command-name>"
LOCAL_COMMAND_STDOUT = "<local-command-stdout>"


def _prompt_text(rec: dict[str, Any]) -> str | None:
    """A user record that starts a run (`claude -p`): its text; None for tool results, meta records and what
    a manual compaction wrote (the `/compact` command and a local command's output)."""
    if rec.get("type") != "user" or rec.get("isMeta") or chain.tool_result_ids(rec):
        return None
    content = rec.get("message", {}).get("content")
    blocks = wire.as_blocks(content) if not isinstance(content, str) else []
    if isinstance(content, str):
        text = content
    elif blocks and all(b.get("type") == "text" for b in blocks):
        text = "".join(str(b.get("text", "")) for b in blocks)
    else:
        return None
    if COMPACT_COMMAND in text or text.startswith(LOCAL_COMMAND_STDOUT):
        return None
    return text


def run_prompts(items: list[dict[str, Any]], spans: list[StepSpan]) -> dict[int, int]:
    """Step index -> the item index of the prompt whose run it belongs to. A compaction's summary after a
    prompt is none (the steps after it go on in the run they fell in); one that starts the history fed (an
    earlier compaction's, or 1.0.108's, which writes no boundary) is the prompt of the chain it starts."""
    out, prompt = {}, -1
    starts = {span.start: n for n, span in enumerate(spans, start=1)}
    for at, rec in enumerate(items):
        if _prompt_text(rec) is not None and not (rec.get("isCompactSummary") and prompt >= 0):
            prompt = at
        if at in starts:
            if prompt < 0:
                raise PlanRefused(f"step {starts[at]} has no user prompt before it to start the CLI with")
            out[starts[at]] = prompt
    return out


def driven_history(native: Native) -> tuple[list[dict[str, Any]], list[StepSpan]]:
    """The chain the CLI is fed and each step's span in it: the history the last compaction summarized, then
    the chain after it (whose spans follow)."""
    if not native.pre_compaction_steps:
        return native.items, native.spans
    offset = len(native.pre_items)
    after = [StepSpan(start=s.start + offset, end=s.end + offset) for s in native.spans]
    return [*native.pre_items, *native.items], [*native.pre_spans, *after]


class DrivenRerunner(StepwiseRerunner):
    name = "claude"

    def __init__(
        self, trajectory: Trajectory, sandbox: Sandbox, work: Path, budgets: Budgets, model: str | None
    ):
        assert trajectory.session_id and trajectory.cwd
        super().__init__(trajectory)
        self.native = trajectory.native_as(Native)
        self.items, self.spans = driven_history(self.native)
        self.sandbox = sandbox
        self.session_id = trajectory.session_id
        self.reported = trajectory.session_id
        """The session the last run reported (a version without --session-id starts one of its own, and
        1.0.x resumes into a new session holding the history): what the next run resumes."""
        self.cwd = trajectory.cwd
        self.model_name = model
        self.step_timeout_s = budgets.max_command_timeout_s + STEP_MARGIN_S
        self.prompt_of = run_prompts(self.items, self.spans)
        self.fed: list[list[str]] = []
        """The tool call ids of every turn fed so far, in order."""
        self.work = work
        self.model: ReplayModel | None = None
        """Served from the first step on: a run with nothing to rerun starts neither it nor the CLI."""
        self.handle: RunningExec | None = None
        self.prompt: int | None = None
        self.results: dict[str, tuple[dict[str, Any], Any]] = {}

    def _model(self) -> ReplayModel:
        if self.model is None:
            self.model = ReplayModel(
                self.sandbox,
                self.work,
                WORK_MOUNT,
                self.model_name or "claude-replayed",
                main_thread=wire.main_thread,
            )
        return self.model

    def run_step(self, index: int) -> None:
        prompt = self.prompt_of[index]
        if prompt != self.prompt:
            self._start_run(prompt)
        self._next_request(f"step {index}")
        span = self.spans[index - 1]
        blocks: list[TextBlock | ToolUseBlock | CustomToolBlock] = []
        for rec in self.items[span.start : span.end + 1]:
            if rec.get("type") != "assistant":
                continue
            for block in wire.as_blocks(rec["message"].get("content")):
                if block.get("type") == "text":
                    blocks.append(TextBlock(text=str(block.get("text", ""))))
                elif block.get("type") == "tool_use" and block.get("id") not in self.kept:
                    blocks.append(
                        ToolUseBlock(
                            id=block["id"], name=block.get("name", ""), input=block.get("input") or {}
                        )
                    )
        ids = [b.id for b in blocks if isinstance(b, ToolUseBlock)]
        self._model().feed(Turn(blocks=blocks))
        self.fed.append(ids)
        self._collect(set(ids), index)

    def _start_run(self, prompt: int) -> None:
        model = self._model()  # served before the CLI starts
        if self.handle is not None:
            self._next_request("the end of a run")
            closing = Turn(blocks=[TextBlock(text=self._closing_text(prompt))])
            model.feed(closing)
            if not model.answer_until_exit(self.handle, closing, self.step_timeout_s):
                raise SandboxError("claude did not end its run when the replayed turn ended")
            self.fed.append([])
        text = _prompt_text(self.items[prompt])
        assert text is not None
        if self.handle is not None:
            session = ["--resume", self.reported]
        elif bundle.takes_session_id(load_pins().agents["claude_code"].version):
            session = ["--session-id", self.session_id]
        else:
            session = []
        argv = cli_argv(text, session, self.model_name)
        env = cli_env(PORT, REPLAY_MODEL_KEY)
        self.handle = self.sandbox.start_exec(
            ["bash", "-c", 'exec "$@" </dev/null', "claude", *argv], workdir=self.cwd, env=env
        )
        self.prompt = prompt

    def _closing_text(self, next_prompt: int) -> str:
        """The historical last text before the next prompt (the turn that ended the run)."""
        for rec in reversed(self.items[:next_prompt]):
            # not the synthetic reply of a resume the recording made (a compaction's records precede it)
            if rec.get("type") == "assistant" and rec.get("message", {}).get("model") != "<synthetic>":
                texts = [
                    b.get("text", "")
                    for b in wire.as_blocks(rec["message"].get("content"))
                    if b.get("type") == "text"
                ]
                return "".join(str(t) for t in texts)
        return ""

    def _next_request(self, what: str) -> None:
        assert self.handle is not None
        self._check(self._model().next_request(self.handle, "claude", what), what)

    def _check(self, body: Any, what: str) -> None:
        """The per-step check: the request carries every turn fed so far, in order."""
        sent = [
            [b["id"] for b in wire.as_blocks(m.get("content")) if b.get("type") == "tool_use"]
            for m in body.get("messages") or []
            if isinstance(m, dict) and m.get("role") == "assistant"
        ]
        sent = [ids for ids in sent if ids]
        if bundle.repeats_turns(load_pins().agents["claude_code"].version):
            sent = [ids for at, ids in enumerate(sent) if at == 0 or ids != sent[at - 1]]
        expected = [ids for ids in self.fed if ids]
        if sent != expected:
            raise SandboxError(
                f"the request claude sent for {what} does not carry the replayed turns "
                f"(tool calls sent {sent[-3:]}, replayed {expected[-3:]})"
            )

    def _take(self, lines: bytes) -> None:
        for event in stdout_events(lines):
            if event.get("type") == "system" and isinstance(event.get("session_id"), str):
                self.reported = str(event["session_id"])
            if event.get("type") != "user" or event.get("parent_tool_use_id"):
                continue
            for block in wire.as_blocks((event.get("message") or {}).get("content")):
                if block.get("type") == "tool_result" and isinstance(block.get("tool_use_id"), str):
                    self.results[block["tool_use_id"]] = (block, event.get("tool_use_result"))

    def _collect(self, call_ids: set[str], index: int) -> None:
        assert self.handle is not None

        def done(lines: bytes) -> bool:
            self._take(lines)
            return call_ids <= set(self.results)

        if not self.handle.await_lines(done, self.step_timeout_s * max(len(call_ids), 1)):
            missing = ", ".join(sorted(call_ids - set(self.results)))
            raise SandboxError(f"claude returned no result for {missing} in step {index}: {self._tail()}")
        for call_id in call_ids:
            block, structured = self.results[call_id]
            content = block.get("content", "")
            self.fresh[call_id] = Observation(
                content=content if isinstance(content, str | list) else str(content),
                is_error=block.get("is_error"),
                structured=structured,
            )

    def _tail(self) -> str:
        assert self.handle is not None
        return self.handle.last_stderr_line()

    def clean_home_copy(self, home: Path) -> None:
        """As close's script: only .claude/projects/<project>/<session id>/ (the persisted outputs) stays."""
        for top in (home, home / ".claude"):
            keep = ".claude" if top == home else "projects"
            for entry in list(top.iterdir()) if top.is_dir() else []:
                if entry.name != keep:
                    remove_entry(entry)
        project = home / ".claude" / "projects" / project_dir_name(self.cwd)
        for entry in list(project.iterdir()) if project.is_dir() else []:
            if entry.name != self.session_id:
                remove_entry(entry)

    def close(self) -> None:
        if self.handle is not None:
            self.handle.stop()
        if self.model is not None:
            self.model.close()
        if self.handle is None:  # the CLI never ran: its home holds nothing of it
            return
        # What the driven CLI left in its home besides the tool outputs it persisted (the continuation
        # starts from the rebuilt session, as after any rerun): removed inside the sandbox.
        project = f"{AGENT_HOME}/.claude/projects/{project_dir_name(self.cwd)}"
        keep = f"{project}/{self.session_id}"
        script = (
            f'find "$HOME" -mindepth 1 -maxdepth 1 ! -name .claude -exec rm -rf {{}} +; '
            f'find "$HOME/.claude" -mindepth 1 -maxdepth 1 ! -name projects -exec rm -rf {{}} +; '
            f'rm -f "{project}/{self.session_id}.jsonl"; '
            f'find "{project}" -mindepth 1 -maxdepth 1 ! -path "{keep}" -exec rm -rf {{}} + 2>/dev/null; true'
        )
        self.sandbox.exec(["bash", "-c", script], workdir="/", env={"HOME": AGENT_HOME}, timeout_s=60)
