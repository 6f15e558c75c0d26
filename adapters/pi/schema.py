"""The shapes of the Pi records the parser reads, checked where each line is read (the line number known).

The models validate only: the parser goes on with the record as read, so every field it carries, known
here or not (other Pi versions add fields), is kept and written back unchanged. A field is typed as Pi's
own types declare it (pi-ai `types.ts`, coding-agent `session-manager.ts` and `messages.ts`); one that
Pi may leave out is optional. A record that does not fit is refused naming its line and field, with a
short excerpt of what was there.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

import orjson
from pydantic import BeforeValidator, Discriminator, Field, Tag

from replayer.adapters.shapes import Member, Open, shallow_text, too_deep
from replayer.floor.errors import BadInput, bad_record

MAX_DEPTH = 100
"""Nesting levels a record may have: far more than Pi writes, and few enough that a rebuilt session file or
a result embedding the record stays within orjson's limit (254 levels)."""
_INT_RANGE = (-(2**63), 2**64 - 1)
"""orjson's integers: a longer one is read as a double, as JavaScript's JSON.parse reads any number."""


# reading a line --------------------------------------------------------------------------------------
class NotJson(Exception):
    """A line JSON.parse refuses. Pi's session loader (`loadEntriesFromFile`) skips such a line."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class _OutOfRange(ValueError):
    pass


def load_line(line: bytes, source: str, number: int) -> Any:
    """A line's JSON value as Pi's JSON.parse gives it. A string with a lone surrogate (JSON.stringify
    escapes one as `\\udXXX`, orjson refuses it) is read by the standard library instead, with numbers
    read as orjson reads them. Raises NotJson where JSON.parse throws (NaN, two values on one line...);
    refuses what JSON.parse reads but the replayer could not carry as Pi does: bytes that are not UTF-8
    (Node would read U+FFFD), a number past the double range (Infinity), nesting deeper than MAX_DEPTH."""
    try:
        value = orjson.loads(line)
    except orjson.JSONDecodeError:
        value = _load_slowly(line, source, number)
    return shallow_checked(value, line, source, number)


def shallow_checked(value: Any, line: bytes, source: str, number: int) -> Any:
    """`value` (read from `line`), refused when it nests deeper than MAX_DEPTH."""
    if not shallow_text(line, MAX_DEPTH) and too_deep(value, MAX_DEPTH):
        raise bad_record(source, f"line {number}", f"nests deeper than {MAX_DEPTH} levels")
    return value


def _load_slowly(line: bytes, source: str, number: int) -> Any:
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{source}: line {number} is not UTF-8 text (a damaged Pi log)") from None
    try:
        return json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise bad_record(source, f"line {number}", f"nests deeper than {MAX_DEPTH} levels") from None
    except _OutOfRange as exc:
        raise bad_record(source, f"line {number}", str(exc)) from None
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data" and text[exc.pos :].lstrip().startswith("{"):
            raise NotJson(
                f"two records with no newline between them (a second JSON value starts at column {exc.colno})"
            ) from None
        raise NotJson(f"{exc.msg}: column {exc.colno}") from None
    except ValueError as exc:  # _constant
        raise NotJson(str(exc)) from None


def _int(text: str) -> int | float:
    try:
        value = int(text)
        return value if _INT_RANGE[0] <= value <= _INT_RANGE[1] else float(value)
    except (ValueError, OverflowError):  # past Python's digit limit, or the double range
        raise _OutOfRange(f"holds a number out of the double range ({text[:40]}...)") from None


def _float(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        raise _OutOfRange(f"holds a number out of the double range ({text[:40]})")
    return value


def _constant(text: str) -> float:
    raise ValueError(f"{text} is not a JSON value")


# models ----------------------------------------------------------------------------------------------
class _Block(Open):
    type: str


class _Text(_Block):
    text: str
    textSignature: str | None = None


class _ResultText(_Block):
    text: str | None = None
    """`join` makes null or undefined text empty in the request Pi sends."""


class _Thinking(_Block):
    thinking: str
    thinkingSignature: str | None = None


class _ToolCall(_Block):
    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)


class _Image(_Block):
    data: str
    mimeType: str


_CONTENT_TAGS = frozenset({"text", "image"})
_ASSISTANT_TAGS = frozenset({"text", "thinking", "toolCall"})
Content = Annotated[
    Annotated[_Text, Tag("text block")]
    | Annotated[_Image, Tag("image block")]
    | Annotated[_Block, Tag("other block")],
    Discriminator(Member("type", _CONTENT_TAGS, "block")),
]
ResultContent = Annotated[
    Annotated[_ResultText, Tag("text block")]
    | Annotated[_Image, Tag("image block")]
    | Annotated[_Block, Tag("other block")],
    Discriminator(Member("type", _CONTENT_TAGS, "block")),
]
AssistantContent = Annotated[
    Annotated[_Text, Tag("text block")]
    | Annotated[_Thinking, Tag("thinking block")]
    | Annotated[_ToolCall, Tag("toolCall block")]
    | Annotated[_Block, Tag("other block")],
    Discriminator(Member("type", _ASSISTANT_TAGS, "block")),
]


def _text_or_blocks(value: Any) -> Any:
    if isinstance(value, str):
        return []
    if not isinstance(value, list):
        raise ValueError("should be a string or a list of content blocks")
    return value


TextOrBlocks = Annotated[list[Content], BeforeValidator(_text_or_blocks)]
TextOrResultBlocks = Annotated[list[ResultContent], BeforeValidator(_text_or_blocks)]


class Message(Open):
    role: str


class UserMessage(Message):
    content: TextOrBlocks


class AssistantMessage(Message):
    content: list[AssistantContent]
    stopReason: str | None = None
    responseId: str | None = None
    provider: str | None = None
    model: str | None = None


class ToolResultMessage(Message):
    toolCallId: str
    toolName: str | None = None
    content: TextOrResultBlocks
    """A string is not Pi's type, but is sent as it would be."""
    isError: bool | None = None


