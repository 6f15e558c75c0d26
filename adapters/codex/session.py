"""Codex rollout JSONL (paginated with `ordinal`s, legacy, or bare from before the envelope): records, steps,
the prefix and its wire form.

A step is one model response's complete set of tool calls (`function_call`, `custom_tool_call`)
with their outputs: the CLI sends all calls of a response first, then the outputs in call order.
The wire `input` is the base-instructions developer message (built from `session_meta`, not a
response_item) followed by the response items, `internal_chat_message_metadata_passthrough` removed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict

from replayer.adapters import carried
from replayer.adapters.codex import bare
from replayer.adapters.shapes import ORJSON_DEPTH, unwritable
from replayer.floor.errors import EXCERPT_CHARS, BadInput, bad_record
from replayer.floor.io import read_input, sha256_soon
from replayer.floor.trajectory import Observation, StartingState, Step, ToolCall, Trajectory

Record = dict[str, Any]
CALL_TYPES = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output"}
OUTPUT_TYPES = set(CALL_TYPES.values())
PASSTHROUGH = "internal_chat_message_metadata_passthrough"
GHOST_SNAPSHOT = "ghost_snapshot"
"""An undo checkpoint the CLI records and never sends (codex-rs history: `remove_ghost_snapshots`)."""
_FILTERED_LINE = "- If you create a checklist or task list,"
"""The pinned CLI drops base-instruction lines starting so (observed on the wire; the prefix is in its binary)."""
IDLESS_ON_WIRE = {"message", "reasoning", "function_call", "custom_tool_call", "web_search_call"}
"""Items the CLIs of the `instructions` form send without their `id`, which later ones of them (0.142: observed)
keep in the rollout: the server's `rs_`/`fc_`/`msg_`/`ws_` ids are not sent back (codex-rs `skip_serializing`
on the wire)."""
KEPT_TYPES = {"session_meta", "world_state", "turn_context", "response_item", "compacted"}
"""What a rebuilt rollout holds: event_msg and token_usage_record are UI and telemetry, except a rollback."""
KNOWN_TYPES = KEPT_TYPES | {"event_msg", "token_usage_record", bare.STATE}
"""The record kinds of the releases the replayer knows; another (a newer release's) is carried as recorded
(`adapters/carried.py`): codex-rs skips a rollout line it cannot read when it resumes."""
ROLLED_BACK = "thread_rolled_back"
"""The event of a rollback (the Desktop app's and TUI's undo of the last turns, e.g. after an interrupt): the
CLI drops those turns from the history it sends and rebuilds on resume, so a rebuilt rollout keeps it."""
_CONTEXTUAL_USER = (
    "# AGENTS.md instructions for ",
    "<user_instructions>",
    "<environment_context>",
    "<skill>",
    "<user_shell_command>",
    "<turn_aborted>",
    "<subagent_notification>",
)
"""User messages codex-rs does not count as a user turn (`is_contextual_user_message_content`)."""
SAFE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
"""A thread id becomes a file name and a command-line argument: no path separators, no leading dash."""
MAX_DEPTH = ORJSON_DEPTH
"""orjson writes nothing nested deeper; a record that could not be written back is refused when read."""
Problem = tuple[str, str, Any]
"""(field, what is wrong, the value) of a refused record."""
_SHORT = 2 * MAX_DEPTH + 1
"""A line this short cannot hold a value nested deeper than MAX_DEPTH (`shapes.shallow_text`)."""


class Native(BaseModel):
    model_config = ConfigDict(extra="forbid")
    records: list[Record]
    """In the envelope form (`{type, payload}`); a bare rollout's lines are read into it."""
    meta: dict[str, Any]
    paginated: bool
    bare_meta: dict[str, Any] | None = None
    """Read from the form before the envelope (`adapters/codex/bare.py`): the session_meta fields the
    rebuild adds, since it writes the envelope."""
    step_ends: list[int]
    """Per step: index of the record just past its last output."""
    output_index: dict[str, int]
    """Call id -> index of the record holding its output."""
    last_compaction: int | None
    """Index of the last `compacted` record."""
    aborted: frozenset[str] = frozenset()
    """Calls of a turn the user interrupted (`turn_aborted`) that did not finish: kept with the observation
    the CLI gave them, never rerun."""
    unanswered: frozenset[str] = frozenset()
    """Those of them without an output record: the CLI's resume sends its own "aborted" output for each."""
    pre_compaction_steps: int
    file_name: str


def looks_like_enveloped(head: list[Any]) -> bool:
    first = head[0] if head else None
    return (
        isinstance(first, dict)
        and first.get("type") == "session_meta"
        and isinstance(first.get("payload"), dict)
        and "cli_version" in first["payload"]
    )


def _read(path: Path) -> tuple[list[Record], list[int], str, bool]:
    """The records, their line numbers, the file's sha256 and whether it is bare; each record checked for
    the types read later (the SHA-256 taken meanwhile on another core)."""
    raw = read_input(path)
    digest = sha256_soon(raw)
    records: list[Record] = []
    lines: list[int] = []
    is_bare = False
    loads, append, at = orjson.loads, records.append, lines.append
    for number, line in enumerate(raw.split(b"\n"), 1):
        if not line or line.isspace():  # blank, or past the last newline; strip() would copy it
            continue
        try:
            record = loads(line)
        except orjson.JSONDecodeError:
            raise BadInput(f"{path}: line {number} is not JSON (a damaged rollout)") from None
        if not records:
            is_bare = bare.is_header(record)
        if is_bare:
            record = bare.envelope(record, first=not records)
            if isinstance(record, str):
                raise BadInput(f"{path}: line {number} {record}")
        elif not isinstance(record, dict) or not isinstance(record.get("payload"), dict):
            raise BadInput(f"{path}: line {number} is not a rollout record")
        kind = record.get("type")
        # `_problem`'s checks, its common cases inline (a line too short to nest that deep needs no count)
        if len(line) > _SHORT and unwritable(record, line):
            problem: Problem | None = ("", f"nested deeper than {MAX_DEPTH} levels", None)
        elif kind == "response_item":
            problem = _item_problem(record["payload"])
        elif records and type(kind) is str and kind != "compacted":
            problem = None
        else:
            problem = _problem(record, line, first=not records)
        if problem is not None:
            field, what, value = problem
            if is_bare:  # the field as the line spells it
                field = field.removeprefix("payload.")
            where = f"line {number}, field {field}" if field else f"line {number}"
            raise bad_record(str(path), where, what, value)
        append(record)
        at(number)
    return records, lines, digest(), is_bare


def _not(kind: str, value: Any) -> str:
    return "missing" if value is None else f"not {kind}"


def _problem(record: Record, line: bytes, first: bool) -> Problem | None:
    """What is wrong with the fields the parse, the rebuild and the wire form read; unknown fields pass."""
    if unwritable(record, line):
        return "", f"nested deeper than {MAX_DEPTH} levels", None
    kind, payload = record.get("type"), record["payload"]
    if not isinstance(kind, str):
        return "type", _not("a string", kind), kind
    if first and kind == "session_meta":
        for key in ("id", "cli_version", "cwd"):
            value = payload.get(key)
            if value is not None and not (isinstance(value, str) and "\x00" not in value):
                return f"payload.{key}", "not a string without NUL", value
        if payload.get("id") is not None and not SAFE_ID.fullmatch(payload["id"]):
            return "payload.id", "not a thread id (letters, digits, '.', '_', ':', '-')", payload["id"]
        if payload.get("base_instructions") is not None and not isinstance(
            payload["base_instructions"], dict
        ):
            return "payload.base_instructions", "not an object", payload["base_instructions"]
    elif kind == "compacted":
        history = payload.get("replacement_history")
        if history is not None and not (
            isinstance(history, list) and all(isinstance(x, dict) for x in history)
        ):
            return "payload.replacement_history", "not a list of objects", history
    elif kind == "response_item":
        return _item_problem(payload)
    return None


def _item_problem(payload: dict[str, Any]) -> Problem | None:
    kind = payload.get("type")
    if not isinstance(kind, str):
        return "payload.type", _not("a string", kind), kind
    if kind not in CALL_TYPES and kind not in OUTPUT_TYPES:
        return None
    for key in ("call_id", "name") if kind in CALL_TYPES else ("call_id",):
        if not isinstance(payload.get(key), str):
            return f"payload.{key}", _not("a string", payload.get(key)), payload.get(key)
    for key in ("arguments", "input"):
        if kind in CALL_TYPES and payload.get(key) is not None and not isinstance(payload[key], str):
            return f"payload.{key}", "not a string", payload[key]
    output = payload.get("output")
    if isinstance(output, list) and not all(isinstance(x, dict) for x in output):
        return "payload.output", "a list of something other than content items", output
    return None


def _start(git: object) -> StartingState | None:
    """session_meta's `git`: {commit_hash, branch, repository_url} (the bare header's too)."""
    if not isinstance(git, dict):
        return None
    return StartingState.of(git.get("repository_url"), git.get("commit_hash"), git.get("branch"))


def parse(path: Path) -> Trajectory:
    records, lines, digest, is_bare = _read(path)
    if not records or records[0].get("type") != "session_meta":
        raise BadInput(f"{path} does not start with session_meta")
    meta = records[0]["payload"]
    cwd = meta.get("cwd")
    if is_bare and cwd is None:
        cwd = bare.context_cwd(records)
    paginated = meta.get("history_mode") == "paginated"
    if paginated and "ordinal" not in records[-1]:
        raise BadInput(f"{path}: a paginated rollout whose last record has no ordinal")
    scan = _Scan(records)
    if scan.orphan is not None:
        call_id = str(records[scan.orphan]["payload"].get("call_id"))
        raise BadInput(
            f"{path}: line {lines[scan.orphan]} is an output for call {call_id[:EXCERPT_CHARS]}, which has no call"
        )
    aborted, unanswered = scan.aborted(records)
    steps, step_ends = _steps(records, scan, unanswered)
    last_compaction = scan.last_compaction
    pre = sum(1 for s in steps if s.before_compaction)
    unversioned_bare = is_bare and not meta.get("cli_version")  # the later bare writer recorded one
    traj = Trajectory(
        agent="codex",
        agent_version=bare.RESUMED_BY if unversioned_bare else meta.get("cli_version"),
        agent_version_inferred=unversioned_bare,
        session_id=meta.get("id"),
        cwd=cwd,
        source=str(path),
        source_sha256=digest,
        steps=steps,
        start=_start(meta.get("git")),
        runs_as=bare.RESUMED_BECAUSE if unversioned_bare else None,
        parse_notes=[] if is_bare else carried.note((r.get("type") for r in records), KNOWN_TYPES),
    )
    # not validated again: the records were checked as read (validation would copy every record)
    traj.keep_native(
        Native.model_construct(
            records=records,
            meta=meta,
            paginated=paginated,
            bare_meta=bare.meta_fields(records) if is_bare else None,
            step_ends=step_ends,
            output_index=scan.outputs_at,
            last_compaction=last_compaction,
            aborted=aborted,
            unanswered=unanswered,
            pre_compaction_steps=pre,
            file_name=path.name if _CANONICAL.fullmatch(path.name) else canonical_name(meta),
        )
    )
    return traj


_CANONICAL = re.compile(r"rollout-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-[0-9a-f-]{36}\.jsonl")


_STAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}")


