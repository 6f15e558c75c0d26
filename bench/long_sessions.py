"""Long sessions of every agent, each a recorded fixture's tool turns repeated with fresh ids, and the bare
JSON load of the same bytes that its parse + plan is measured against."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

FIXTURES = Path(__file__).resolve().parent.parent / "tests" / "fixtures"


@dataclass
class LongSession:
    agent: str
    form: str
    """What the file is, as the benchmark table names it."""
    path: Path
    source: str
    """The recorded fixture whose turns are repeated."""
    bare_load: Callable[[], object]
    """`orjson.loads` of the same bytes, read beforehand: of every line, of the document, of every event file."""
    units: int
    """Lines, or event files, the bare load parses."""
    size: int
    """Bytes."""
    read: Callable[[], object] | None = None
    """For a directory: reading its event files alone (open, read, close), which the baseline leaves out."""


def _lines(path: Path) -> LongSession:
    data = path.read_bytes()
    lines = data.splitlines()
    return LongSession(
        "", "", path, "", lambda: [orjson.loads(line) for line in lines], len(lines), len(data)
    )


def _document(path: Path) -> LongSession:
    data = path.read_bytes()
    return LongSession("", "", path, "", lambda: orjson.loads(data), 1, len(data))


def _renamed(value: Any, pairs: list[tuple[str, str]]) -> Any:
    """`value` with every occurrence of each old id replaced by the new one (ids are unique strings)."""
    text = orjson.dumps(value).decode()
    for old, new in pairs:
        text = text.replace(old, new)
    return orjson.loads(text)


def claude_code(dest: Path, copies: int) -> Path:
    """The recorded parallel session's two tool batches, repeated with fresh uuids and ids (2 steps a copy)."""
    records = [
        orjson.loads(line)
        for line in (FIXTURES / "claude_code" / "parallel" / "session.jsonl").read_bytes().splitlines()
    ]
    body = [r for r in records if r.get("type") in ("user", "assistant", "attachment")]
    head_prompt = body[0]
    out = [head_prompt]
    parent = head_prompt["uuid"]
    for n in range(copies):
        turns = body[3:-1]  # the two tool batches, without prompt, listings and final text
        mapping = {rec["uuid"]: f"{rec['uuid'][:-6]}{n:06d}" for rec in turns}
        for rec in turns:
            new = _renamed(rec, [("toolu_parallel_", f"toolu_{n:06d}_"), ("msg_parallel_", f"msg_{n:06d}_")])
            new["uuid"] = mapping[rec["uuid"]]
            new["parentUuid"] = mapping.get(rec["parentUuid"], parent)
            out.append(new)
        parent = out[-1]["uuid"]
    path = dest / "large.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in out))
    return path


def codex(dest: Path, copies: int) -> Path:
    """The recorded patch_errors rollout's 17 calls (16 apply_patch, 1 exec_command), repeated with fresh
    call ids, ordinals renumbered (17 steps a copy)."""
    records = [
        orjson.loads(line)
        for line in (FIXTURES / "codex" / "patch_errors" / "rollout.jsonl").read_bytes().splitlines()
    ]
    first = next(i for i, r in enumerate(records) if r["payload"].get("type") == "custom_tool_call")
    last = max(i for i, r in enumerate(records) if r["payload"].get("type") == "function_call_output")
    head, body, tail = records[:first], records[first : last + 2], records[last + 2 :]
    out = list(head)
    for n in range(copies):
        out += [_renamed(r, [("call_patch_errors_", f"call_{n:06d}_")]) for r in body]
    out += tail
    for ordinal, record in enumerate(out):
        record["ordinal"] = ordinal
    path = dest / "rollout-2026-01-01T00-00-00-00000000-0000-0000-0000-000000000000.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in out))
    return path


def opencode(dest: Path, copies: int) -> Path:
    """The recorded tools export's six assistant messages with tool parts (12 calls), repeated with fresh
    message, part and call ids (6 steps a copy)."""
    doc = orjson.loads((FIXTURES / "opencode" / "tools" / "export.json").read_bytes())
    messages = doc["messages"]
    body = [m for m in messages if any(p.get("type") == "tool" for p in m["parts"])]
    out = [m for m in messages if m["info"]["role"] == "user"]
    for n in range(copies):
        for message in body:
            ids = [message["info"]["id"]] + [p["id"] for p in message["parts"]]
            ids += [p["callID"] for p in message["parts"] if p.get("callID")]
            out.append(_renamed(message, [(old, f"{old[:-6]}{n:06d}") for old in ids]))
    out += [m for m in messages[1:] if m not in body]  # the final answer
    path = dest / "export.json"
    path.write_bytes(orjson.dumps({**doc, "messages": out}))
    return path


