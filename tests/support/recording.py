"""What every fixture recorder does around the real agent run: seed the run's folders, then write the fixture."""

from __future__ import annotations

import argparse
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, TypeVar

import orjson
from pydantic import BaseModel, ConfigDict

from replayer.bridges.scripted import Script, TextBlock, ToolUseBlock, Turn
from replayer.floor.pins import load_pins


class Named(Protocol):
    name: str


S = TypeVar("S", bound=Named)


def seed(state: Path, files: dict[str, str], *folders: str) -> dict[str, Path]:
    """The workspace (with the scenario's files, copied as `state/initial`) and the other named folders."""
    paths = {name: state / name for name in ("workspace", *folders)}
    for path in paths.values():
        path.mkdir()
    for rel, text in files.items():
        (paths["workspace"] / rel).parent.mkdir(parents=True, exist_ok=True)
        (paths["workspace"] / rel).write_text(text)
    shutil.copytree(paths["workspace"], state / "initial")
    return paths


def write_fixture(
    dest: Path, scenario: str, agent: str, state: Path, files: dict[str, bytes], log: list[dict], **meta: Any
) -> Path:
    """dest/<scenario>/: the initial workspace, the agent's files, the upstream log and meta.json (with the pin)."""
    pin = load_pins().agents[agent]
    out = dest / scenario
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    shutil.copytree(state / "initial", out / "workspace")
    for name, data in files.items():
        (out / name).write_bytes(data)
    (out / "upstream.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in log))
    head = {
        "scenario": scenario,
        "agent": agent,
        "cli_package": pin.package,
        "cli_version": meta.pop("cli_version", pin.version),
    }
    (out / "meta.json").write_bytes(orjson.dumps({**head, **meta}, option=orjson.OPT_INDENT_2))
    return out


class Scenario(BaseModel):
    """One recording: the workspace files, the user prompts (the first starts the session, each further
    one continues it) and the scripted model."""

    model_config = ConfigDict(extra="forbid")
    name: str
    files: dict[str, str]
    prompts: list[str]
    script: Script


def call(sid: str, n: int, tool: str, **args: object) -> ToolUseBlock:
    return ToolUseBlock(id=f"call_{sid}_{n:02d}", name=tool, input=dict(args))


def turn(*blocks: TextBlock | ToolUseBlock) -> Turn:
    return Turn(blocks=list(blocks))


def recorder_parser(doc: str | None, dest: Path) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=doc)
    parser.add_argument("names", nargs="*")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--dest", type=Path, default=dest)
    return parser


def record_selected(
    args: argparse.Namespace, scenarios: Sequence[S], record: Callable[[S, Path], Path]
) -> None:
    for scenario in scenarios:
        if args.all or scenario.name in args.names:
            print("recorded", record(scenario, args.dest))


def first_request(run: Callable[..., tuple[Any, ...]], script: Script) -> dict[str, Any]:
    """The body of the first main-thread request the running CLI version sends for one prompt in an empty
    workspace (`run` is a recorder's run_* function): what that version offers the model."""
    with tempfile.TemporaryDirectory(prefix="record-tools-") as tmp:
        paths = seed(Path(tmp), {}, "home", "sock")
        log = run(
            prompts=["hi"],
            workspace=paths["workspace"],
            home=paths["home"],
            sockets=paths["sock"],
            script=script,
        )[1]
    return dict(next(r["body"] for r in log if r.get("main_thread")))
