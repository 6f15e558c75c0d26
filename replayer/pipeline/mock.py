"""The built-in offline model (`--upstream mock`, `--upstream mock:FILE`): no service, no key.

The suite's scripted upstream (bridges/scripted.py, on the agent's own wire: Anthropic Messages, OpenAI
Responses and chat completions, Gemini, streamed or not) started by the replayer on 127.0.0.1 for one
continuation. It answers the main requests from the script's turns in order; past them (or with no
script) with a closing turn that ends the session: the agent's finish tool when the request offers it,
its submit command when it has one, else a short text answer. Side calls (titles, summaries) get a short
text. The script file is a `Script` (docs/cli.md, "The mock model").
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from replayer.floor.errors import BadInput
from replayer.floor.io import read_input

if TYPE_CHECKING:
    from replayer.adapters.base import Adapter
    from replayer.bridges.scripted import Script, Turn

MOCK = "mock"
MOCK_KEY = "replayer-mock-key"
"""The key the bridge sends to the mock (nothing checks it; no host variable is read)."""
MAX_SCRIPT_BYTES = 16 * 1024 * 1024
FINAL_TEXT = "Mock model: done."


def is_mock(upstream: str | None) -> bool:
    """`upstream` names the built-in mock (`mock` or `mock:FILE`), not a model service."""
    return upstream == MOCK or (upstream or "").startswith(MOCK + ":")


def script_path(upstream: str) -> Path | None:
    """The script file of `mock:FILE`; None for the bare `mock`."""
    rest = upstream.removeprefix(MOCK).removeprefix(":")
    return Path(rest) if rest else None


def load_script(upstream: str) -> Script:
    """The script `upstream` names (`mock`: no turns, the closing turn at once); a bad file is refused."""
    from replayer.bridges.scripted import Script  # not at the top: aiohttp, for a mock run only

    path = script_path(upstream)
    if path is None:
        return Script(turns=[], final_text=FINAL_TEXT)
    data = read_input(path, MAX_SCRIPT_BYTES)
    if not data.strip():
        raise BadInput(f"--upstream mock:{path}: the script file is empty")
    try:
        script = Script.model_validate_json(data)
    except ValidationError as exc:
        raise BadInput(f"--upstream mock:{path}: not a mock script: {_problem(exc.errors()[0])}") from None
    return script


def _problem(error: Any) -> str:
    """A validation error of a script, said of the turn and block it is in (`tool_use block 2 of turn 1
    has no id`), else of where it is in the file."""
    loc = list(error["loc"])
    if len(loc) >= 4 and loc[0] == "turns" and loc[2] == "blocks":
        block = f"block {int(loc[3]) + 1} of turn {int(loc[1]) + 1}"
        if error["type"] == "union_tag_invalid":
            return f"{block} has an unknown type {error['input'].get('type')!r} (text, tool_use, custom_tool, item)"
        if len(loc) == 6 and error["type"] == "missing":
            return f"{loc[4]} {block} has no {loc[5]}"
        if len(loc) >= 6:
            return f"{loc[4]} {block}: {'.'.join(str(p) for p in loc[5:])}: {error['msg']}"
    where = ".".join(str(p) for p in loc) or "the file"
    return f"{where}: {error['msg']}"


def closing_turn(adapter: Adapter, version: str, body: Any, text: str) -> Turn:
    """The answer that ends the agent's session, for the request `body`: its finish tool when offered,
    else its submit command (as a shell call, or as a text action), else `text`."""
    from replayer.adapters.base import COMMAND, filled
    from replayer.bridges.request_tools import tool_names
    from replayer.bridges.scripted import TextBlock, ToolUseBlock, Turn

    offered = tool_names(body)
    finish = adapter.probe_finish
    if finish is not None and finish[0] in offered:
        block = ToolUseBlock(id="call_mock_finish", name=finish[0], input=dict(finish[1]))
        return Turn(blocks=[block], stall_s=adapter.answer_pause_s)
    submit = adapter.probe_submit
    if submit:
        shell = next((name for name in adapter.probe_shell if name in offered), None)
        if shell is not None:
            command = filled(adapter.probe_shell[shell], COMMAND, submit)
            return Turn(
                blocks=[ToolUseBlock(id="call_mock_submit", name=shell, input=command)],
                stall_s=adapter.answer_pause_s,
            )
        action = adapter.probe_text_action(version, 0, submit)
        if action is not None:
            return Turn(blocks=[TextBlock(text=action)], stall_s=adapter.answer_pause_s)
    return Turn(blocks=[TextBlock(text=text)], stall_s=adapter.answer_pause_s)


@contextlib.contextmanager
def serve(upstream: str, adapter: Adapter, version: str) -> Iterator[str]:
    """The mock `upstream` names, on the agent's wire on 127.0.0.1 while the block runs; yields its URL."""
    script = load_script(upstream)
    service = adapter.scripted_upstream(
        script, closing=lambda body: closing_turn(adapter, version, body, script.final_text)
    )
    with service:
        yield service.url