def canonical_name(meta: dict[str, Any]) -> str:
    """The CLI resumes only files named rollout-<YYYY-MM-DDTHH-MM-SS>-<thread id>.jsonl."""
    stamp = str(meta.get("timestamp", ""))[:19].replace(":", "-")
    if not _STAMP.fullmatch(stamp):  # a damaged timestamp must not put a path into the file name
        stamp = "1970-01-01T00-00-00"
    return f"rollout-{stamp}-{meta.get('id')}.jsonl"


def session_path(meta: dict[str, Any], file_name: str) -> Path:
    """Where the CLI keeps the rollout, relative to CODEX_HOME: sessions/YYYY/MM/DD/<file name>."""
    day = str(meta.get("timestamp", ""))[:10].split("-")
    if len(day) == 3 and all(part.isdigit() for part in day):  # never a path from a damaged timestamp
        return Path("sessions", *day, file_name)
    return Path("sessions", file_name)


def item(record: Record) -> dict[str, Any] | None:
    return record["payload"] if record.get("type") == "response_item" else None


ABORTED = "aborted"
"""The output codex-rs gives a call without one when it resumes a thread (history normalization; observed on
the wire with 0.125.0, 0.142.0 and 0.171.0), right after the call."""
_ABORT_TEXT = re.compile(r"(Wall time: [0-9.]+ seconds\n)?aborted by user( after [0-9.]+s)?|aborted")
"""What the CLI itself writes for a call the user interrupted (0.125.0 and 0.142.0: `aborted by user after
4.4s`; 0.171.0: `Wall time: 4.3 seconds\naborted by user`)."""