class CustomMessage(Message):
    content: TextOrBlocks
    customType: str | None = None
    display: bool | None = None


class BashExecutionMessage(Message):
    command: str | None = None
    output: str | None = None
    exitCode: int | None = None
    cancelled: bool | None = None
    truncated: bool | None = None
    fullOutputPath: str | None = None
    excludeFromContext: bool | None = None


MESSAGES: dict[str, type[Message]] = {
    "user": UserMessage,
    "assistant": AssistantMessage,
    "toolResult": ToolResultMessage,
    "custom": CustomMessage,
    "hookMessage": CustomMessage,
    "bashExecution": BashExecutionMessage,
}
"""Roles whose fields the context and the request conversion read; other roles only need a role."""


def _name_part(value: Any) -> Any:
    """Pi names the session file `<timestamp>_<id>.jsonl`: a file name part, no '/', NUL or surrogate."""
    if isinstance(value, str) and not (0 < len(value) <= 100 and _FILE_NAME.fullmatch(value)):
        raise ValueError(
            "should be 1 to 100 characters without '/', NUL or a lone surrogate (a file name part)"
        )
    return value


def _cwd(value: Any) -> Any:
    """Pi keeps a session in `--<cwd with '/' as '-'>--` (a directory name: at most 255 bytes)."""
    if isinstance(value, str) and not (len(value.encode(errors="replace")) <= 250 and _PATH.fullmatch(value)):
        raise ValueError("should be a path without NUL or lone surrogates whose Pi session folder name fits")
    return value


_FILE_NAME = re.compile("[^/\x00\ud800-\udfff]*")
_PATH = re.compile("[^\x00\ud800-\udfff]*")


class Header(Open):
    type: Literal["session"]
    id: Annotated[str, BeforeValidator(_name_part)]
    version: int | None = None
    cwd: Annotated[str | None, BeforeValidator(_cwd)] = None
    timestamp: Annotated[str | None, BeforeValidator(_name_part)] = None


SessionId = Annotated[str, BeforeValidator(_name_part)]


class Entry(Open):
    type: str
    timestamp: str | None = None


class _Compaction(Entry):
    summary: str
    firstKeptEntryId: str | None = None
    tokensBefore: int | float | None = None


class _BranchSummary(Entry):
    summary: str | None = None
    fromId: str | None = None


class _CustomMessageEntry(Entry):
    content: TextOrBlocks
    customType: str | None = None
    display: bool | None = None


class _ModelChange(Entry):
    provider: str | None = None
    modelId: str | None = None


class _ThinkingLevelChange(Entry):
    thinkingLevel: str | None = None


_ROLES = frozenset(MESSAGES)


class MessageEntry(Entry):
    """A message entry with its message typed by role: `Entry` and the role's model in one check, tried
    first (a message of another role, or one that does not fit, is checked by the two as before)."""

    message: Annotated[
        Annotated[UserMessage, Tag("user role")]
        | Annotated[AssistantMessage, Tag("assistant role")]
        | Annotated[ToolResultMessage, Tag("toolResult role")]
        | Annotated[CustomMessage, Tag("custom role")]
        | Annotated[CustomMessage, Tag("hookMessage role")]
        | Annotated[BashExecutionMessage, Tag("bashExecution role")]
        | Annotated[Message, Tag("other role")],
        Discriminator(Member("role", _ROLES, "role")),
    ]


ENTRIES: dict[str, type[Entry]] = {
    "compaction": _Compaction,
    "branch_summary": _BranchSummary,
    "custom_message": _CustomMessageEntry,
    "model_change": _ModelChange,
    "thinking_level_change": _ThinkingLevelChange,
}
"""Entry types with fields of their own that the context reads (a message entry's message is checked by
role; other types carry nothing read)."""


class RpcResponse(Open):
    type: Literal["response"]
    command: str
    success: bool


class GetState(Open):
    sessionId: SessionId | None = None
    thinkingLevel: str | None = None
