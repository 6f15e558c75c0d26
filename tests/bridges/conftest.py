"""The bridge alone before the scripted upstream (it says "Done." to every request), with a chat gate that
accepts mini-swe-agent's recorded request, shared by the side-call and loop tests."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson

from replayer.bridges.chat import ChatDialect, ChatPrefixGate
from replayer.bridges.core import Bridge, BridgeConfig
from replayer.bridges.scripted import Script, ScriptedUpstream, TextBlock, Turn
from replayer.bridges.sidecalls import PROBE
from replayer.floor.io import remove_alias, short_alias
from tests.conftest import MINI

KEY = "sk-side-call-test-key"
CHAT = "/v1/chat/completions"


@dataclass
class Bridged:
    upstream: ScriptedUpstream
    bridge: Bridge
    unix: str
    """The bridge's socket, as the agent reaches it."""
    main: dict
    """A main-thread request the gate accepts."""


def send(unix: str, method: str, path: str, body: dict | None) -> tuple[int, bytes]:
    """One request to the bridge, as the agent sends it: its status and body."""

    async def go() -> tuple[int, bytes]:
        async with aiohttp.ClientSession(connector=aiohttp.UnixConnector(path=unix)) as session:
            data = orjson.dumps(body) if body is not None else None
            headers = {"authorization": "Bearer sk-placeholder", "content-type": "application/json"}
            async with session.request(method, "http://bridge" + path, data=data, headers=headers) as r:
                return r.status, await r.read()

    return asyncio.run(go())


@contextlib.contextmanager
def scripted_bridge(tmp_path: Path, **budget: int) -> Iterator[Bridged]:
    """The bridge with `budget` (BridgeConfig's limits), closed on the way out (which releases a held
    request) with its upstream."""
    body = MINI.requests("toolcall")[3]["body"]
    (tmp_path / "sock").mkdir()
    upstream = ScriptedUpstream(
        Script(turns=[Turn(blocks=[TextBlock(text="Done.")], repeat=True)], model="fake-model"),
        expected_key=KEY,
    ).__enter__()
    config = BridgeConfig(upstream=upstream.url, api_key=KEY, side_calls=(PROBE,), **budget)
    bridge = Bridge(
        ChatPrefixGate(body["messages"]), ChatDialect(), config, tmp_path / "sock" / "bridge.sock"
    )
    bridge.__enter__()
    unix = str(short_alias(tmp_path / "sock") / "bridge.sock")
    try:
        yield Bridged(upstream, bridge, unix, body)
    finally:
        bridge.close()
        upstream.__exit__(None)
        remove_alias(Path(unix).parent)


class Held:
    """The main-thread request sent in a thread of its own, waited for until the bridge holds it (its
    `budget` then says why) or answers it; `answer()` once the bridge closed, which releases it."""

    def __init__(self, on: Bridged):
        self._answers: list[tuple[int, bytes]] = []
        self._thread = threading.Thread(
            target=lambda: self._answers.append(send(on.unix, "POST", CHAT, on.main))
        )
        self._thread.start()
        while on.bridge.budget is None and self._thread.is_alive():
            self._thread.join(0.05)

    def answer(self) -> tuple[int, bytes]:
        self._thread.join()
        assert self._answers, "the held request got no answer"
        return self._answers[0]