class _Scan:
    """One pass over the records: what the steps, the aborted calls and the compaction are made of."""

    __slots__ = ("last_compaction", "calls_at", "outputs_at", "orphan", "batches", "aborted_turns")

    def __init__(self, records: list[Record]) -> None:
        last_compaction: int | None = None
        calls_at: dict[str, int] = {}
        outputs_at: dict[str, int] = {}
        orphan: int | None = None
        batches: list[list[int]] = []
        """Each model response's calls (record indices): closed by an output or a user message."""
        batch: list[int] = []
        turn: list[str] = []
        aborted_turns: list[list[str]] = []
        for i, record in enumerate(records):
            kind = record.get("type")
            if kind == "response_item":
                payload = record["payload"]
                item_kind = payload.get("type")
                if item_kind in CALL_TYPES:
                    call_id = str(payload.get("call_id"))
                    calls_at[call_id] = i
                    batch.append(i)
                    turn.append(call_id)
                elif item_kind in OUTPUT_TYPES:
                    call_id = str(payload.get("call_id"))
                    if orphan is None and call_id not in calls_at:
                        orphan = i
                    outputs_at[call_id] = i
                    if batch:
                        batches.append(batch)
                        batch = []
                elif item_kind == "message" and payload.get("role") == "user" and batch:
                    batches.append(batch)
                    batch = []
            elif kind == "turn_context":
                turn = []
            elif kind == "event_msg" and record["payload"].get("type") == "turn_aborted":
                aborted_turns.append(turn)
                turn = []
            elif kind == "compacted":
                last_compaction = i
        if batch:
            batches.append(batch)
        self.last_compaction = last_compaction
        self.calls_at = calls_at
        self.outputs_at = outputs_at
        self.orphan = orphan
        """The first output whose call came before it in no record."""
        self.batches = batches
        self.aborted_turns = aborted_turns
        """The calls of each turn (since the last `turn_context`) a `turn_aborted` event ended."""

    def aborted(self, records: list[Record]) -> tuple[frozenset[str], frozenset[str]]:
        """(the calls a `turn_aborted` event ended unfinished, those of them without an output record)."""
        aborted: set[str] = set()
        for turn in self.aborted_turns:
            for call_id in turn:
                at = self.outputs_at.get(call_id)
                if at is None:
                    aborted.add(call_id)
                    continue
                output = records[at]["payload"].get("output")
                if isinstance(output, str) and _ABORT_TEXT.fullmatch(output):
                    aborted.add(call_id)
        return frozenset(aborted), frozenset(c for c in aborted if c not in self.outputs_at)