def pi(dest: Path, copies: int) -> Path:
    """The recorded tools session's five assistant messages with tool calls and their results, repeated with
    fresh entry, call and response ids, chained by parentId (5 steps a copy)."""
    entries = [
        orjson.loads(line) for line in (FIXTURES / "pi" / "tools" / "session.jsonl").read_bytes().splitlines()
    ]
    first = next(i for i, e in enumerate(entries) if e.get("message", {}).get("role") == "assistant")
    head, body, tail = entries[:first], entries[first:-1], entries[-1:]
    out = list(head)
    parent = head[-1]["id"]
    serial = 0
    for n in range(copies):
        for entry in body:
            new = _renamed(entry, [("call_tools_", f"call_{n:06d}_"), ("chatcmpl-", f"chatcmpl-{n:06d}-")])
            serial += 1
            new["id"], new["parentId"], parent = f"{serial:08x}", parent, f"{serial:08x}"
            out.append(new)
    out += [{**e, "parentId": parent} for e in tail]
    path = dest / "2026-01-01T00-00-00-000Z_01a2379f-10ff-724c-bb7f-863f1479bf6a.jsonl"
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in out))
    return path


def mini_swe_agent(dest: Path, copies: int) -> Path:
    """The recorded toolcall trajectory's assistant and tool messages (9 calls in 7 steps), repeated with
    fresh tool call ids; the submission stays last."""
    doc = orjson.loads((FIXTURES / "mini_swe_agent" / "toolcall" / "trajectory.traj.json").read_bytes())
    messages = doc["messages"]
    body = messages[2:-1]
    out = messages[:2]
    for n in range(copies):
        out += [_renamed(m, [("call_toolcall_", f"call_{n:06d}_")]) for m in body]
    out.append(messages[-1])
    path = dest / "long.traj.json"
    path.write_bytes(orjson.dumps({**doc, "messages": out}))
    return path


def openhands(dest: Path, copies: int) -> Path:
    """The recorded V1 conversation's four tool turns (5 calls), each event a file, repeated with fresh
    event, response and call ids; the finish turn stays last (4 steps a copy)."""
    source = FIXTURES / "openhands" / "v1" / "conversation"
    files = sorted((source / "events").glob("event-*.json"))
    events = [orjson.loads(f.read_bytes()) for f in files]
    first = next(i for i, e in enumerate(events) if e["kind"] == "ActionEvent")
    finish = next(i for i, e in enumerate(events) if e.get("tool_name") == "finish")
    head, body, tail = events[:first], events[first:finish], events[finish:]
    out = list(head)
    for n in range(copies):
        pairs = [(e["id"], str(uuid.UUID(int=n * 1000 + k + 1))) for k, e in enumerate(body)]
        pairs += [("call_v1_", f"call_{n:06d}_"), ("chatcmpl-", f"chatcmpl-{n:06d}-")]
        out += [_renamed(e, pairs) for e in body]
    out += tail
    root = dest / "conversation"
    (root / "events").mkdir(parents=True)
    (root / "base_state.json").write_bytes((source / "base_state.json").read_bytes())
    for i, event in enumerate(out):
        (root / "events" / f"event-{i:05d}-{event['id']}.json").write_bytes(orjson.dumps(event))
    return root


def _event_files(root: Path) -> LongSession:
    files = [p for p in sorted((root / "events").iterdir()) if p.name.startswith("event-")]
    data = [p.read_bytes() for p in files]
    size = sum(map(len, data)) + (root / "base_state.json").stat().st_size
    session = LongSession("", "", root, "", lambda: [orjson.loads(d) for d in data], len(data), size)
    session.read = lambda: [p.read_bytes() for p in files]
    return session


def build(dest: Path) -> list[LongSession]:
    """About 4,000 steps of every agent."""
    made = [
        ("claude_code", "session JSONL", "parallel", claude_code, 2000, _lines),
        ("codex", "rollout JSONL", "patch_errors", codex, 236, _lines),
        ("opencode", "export JSON", "tools", opencode, 667, _document),
        ("pi", "session JSONL", "tools", pi, 800, _lines),
        ("mini_swe_agent", "`.traj.json`", "toolcall", mini_swe_agent, 572, _document),
        ("openhands", "V1 conversation directory", "v1", openhands, 1000, _event_files),
    ]
    sessions = []
    for agent, form, source, generate, copies, bare in made:
        folder = dest / agent
        folder.mkdir(parents=True)
        session = bare(generate(folder, copies))
        session.agent, session.form, session.source = agent, form, source
        sessions.append(session)
    return sessions
