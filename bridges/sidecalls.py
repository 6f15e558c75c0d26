"""Side calls: the requests besides the main thread that an agent makes on its own (titles, summaries, token
counts, probes), each declared by its adapter as a shape. The bridge forwards a side call only in a shape
its adapter declares (`Launcher.side_calls`) and asking for no more output than that shape allows: the key
pays for what the agent does, not for whatever else in the sandbox reaches the bridge (a process a
historical command left running). Pure; docs/bridge.md, "Side calls".
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

OUTPUT_LIMIT_KEYS = ("max_tokens", "max_output_tokens", "max_completion_tokens")
"""Where a request body asks for at most that much output (Anthropic, Responses, chat completions);
Gemini's is `generationConfig.maxOutputTokens`."""


class SideCall(BaseModel):
    """One kind of side call an agent makes."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    """What it is, for the record (`title`, `count_tokens`, `probe`)."""
    methods: tuple[str, ...] = ("POST",)
    path: str
    """A regular expression the request's path (without its query) matches whole."""
    tools: bool | None = None
    """True: the body offers tools (a sub-agent); False: it offers none; None: either."""
    max_tokens: int = 0
    """The most output the body may ask for; 0: it may ask for none (a probe, a token count)."""


PROBE = SideCall(name="probe", methods=("GET", "HEAD"), path=r"/.*")
"""A bodiless GET or HEAD (a model listing, a reachability check): no output, no tokens."""


def asked_tokens(body: Any) -> int | None:
    """The output the body asks for at most; None when it states no limit."""
    if not isinstance(body, dict):
        return None
    config = body.get("generationConfig")
    found = [body.get(k) for k in OUTPUT_LIMIT_KEYS]
    found.append(config.get("maxOutputTokens") if isinstance(config, dict) else None)
    limits = [v for v in found if isinstance(v, int) and not isinstance(v, bool)]
    return max(limits) if limits else None


def _offers_tools(body: Any) -> bool:
    tools = body.get("tools") if isinstance(body, dict) else None
    return isinstance(tools, list) and bool(tools)


Why = Literal["undeclared_side_call", "side_call_max_tokens"]


def _fits(shapes: tuple[SideCall, ...], method: str, path: str, body: Any) -> list[SideCall]:
    bare = path.partition("?")[0]
    return [
        s
        for s in shapes
        if method in s.methods
        and re.fullmatch(s.path, bare)
        and (s.tools is None or s.tools == _offers_tools(body))
    ]


def output_cap(shapes: tuple[SideCall, ...], method: str, path: str, body: Any) -> int:
    """The most output a declared side call may ask for (what its budget reserves when it names no limit)."""
    return max((s.max_tokens for s in _fits(shapes, method, path, body)), default=0)


_MODEL_IN_PATH = re.compile(r"/models/([^/:?]+)")


def model_of(path: str, body: Any) -> str | None:
    """The model a request names: its body's `model`, else Gemini's `/models/NAME:method` path."""
    named = body.get("model") if isinstance(body, dict) else None
    if isinstance(named, str):
        return named
    found = _MODEL_IN_PATH.search(path)
    return found.group(1) if found else None


def same_model(a: str, b: str) -> bool:
    """`provider/name` (OpenCode, Pi) and `models/name` (Gemini) name the same model as `name`."""
    return a.rpartition("/")[2] == b.rpartition("/")[2]


def refusal(
    shapes: tuple[SideCall, ...], method: str, path: str, body: Any, raw: bytes
) -> tuple[Why, str] | None:
    """Why the bridge must not forward this side call, or None (it has a declared shape). A body that
    states no output limit gets the upstream's default (the budget still counts it)."""
    fits = _fits(shapes, method, path, body)
    if not fits:
        names = ", ".join(s.name for s in shapes) or "none"
        return "undeclared_side_call", f"a side call of no shape the adapter declares (declared: {names})"
    if method in ("GET", "HEAD") and raw:
        return "undeclared_side_call", f"a {method} side call with a body"
    asked = asked_tokens(body)
    allowed = max(s.max_tokens for s in fits)
    if asked is not None and asked > allowed:
        return (
            "side_call_max_tokens",
            f"asks for {asked} output tokens, a {fits[0].name} call at most {allowed}",
        )
    return None