def _steps(
    records: list[Record], scan: _Scan, unanswered: frozenset[str] = frozenset()
) -> tuple[list[Step], list[int]]:
    """The steps of the scanned batches (each call of a record checked by `_problem`: no second
    validation), and per step the index of the record just past its last output."""
    outputs_at = scan.outputs_at
    last_compaction = scan.last_compaction
    steps: list[Step] = []
    ends: list[int] = []
    for batch in scan.batches:
        calls = []
        end = -1
        done = 0
        for at in batch:
            payload = records[at]["payload"]
            call_id = str(payload.get("call_id"))
            if payload["type"] == "function_call":
                try:
                    arguments = orjson.loads(payload.get("arguments") or "{}")
                except orjson.JSONDecodeError:
                    arguments = {"_raw_arguments": payload.get("arguments")}
                tool_input = arguments if isinstance(arguments, dict) else {"_raw_arguments": arguments}
            else:
                tool_input = {"input": payload.get("input", "")}
            output_at = outputs_at.get(call_id)
            if output_at is not None:
                output = records[output_at]["payload"].get("output")
                historical: Observation | None = Observation(
                    output if isinstance(output, str | list) else orjson.dumps(output).decode()
                )
                done += 1
                end = max(end, output_at)
            elif call_id in unanswered:
                historical = Observation(ABORTED)
                done += 1
                end = max(end, at)
            else:
                historical = None
            calls.append(ToolCall(call_id, str(payload.get("name")), tool_input, historical))
        first = batch[0]
        steps.append(
            Step(
                len(steps) + 1,
                str(records[first]["payload"].get("id") or f"line-{first + 1}"),
                calls,
                done == len(calls),
                last_compaction is not None and first < last_compaction,
            )
        )
        ends.append(end + 1 if done else batch[-1] + 1)
    return steps, ends


