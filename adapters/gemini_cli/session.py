"""Gemini CLI session files: the append log (`.jsonl`, 0.61) and the one-document form (`.json`, 0.30).

The log is read the way the CLI's `loadConversationRecord` reads it: a metadata line (`sessionId`,
`projectHash`) or `{"$set": {...}}` updates the metadata (a `messages` list replaces every message),
`{"$rewindTo": id}` drops that message and all after it, and a message record (`id`) replaces the one
with the same id in place or is appended. A step is one `gemini` message's tool calls: one model turn in
the log form; in the document form every call of one prompt, which the CLI stores (and resumes) as one.
A call is read from the message's `toolCalls` (as recorded live) or from its `functionCall` parts (as a
resume re-sets the list); its observation is its `result`, else the first later `functionResponse` part
with its id.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, StringConstraints

from replayer.adapters.gemini_cli import grep_backend, subagent
from replayer.adapters.shapes import MAX_DEPTH, Open, check, deep_place
from replayer.floor.cwdinfer import is_absolute_cwd
from replayer.floor.errors import BadInput, bad_record, excerpt
from replayer.floor.io import read_input
from replayer.floor.trajectory import ASKS_FOR_CWD, Observation, Step, ToolCall, Trajectory

AGENT = "gemini_cli"
Record = dict[str, Any]
Form = Literal["jsonl", "json"]


class Native(BaseModel):
    """What the rebuild needs of the file: its form, metadata and the message list the CLI would load."""

    model_config = ConfigDict(extra="forbid")
    form: Form
    metadata: Record
    messages: list[Record]


_SHELL_RESULT = re.compile(
    r"\A(?:<untrusted_context>\n)?(?:(?:Command|Directory): [^\n]*\n)*Output: (.*?)"
    r"(?:\n(?:Error|Exit Code|Signal|Background PIDs|Process Group PGID): [^\n]*)*\n?(?:</untrusted_context>)?\Z",
    re.S,
)


def own_text(tool: str, text: str) -> str | None:
    """What a run_shell_command printed, inside the CLI's `[Command: ...\\nDirectory: ...\\n]Output: ...\\n
    Exit Code: N\\n...` (wrapped in `<untrusted_context>` by newer versions); None for other tools."""
    if tool != "run_shell_command":
        return None
    found = _SHELL_RESULT.match(text)
    return found.group(1) if found else None


def is_metadata(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("sessionId"), str)
        and isinstance(value.get("projectHash"), str)
    )


def looks_like_log(head: list[Any]) -> bool:
    """A log's first line: `sessionId` and `projectHash`, no messages."""
    return bool(head) and is_metadata(head[0]) and "messages" not in head[0]


def looks_like_document(head: list[Any]) -> bool:
    """A document: `sessionId`, `projectHash` and its messages."""
    return bool(head) and is_metadata(head[0]) and isinstance(head[0].get("messages"), list)


# parse ---------------------------------------------------------------------------------------------
def parse(path: Path) -> Trajectory:
    raw = read_input(path)
    digest = hashlib.sha256(raw).hexdigest()
    native = load(raw, path)
    steps = _steps(native, path)
    sid = native.metadata["sessionId"]
    cwd = project_root(native)
    notes = []
    if cwd is None:
        notes.append(
            "the workspace folder is not in the file (none of its paths hashes to its projectHash)"
            + ASKS_FOR_CWD
        )
    parent = subagent.subagent_of(native.metadata, native.messages, path, parse)
    if parent is not None and not steps:
        notes.append(subagent.NOTE)
    notes += grep_backend.note(grep_backend.recorded_backend(steps))
    version = noticed_version(native.messages)
    if version is not None:
        notes.append(
            f"gemini_cli {version[0]}: the version the CLI's own update notice in the file names ({version[1]!r})"
        )
    traj = Trajectory(
        agent=AGENT,
        agent_version=version and version[0],
        agent_version_inferred=version is not None,
        session_id=sid,
        cwd=cwd,
        source=str(path),
        source_sha256=digest,
        steps=steps,
        parse_notes=notes,
        subagent_of=parent,
    )
    traj.keep_native(native)
    return traj


_UPDATE_NOTICE = re.compile(
    r"\A(?:Gemini CLI update available!|A new version of Gemini CLI is available!) "
    r"(\d{1,4}\.\d{1,4}\.\d{1,4}(?:-[0-9A-Za-z]{1,20}(?:\.[0-9A-Za-z]{1,20}){0,4})?) → [^\n]{1,60}"
)


def noticed_version(messages: list[Record]) -> tuple[str, str] | None:
    """The version that ran, from the CLI's own update notice (`Gemini CLI update available! 0.23.0 → 0.24.0`,
    an `info` message the CLI saves, worded so in its `updateCheck`), and the notice; None without one."""
    for message in messages:
        if message.get("type") != "info":
            continue
        texts = [p.get("text") for p in parts(message.get("content"))]
        for text in texts:
            found = _UPDATE_NOTICE.match(text) if isinstance(text, str) else None
            if found:
                return found.group(1), found.group(0)
    return None


def load(raw: bytes, path: Path) -> Native:
    stripped = raw.lstrip()
    if not stripped:
        raise BadInput(f"{path} is empty (no Gemini CLI session)")
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        document = None
    if isinstance(document, dict) and isinstance(document.get("messages"), list):
        if not is_metadata(document):
            raise BadInput(f"{path} is not a Gemini CLI session (no sessionId and projectHash)")
        metadata = _checked_metadata({k: v for k, v in document.items() if k != "messages"}, path)
        return Native(
            form="json", metadata=metadata, messages=_checked(document["messages"], path, "messages")
        )
    return _load_log(raw, path)


def _load_log(raw: bytes, path: Path) -> Native:
    metadata: Record = {}
    messages: dict[str, Record] = {}
    for number, line in enumerate(raw.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise BadInput(f"{path}: line {number} is not JSON: {exc}") from None
        if not isinstance(record, dict):
            raise BadInput(f"{path}: line {number} is not a Gemini CLI session record")
        if isinstance(record.get("$rewindTo"), str):
            ids = list(messages)
            keep = ids[: ids.index(record["$rewindTo"])] if record["$rewindTo"] in ids else []
            messages = {i: messages[i] for i in keep}
        elif isinstance(record.get("id"), str):
            messages[record["id"]] = _message(record, path, f"line {number}")
        elif isinstance(record.get("$set"), dict):
            update = record["$set"]
            if isinstance(update.get("messages"), list):
                listed = _checked(update["messages"], path, f"line {number}")
                messages = {m["id"]: m for m in listed}
            metadata = {**metadata, **{k: v for k, v in update.items() if k != "messages"}}
        elif is_metadata(record):
            metadata = {**metadata, **record}
        else:
            raise BadInput(
                f"{path}: line {number} is not a Gemini CLI session record ({excerpt(line.decode(errors='replace'), 80)})"
            )
    if not is_metadata(metadata):
        raise BadInput(f"{path} is not a Gemini CLI session (no sessionId and projectHash)")
    return Native(form="jsonl", metadata=_checked_metadata(metadata, path), messages=list(messages.values()))


class _Metadata(Open):
    """The rebuild names the session file after `sessionId` and `startTime`."""

    sessionId: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")]
    projectHash: str
    startTime: Annotated[str, StringConstraints(pattern=r"^[0-9T:.+Z-]{1,40}$")] | None = None


def _checked_metadata(metadata: Record, path: Path) -> Record:
    check(_Metadata, metadata, str(path), "the session metadata")
    return metadata


def _checked(messages: list[Any], path: Path, where: str) -> list[Record]:
    return [_message(m, path, f"{where}[{n}]") for n, m in enumerate(messages)]


class _FunctionCall(Open):
    name: str
    args: dict[str, Any]
    id: str | None = None


class _FunctionResponse(Open):
    id: str | None = None
    name: str | None = None


class _Part(Open):
    text: str | None = None
    thought: bool | None = None
    functionCall: _FunctionCall | None = None
    functionResponse: _FunctionResponse | None = None


Content = str | list[str | _Part] | _Part | None


class _Thought(Open):
    subject: str | None = None
    description: str | None = None


class _Call(Open):
    id: str
    name: str
    args: dict[str, Any]
    result: Content = None


class _Message(Open):
    """The fields of a message record the replayer and the CLI's resume read."""

    id: str
    type: str
    content: Content = None
    thoughts: list[_Thought] | None = None
    toolCalls: list[_Call] | None = None
    model: str | None = None


def _message(record: Any, path: Path, where: str) -> Record:
    if not isinstance(record, dict) or not isinstance(record.get("id"), str):
        raise BadInput(f"{path}: {where} is a Gemini CLI message without an id")
    if not isinstance(record.get("type"), str):
        raise BadInput(f"{path}: {where} is a Gemini CLI message without a type")
    check(_Message, record, str(path), where)
    deep = deep_place(record)
    if deep is not None:
        raise bad_record(str(path), f"{where}, field {deep}", f"nests deeper than {MAX_DEPTH} levels")
    return record


def parts(content: Any) -> list[Record]:
    """The CLI's `ensurePartArray`: a string is one text part, a list's strings are text parts."""
    if isinstance(content, list):
        return [{"text": p} if isinstance(p, str) else p for p in content if isinstance(p, dict | str)]
    if isinstance(content, str):
        return [{"text": content}]
    return [content] if isinstance(content, dict) else []


def calls_of(message: Record) -> list[Record]:
    """A gemini message's calls as `{id, name, args, result?, status?}`."""
    if message.get("type") != "gemini":
        return []
    content_calls = [
        p["functionCall"] for p in parts(message.get("content")) if isinstance(p.get("functionCall"), dict)
    ]
    if content_calls:
        return content_calls
    return list(message.get("toolCalls") or [])


def response_parts(message: Record) -> list[Record]:
    """The functionResponse parts a user message carries."""
    if message.get("type") != "user":
        return []
    return [
        p["functionResponse"]
        for p in parts(message.get("content"))
        if isinstance(p.get("functionResponse"), dict)
    ]


def observation(response: Record, status: Any = None) -> Observation:
    body = response.get("response")
    text = body.get("output") if isinstance(body, dict) else None
    error = body.get("error") if isinstance(body, dict) else None
    content = (
        error if isinstance(error, str) else text if isinstance(text, str) else orjson.dumps(body).decode()
    )
    return Observation(content=content, is_error=error is not None or status == "error", structured=response)


def _result(call: Record) -> Record | None:
    for part in parts(call.get("result")):
        response = part.get("functionResponse")
        if isinstance(response, dict) and response.get("id") in (call.get("id"), None):
            return response
    return None


def _steps(native: Native, path: Path) -> list[Step]:
    messages = native.messages
    steps: list[Step] = []
    for at, message in enumerate(messages):
        calls = calls_of(message)
        if not calls:
            continue
        tool_calls = []
        for call in calls:
            if not isinstance(call.get("id"), str) or not isinstance(call.get("name"), str):
                raise BadInput(f"{path}: message {message['id']} has a call without an id or a name")
            args = call.get("args")
            if not isinstance(args, dict):
                raise BadInput(f"{path}: call {call['id']} has arguments that are not an object")
            response = _result(call) or _later_response(messages[at + 1 :], call["id"])
            historical = observation(response, call.get("status")) if response is not None else None
            tool_calls.append(ToolCall(id=call["id"], tool=call["name"], input=args, historical=historical))
        steps.append(
            Step(
                index=len(steps) + 1,
                message_id=message["id"],
                calls=tool_calls,
                complete=all(c.historical is not None for c in tool_calls),
            )
        )
    return steps


def _later_response(messages: list[Record], call_id: str) -> Record | None:
    for message in messages:
        for response in response_parts(message):
            if response.get("id") == call_id:
                return response
    return None


def to_log(metadata: Record, messages: list[Record]) -> bytes:
    """A 0.61 append log of `messages`: the metadata line (its identifying keys), then one line a message."""
    keys = ("sessionId", "projectHash", "startTime", "lastUpdated")
    header = {k: metadata[k] for k in keys if k in metadata}
    lines = [orjson.dumps({**header, "kind": "main"}), *(orjson.dumps(m) for m in messages)]
    return b"".join(line + b"\n" for line in lines)


def to_document(metadata: Record, messages: list[Record]) -> bytes:
    """A document release's session file: the metadata and `messages`, indented as `JSON.stringify(c, null, 2)`."""
    document = {**{k: v for k, v in metadata.items() if k != "messages"}, "messages": messages}
    return orjson.dumps(document, option=orjson.OPT_INDENT_2)


# the workspace -------------------------------------------------------------------------------------
def project_root(native: Native) -> str | None:
    """The workspace folder: the one absolute path the file mentions (a workspace directory of the session
    context, a tool's file path, or one of their parents) whose sha256 is the file's `projectHash`; else the
    first of the workspace `directories` a subagent's document records (its parent's workspace context,
    the project's directory first), when it is an absolute path."""
    wanted = native.metadata.get("projectHash")
    recorded = native.metadata.get("directories")
    directories = [d for d in recorded if isinstance(d, str)] if isinstance(recorded, list) else []
    for candidate in [*directories, *_candidates(native.messages)]:
        if hashlib.sha256(candidate.encode()).hexdigest() == wanted:
            return candidate
    return next((d for d in directories[:1] if is_absolute_cwd(d)), None)


def _candidates(value: Any) -> list[str]:
    found: dict[str, None] = {}

    def walk(v: Any) -> None:
        if isinstance(v, dict):
            for item in v.values():
                walk(item)
        elif isinstance(v, list):
            for item in v:
                walk(item)
        elif isinstance(v, str):
            for token in v.split():
                if token.startswith("/") and len(found) < 10_000:
                    path = PurePosixPath(token.rstrip(".,:;)'\""))
                    for p in (path, *path.parents):
                        found.setdefault(str(p), None)

    walk(value)
    return list(found)
