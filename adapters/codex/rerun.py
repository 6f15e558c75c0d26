"""Rerun a Codex rollout with the CLI of the version that runs, driven by the replay model.

The CLI resumes a scratch rollout that holds only the trajectory's `session_meta` (so the thread id,
and with it `CODEX_THREAD_ID` in every command's environment, is the historical one) with the first
prompt; every main-thread request is answered with the next historical response (its text and its tool
calls with their original ids and argument strings). The CLI executes its own tools, so the next request
carries each fresh output exactly as that version puts it before the model. A later prompt resumes the
thread again. Each request must carry every call fed so far, in order: a CLI that goes its own way is
caught at the step where it does.

A compaction (`compacted`) is not fed: it replaced the history the recording's CLI sent the model, not what
any tool did, so the steps after it are fed to the same running CLI, whose exec sessions (`write_stdin`)
live on through it as the recording's did (the compaction fell mid-turn in the real rollouts seen, where a
resume would need a prompt that is not there). The replay model reports a small usage, so the CLI never
compacts on its own; its requests after that point carry the history uncompacted. What the continuation
resumes is the rebuilt rollout, whose `compacted` record the CLI's resume turns into the replacement
history; a cut before the compaction drops it (`session.prefix_records`).
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path
from typing import Any

import orjson

from replayer.adapters.base import StepwiseRerunner
from replayer.adapters.codex import bundle
from replayer.adapters.codex import session as rollout
from replayer.adapters.codex.continue_launch import KEY_ENV, config_toml
from replayer.adapters.driven import PORT, STEP_MARGIN_S, ReplayModel
from replayer.adapters.sandbox_paths import AGENT_HOME, REPLAY_MODEL_KEY, local_url
from replayer.bridges.scripted import CustomToolBlock, TextBlock, ToolUseBlock, Turn
from replayer.floor.errors import ConfinementError, PlanRefused, SandboxError
from replayer.floor.io import Workspace, remove_entry, write_bytes_atomic
from replayer.floor.limits import Budgets, ReadBudget
from replayer.floor.trajectory import Observation, Trajectory
from replayer.sandboxes.base import RunningExec, Sandbox

WORK_MOUNT = "/run/replayer-codex"
_CONTEXT_PREFIXES = (
    "<environment_context>",
    "<user_instructions>",
    "# AGENTS.md instructions",
    "<INSTRUCTIONS>",
)
"""User-role messages the CLI itself adds to the thread (not prompts)."""

_READ_BUDGET = ReadBudget(max_scan_bytes=64 * 1024 * 1024)
_ROLLOUT_WAIT_S = 10.0
"""The CLI writes its rollout in the background: how long its outputs may lag the next request."""

Block = TextBlock | ToolUseBlock | CustomToolBlock


def _text(payload: dict[str, Any]) -> str | None:
    content = payload.get("content")
    if not isinstance(content, list) or not all(isinstance(c, dict) for c in content):
        return None
    return "".join(str(c.get("text", "")) for c in content if c.get("type") in ("input_text", "output_text"))


def prompts(records: list[rollout.Record]) -> list[tuple[int, str]]:
    """(record index, text) of every user prompt: the `user_message` events where the CLI wrote them
    (0.5x-0.12x), else the user messages that are not context the CLI added. A continued rollout has
    both: a rebuilt head without events, then the CLI's own records with them."""
    events = [
        (at, str(r["payload"].get("message", "")))
        for at, r in enumerate(records)
        if r.get("type") == "event_msg" and r["payload"].get("type") == "user_message"
    ]
    messages = _user_messages(records)
    if events:
        return [(at, text) for at, text in messages if at < events[0][0]] + events
    return messages


def _user_messages(records: list[rollout.Record]) -> list[tuple[int, str]]:
    found = []
    for at, record in enumerate(records):
        payload = rollout.item(record)
        if payload is None or payload.get("type") != "message" or payload.get("role") != "user":
            continue
        text = _text(payload)
        if text is not None and not text.lstrip().startswith(_CONTEXT_PREFIXES):
            found.append((at, text))
    return found


def _block(payload: dict[str, Any]) -> Block | None:
    kind = payload.get("type")
    if kind == "message" and payload.get("role") == "assistant":
        text = _text(payload)
        return TextBlock(text=text) if text else None
    if kind == "function_call":
        raw = str(payload.get("arguments") or "{}")
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            parsed = None
        return ToolUseBlock(
            id=payload["call_id"],
            name=payload["name"],
            input=parsed if isinstance(parsed, dict) else {},
            arguments=raw,
        )
    if kind == "custom_tool_call":
        return CustomToolBlock(
            id=payload["call_id"], name=payload["name"], input=str(payload.get("input", ""))
        )
    return None