# rebuild -------------------------------------------------------------------------------------
def prefix_records(native: Native, after_step: int, outputs: dict[str, Any]) -> list[Record]:
    """The kept records up to the end of step `after_step`, fresh outputs in place, ordinals renumbered. A
    boundary before the last compaction cuts it off: the CLI resumes the history up to the cut whole."""
    end = native.step_ends[after_step - 1] if after_step else _first_response(native)
    kept: list[Record] = []
    for record in native.records[:end]:
        if not kept_record(record):
            continue
        payload = record["payload"]
        call_id = str(payload.get("call_id"))
        if item(record) is not None and payload.get("type") in OUTPUT_TYPES and call_id in outputs:
            record = {**record, "payload": {**payload, "output": outputs[call_id]}}
        kept.append(as_written(native, record))
    for ordinal, record in enumerate(kept):
        if native.paginated:
            record["ordinal"] = ordinal
        else:
            record.pop("ordinal", None)
    return kept


def as_written(native: Native, record: Record) -> Record:
    """A record as the rebuild writes it: a bare rollout's in the envelope form a later CLI resumes."""
    if native.bare_meta is None:
        return dict(record)
    return bare.resumable(record, native.bare_meta, str(native.meta.get("timestamp", "")))


def _first_response(native: Native) -> int:
    """Boundary 0: everything up to the first model output (the task and its context)."""
    for i, record in enumerate(native.records):
        payload = item(record)
        if payload is not None and (
            payload.get("type") in CALL_TYPES
            or payload.get("type") == "reasoning"
            or payload.get("role") == "assistant"
        ):
            return i
    return len(native.records)


def base_instructions_message(meta: dict[str, Any]) -> dict[str, Any]:
    """input[0]. Its id is derived by the CLI from the thread (a version-5 UUID); not reproducible here."""
    text = str((meta.get("base_instructions") or {}).get("text", ""))
    kept = "".join(line for line in text.splitlines(keepends=True) if not line.startswith(_FILTERED_LINE))
    return {
        "type": "message",
        "id": None,
        "role": "developer",
        "content": [{"type": "input_text", "text": kept}],
    }


def wire_input(
    native: Native, records: list[Record], paginated_wire: bool | None = None
) -> list[dict[str, Any]]:
    """The request input the CLI sends for `records`. To its first-party provider (`openai`) the pinned CLI
    also sends each item's metadata passthrough; to a custom provider it strips it. `paginated_wire`: whether
    the CLI that sends it puts the base instructions in input[0] (default: the form the rollout was written
    in; a later CLI resuming an older rollout sends its own, `resume.paginated_wire`)."""
    first_party = native.meta.get("model_provider") == "openai"
    old_form = instructions_form(native) if paginated_wire is None else not paginated_wire
    # a paginated CLI resuming a rollout of the older form: the messages it recorded without metadata go
    # out with one `unknown` kind per content part (0.171.0 resuming a 0.118 rollout, observed)
    unknown_kinds = first_party and not old_form and not native.paginated
    history: list[dict[str, Any]] = []
    for record in records:
        if record.get("type") == "compacted":
            replacement = record["payload"].get("replacement_history")
            history = [dict(x) for x in replacement] if isinstance(replacement, list) else []
        elif (turns := _rollback(record)) is not None:
            history = drop_last_turns(history, turns)
        elif (payload := item(record)) is not None:
            written = bare.without_id(payload) if native.bare_meta is not None else payload  # as_written
            history.append(_wire_item(written, first_party, unknown_kinds))
            if payload.get("type") in CALL_TYPES and payload.get("call_id") in native.unanswered:
                synthetic = {"type": CALL_TYPES[str(payload["type"])], "call_id": payload["call_id"]}
                if not old_form:  # an id the CLI derives from the thread (a version-5 uuid): null here
                    synthetic = {"type": synthetic["type"], "id": None, "call_id": payload["call_id"]}
                history.append({**synthetic, "output": ABORTED})
    history = [entry for entry in history if entry.get("type") != GHOST_SNAPSHOT]
    if old_form:
        history = [
            bare.without_id(entry) if entry.get("type") in IDLESS_ON_WIRE else entry for entry in history
        ]
        return reserialized(history) if freeform_apply_patch(native) else history
    base = base_instructions_message(native.meta)
    if first_party:
        base[PASSTHROUGH] = {"content_item_kinds": ["model.base_instructions"]}
    return [base, *history]


def kept_record(record: Record) -> bool:
    """Whether a rebuilt rollout holds the record."""
    kind = record.get("type")
    return kind in KEPT_TYPES or kind not in KNOWN_TYPES or _rollback(record) is not None


def rolled_back(records: list[Record]) -> bool:
    return any(_rollback(record) for record in records)


def _rollback(record: Record) -> int | None:
    """How many turns a rollback event drops (None: the record is none)."""
    payload = record.get("payload")
    if (
        record.get("type") != "event_msg"
        or not isinstance(payload, dict)
        or payload.get("type") != ROLLED_BACK
    ):
        return None
    turns = payload.get("num_turns")
    return turns if isinstance(turns, int) and turns >= 0 else 0


def _message_text(entry: dict[str, Any]) -> str:
    content = entry.get("content")
    first = content[0] if isinstance(content, list) and content else None
    return str(first.get("text", "")) if isinstance(first, dict) else ""


def drop_last_turns(history: list[dict[str, Any]], turns: int) -> list[dict[str, Any]]:
    """codex-rs `drop_last_n_user_turns`: cut at the `turns`-th last user turn (all of them when fewer, keeping
    what precedes the first), then back over the context updates (developer and contextual user messages)
    that opened the dropped turn, never past the first turn."""
    starts = [
        i
        for i, entry in enumerate(history)
        if entry.get("type") == "message"
        and entry.get("role") == "user"
        and not _message_text(entry).startswith(_CONTEXTUAL_USER)
    ]
    if turns == 0 or not starts:
        return history
    cut = starts[0] if turns >= len(starts) else starts[-turns]
    while cut > starts[0]:
        entry = history[cut - 1]
        contextual_user = entry.get("role") == "user" and _message_text(entry).startswith(_CONTEXTUAL_USER)
        if entry.get("type") != "message" or not (entry.get("role") == "developer" or contextual_user):
            break
        cut -= 1
    return history[:cut]


def _wire_item(payload: dict[str, Any], first_party: bool, unknown_kinds: bool = False) -> dict[str, Any]:
    out = {k: v for k, v in payload.items() if k != PASSTHROUGH}
    if out.get("type") == "reasoning":
        out.setdefault("content", None)  # a 0.142.5 rollout omits a null content the CLI sends (observed)
    passthrough = payload.get(PASSTHROUGH)
    content = payload.get("content")
    if (
        unknown_kinds
        and passthrough is None
        and payload.get("type") == "message"
        and isinstance(content, list)
    ):
        passthrough = {"content_item_kinds": ["unknown"] * len(content)}
    if first_party and isinstance(passthrough, dict):
        # the rollout's per-item content metadata stays on disk (observed with 0.171.0)
        out[PASSTHROUGH] = {k: v for k, v in passthrough.items() if k != "content_item_metadata"}
    return out