def _outputs(lines: bytes) -> dict[str, Any]:
    """Call id -> output of the output records in these rollout lines."""
    found = {}
    for line in lines.splitlines():
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        payload = rollout.item(record) if isinstance(record, dict) else None
        if isinstance(payload, dict) and payload.get("type") in rollout.OUTPUT_TYPES:
            found[str(payload.get("call_id"))] = payload.get("output")
    return found


class DrivenRerunner(StepwiseRerunner):
    name = "codex"

    def __init__(
        self,
        trajectory: Trajectory,
        sandbox: Sandbox,
        work: Path,
        home: Workspace,
        budgets: Budgets,
        model: str | None,
    ):
        """`home`: the agent home as mounted at AGENT_HOME (the CLI writes its rollout there)."""
        assert trajectory.session_id and trajectory.cwd
        super().__init__(trajectory)
        self.native = trajectory.native_as(rollout.Native)
        self.sandbox = sandbox
        self.home = home
        self.thread_id = trajectory.session_id
        self.cwd = trajectory.cwd
        self.step_timeout_s = budgets.max_command_timeout_s + STEP_MARGIN_S
        self.call_at = {
            str(payload.get("call_id")): at
            for at, r in enumerate(self.native.records)
            if (payload := rollout.item(r)) is not None and payload.get("type") in rollout.CALL_TYPES
        }
        self.prompts = prompts(self.native.records)
        self.fed: list[str] = []
        """Every call id fed so far, in order."""
        self.done = 0
        self.offset = 0
        """How much of the CLI's rollout was read."""
        """The last step fed."""
        self.held: Any = None
        """The request the CLI sent after the last step's tools ran, not answered yet."""
        self.handle: RunningExec | None = None
        self.prompt: int | None = None
        self._write_scratch(work, model)
        self.model = ReplayModel(sandbox, work, WORK_MOUNT, model or "gpt-replayed")

    def _write_scratch(self, work: Path, model: str | None) -> None:
        """The session_meta to resume (its provider the replay model's) and the CLI's config."""
        meta = rollout.as_written(self.native, self.native.records[0])
        meta["payload"] = {**meta["payload"], "model_provider": "replayer"}
        write_bytes_atomic(work / "seed.jsonl", rollout.to_jsonl([meta]))
        config = config_toml(model, base_url=local_url(PORT))
        if any(c.tool in bundle.SUBAGENT_TOOLS for s in self.steps.values() for c in s.calls):
            # the CLI would start subagents of its own against the replay model: it answers their calls as
            # unsupported instead, and their recorded observations are kept (--allow-degraded)
            config += "\n[features]\nmulti_agent = false\n"
        write_bytes_atomic(work / "config.toml", config.encode())

    def run_step(self, index: int) -> None:
        while self.done < index:
            self._feed_step(self.done + 1)

    def _prompt_of(self, index: int) -> int:
        """The record index of the prompt whose run step `index` belongs to."""
        first_call = self.call_at[self.steps[index].calls[0].id]
        before = [at for at, _ in self.prompts if at < first_call]
        if not before:
            raise PlanRefused(f"step {index} has no user prompt before it to start the CLI with")
        return before[-1]

    def _feed_step(self, index: int) -> None:
        if all(c.id in self.native.aborted for c in self.steps[index].calls):
            self.done = index  # nothing of it runs again: the CLI is not fed it
            return
        prompt = self._prompt_of(index)
        if prompt != self.prompt:
            self._start_run(prompt)
        assert self.handle is not None
        self._pending(f"step {index}")
        blocks = self._blocks(index, prompt)
        ids = [b.id for b in blocks if not isinstance(b, TextBlock)]
        self.model.feed(Turn(blocks=blocks))
        self.fed += ids
        self.done = index
        timeout = self.step_timeout_s * max(len(ids), 1)
        body = self.model.next_request(self.handle, "codex", f"the outputs of step {index}", timeout)
        self._check(body, f"the outputs of step {index}")
        self._harvest(set(ids))
        self.held = body

    def _pending(self, what: str) -> None:
        """Wait for the request `what` is answered in: the one held since the last step (checked when it
        came), else the CLI's next one, checked now."""
        assert self.handle is not None
        if self.held is None:
            self._check(self.model.next_request(self.handle, "codex", what), what)
        self.held = None

    def _blocks(self, index: int, prompt: int) -> list[Block]:
        """The historical response of step `index`: its messages and calls since the step before (or the
        prompt), up to its last call."""
        previous_end = self.native.step_ends[index - 2] if index > 1 else 0
        call_ids = {c.id for c in self.steps[index].calls}
        blocks = []
        for record in self.native.records[max(previous_end, prompt) : self.native.step_ends[index - 1]]:
            payload = rollout.item(record)
            if payload is None or payload.get("type") in rollout.OUTPUT_TYPES:
                continue
            if payload.get("type") in rollout.CALL_TYPES and (
                payload.get("call_id") not in call_ids or payload.get("call_id") in self.native.aborted
            ):
                continue  # another step's, or interrupted by the user: never run again
            block = _block(payload)
            if block is not None:
                blocks.append(block)
        return blocks

    def _start_run(self, prompt: int) -> None:
        if self.handle is not None:
            self._pending("the end of a run")
            self.model.feed(Turn(blocks=[TextBlock(text=self._closing_text(prompt))]))
            if not self.handle.wait(self.step_timeout_s):
                raise SandboxError("codex did not end its run when the replayed turn ended")
        text = next(t for at, t in self.prompts if at == prompt)
        self.handle = self.sandbox.start_exec(
            ["bash", "-c", self._script(first=self.handle is None), "codex", *self._argv(text)],
            workdir=self.cwd,
            env={
                "PATH": "/usr/local/bin:/usr/bin:/bin",
                "HOME": AGENT_HOME,
                "CODEX_HOME": bundle.CODEX_HOME,
                KEY_ENV: REPLAY_MODEL_KEY,
            },
        )
        self.prompt = prompt

    def _script(self, first: bool) -> str:
        """The first run puts the scratch rollout and the config in CODEX_HOME; every run then execs the CLI."""
        if not first:
            return 'exec "$@" </dev/null'
        rel = rollout.session_path(self.native.meta, self.native.file_name)
        target = f"{bundle.CODEX_HOME}/{rel}"
        return (
            f"mkdir -p {shlex.quote(str(Path(target).parent))} && "
            f"cp {WORK_MOUNT}/seed.jsonl {shlex.quote(target)} && "
            f'cp {WORK_MOUNT}/config.toml "$CODEX_HOME/config.toml" && exec "$@" </dev/null'
        )

    def _argv(self, prompt: str) -> list[str]:
        version = bundle.version()
        codex = f"{bundle.agent_mount()}/{bundle.cli(version).path}"
        # the options before `resume`: 0.58 takes none after it
        argv = [codex, "exec", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"]
        return argv + ["resume", self.thread_id, prompt]

    def _closing_text(self, next_prompt: int) -> str:
        """The historical last answer before the next prompt (the message that ended the run)."""
        for record in reversed(self.native.records[:next_prompt]):
            payload = rollout.item(record)
            if (
                payload is not None
                and payload.get("type") == "message"
                and payload.get("role") == "assistant"
            ):
                return _text(payload) or ""
        return ""

    def _check(self, body: Any, what: str) -> None:
        """The per-step check: the request carries every call fed so far, in order."""
        items = body.get("input") if isinstance(body, dict) else None
        sent = [
            i["call_id"]
            for i in items or []
            if isinstance(i, dict)
            and i.get("type") in rollout.CALL_TYPES
            and isinstance(i.get("call_id"), str)
        ]
        if sent != self.fed:
            raise SandboxError(
                f"the request codex sent for {what} does not carry the replayed calls "
                f"(sent {sent[-3:]}, replayed {self.fed[-3:]})"
            )

    def _harvest(self, ids: set[str]) -> None:
        """The outputs of `ids` as the CLI wrote them into its rollout (the form a rollout stores: some
        versions send the model another rendering), read from where the last read stopped. The agent
        home is the sandbox's: read the confined way (no links followed, regular files only, bounded)."""
        path = f"{bundle.CODEX_HOME}/{rollout.session_path(self.native.meta, self.native.file_name)}"
        deadline = time.monotonic() + _ROLLOUT_WAIT_S
        while True:
            try:
                data = self.home.read(path, _READ_BUDGET, offset=self.offset).data
            except ConfinementError as exc:
                raise SandboxError(f"codex's rollout cannot be read: {exc}") from None
            complete = data[: data.rfind(b"\n") + 1]
            self.offset += len(complete)
            for call_id, output in _outputs(complete).items():
                if call_id in ids:
                    content = output if isinstance(output, str | list) else orjson.dumps(output).decode()
                    self.fresh[call_id] = Observation(content=content)
            if ids <= set(self.fresh) or time.monotonic() > deadline:
                return
            time.sleep(0.02)

    def clean_home_copy(self, home: Path) -> None:
        remove_entry(home / Path(bundle.CODEX_HOME).relative_to(AGENT_HOME))

    def close(self) -> None:
        if self.handle is not None:
            self.handle.stop()
        self.model.close()
        # The CLI's own state (the scratch thread, its databases, logs); the rebuild writes CODEX_HOME anew.
        self.sandbox.exec(
            ["bash", "-c", 'rm -rf "$CODEX_HOME"'],
            workdir="/",
            env={"HOME": AGENT_HOME, "CODEX_HOME": bundle.CODEX_HOME},
            timeout_s=60,
        )