def instructions_form(native: Native) -> bool:
    """Rollouts without paginated history come from CLIs (0.125 and older) that send the base instructions
    in the request's `instructions` field, not as input[0], and render stored shell outputs as text."""
    return not native.paginated


def wire_instructions(native: Native) -> str | None:
    """The `instructions` such a CLI sends, where the rollout records them (older ones do not)."""
    text = (native.meta.get("base_instructions") or {}).get("text")
    return text if isinstance(text, str) else None


FREEFORM_FAMILIES = ("gpt-5-codex", "gpt-5.1-codex", "gpt-5.1", "codex-")
"""Model slugs whose family gets apply_patch as a freeform tool in codex-rs' model_family.rs of the 0.5x-0.6x
era (`codex-mini-latest` matches an earlier branch without it), whether or not the rollout ever calls it:
observed with 0.58.0 and gpt-5.1-codex. Only rollouts of the `instructions` form are concerned."""


def freeform_apply_patch(native: Native) -> bool:
    """Whether the CLI offered apply_patch as a freeform tool: seen from its calls, or from the rollout's
    model (the one that continues it) when its family is one that gets it."""
    model = last_model(native) or ""
    if model.startswith(FREEFORM_FAMILIES) and not model.startswith("codex-mini-latest"):
        return True
    return any(
        (p := item(r)) is not None and p.get("type") == "custom_tool_call" and p.get("name") == "apply_patch"
        for r in native.records
    )


def last_model(native: Native) -> str | None:
    """The model of the rollout's last turn (the one a resume continues with)."""
    for record in reversed(native.records):
        if record.get("type") == "turn_context" and isinstance(record["payload"].get("model"), str):
            return str(record["payload"]["model"])
    return None


_SHELL_TOOLS = {"shell", "container.exec", "apply_patch"}


def reserialized(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The input as such a CLI sends it while a freeform apply_patch tool is offered: the JSON outputs
    (`{"output", "metadata": {"exit_code", "duration_seconds"}}`) of shell and apply_patch calls become
    `Exit code: N\nWall time: S seconds\n[Total output lines: L\n]Output:\n...` (codex-rs client_common.rs)."""
    shell_ids: set[str] = set()
    out = []
    for entry in items:
        kind = entry.get("type")
        if kind == "local_shell_call" and isinstance(entry.get("call_id") or entry.get("id"), str):
            shell_ids.add(entry.get("call_id") or entry["id"])
        elif kind in CALL_TYPES and entry.get("name") in _SHELL_TOOLS:
            shell_ids.add(str(entry.get("call_id")))
        elif kind in OUTPUT_TYPES and entry.get("call_id") in shell_ids:
            shell_ids.discard(entry["call_id"])
            text = structured_text(entry.get("output"))
            if text is not None:
                entry = {**entry, "output": text}
        out.append(entry)
    return out


def structured_text(raw: Any) -> str | None:
    """A JSON shell output (`{"output", "metadata": {"exit_code", "duration_seconds"}}`) as the text form;
    None when `raw` is not one."""
    if not isinstance(raw, str):
        return None
    try:
        parsed = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("output"), str):
        return None
    meta = parsed.get("metadata")
    if not isinstance(meta, dict):
        return None
    code, seconds = meta.get("exit_code"), meta.get("duration_seconds")
    if not isinstance(code, int) or isinstance(code, bool) or not isinstance(seconds, int | float):
        return None
    wall = repr(float(seconds)).removesuffix(".0")  # Rust prints an f32 of 0.0 as 0, 0.1 as 0.1
    sections = [f"Exit code: {code}", f"Wall time: {wall} seconds"]
    output = parsed["output"]
    total = re.match(r"Total output lines: (\d+)\n\n?", output)
    if total:
        sections.append(f"Total output lines: {total.group(1)}")
        output = output[total.end() :]
    return "\n".join([*sections, "Output:", output])


def to_jsonl(records: list[Record]) -> bytes:
    return b"".join(orjson.dumps(r) + b"\n" for r in records)
