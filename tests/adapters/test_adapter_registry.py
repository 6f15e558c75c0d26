"""The adapter registry and the shape every adapter shares (no Docker)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from replayer import adapters
from replayer.adapters.base import Adapter
from replayer.bridges.usage import Usage
from replayer.floor.divergence import NORMALIZERS
from replayer.floor.errors import BadInput
from tests.conftest import CLAUDE

ADAPTERS = Path(adapters.__file__).resolve().parent


def test_every_registered_adapter_is_a_complete_adapter_under_its_name() -> None:
    for name in adapters.REGISTRY:
        adapter = adapters.by_name(name)  # an abstract method left out would refuse the instance
        assert isinstance(adapter, Adapter)
        assert adapter.name == name
    assert [a.name for a in adapters.all_adapters()] == list(adapters.REGISTRY)


def test_an_unknown_name_is_refused() -> None:
    with pytest.raises(BadInput, match="no adapter named 'nope'"):
        adapters.by_name("nope")


def test_detection_is_a_class_method_and_claims_nothing_empty() -> None:
    for name in adapters.REGISTRY:
        assert adapters.adapter_class(name).detect([]) is False


def test_every_agent_declares_named_forms_with_their_writers() -> None:
    for name in adapters.REGISTRY:
        forms = adapters.adapter_class(name).forms
        assert forms and len({f.name for f in forms}) == len(forms), name
        assert all(f.written_by for f in forms), name


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            if (
                node.module != "replayer.adapters"
            ):  # `from replayer.adapters import sandbox_paths` imports that module
                names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _is_name_of_registry(module: str) -> bool:
    """`adapters.X` where X is no module of its own (a name defined by adapters/__init__.py)."""
    name = module.split(".", 2)[2]
    return module.startswith("replayer.adapters.") and not (
        (ADAPTERS / f"{name}.py").is_file() or (ADAPTERS / name / "__init__.py").is_file()
    )


def test_no_adapter_imports_another() -> None:
    packages = {p.name for p in ADAPTERS.iterdir() if (p / "__init__.py").is_file()}
    assert len(packages) >= 6
    for package in packages:
        others = {f"replayer.adapters.{p}" for p in packages - {package}}
        for path in (ADAPTERS / package).rglob("*.py"):
            imported = _imported_modules(path)
            crossing = {m for m in imported if any(m == o or m.startswith(o + ".") for o in others)}
            assert not crossing, f"{path.relative_to(ADAPTERS)} imports {sorted(crossing)}"
            from_registry = {
                m
                for m in imported
                if m == "replayer.adapters" or (m.count(".") == 2 and _is_name_of_registry(m))
            }
            assert not from_registry, (
                f"{path.relative_to(ADAPTERS)} imports the registry: {sorted(from_registry)}"
            )


def test_only_the_trajectory_touches_its_native_state() -> None:
    """Parsers keep their native state with `keep_native`, adapters read it with `native()` / `native_as`."""
    root = ADAPTERS.parent
    for folder in ("adapters", "replayer", "bridges", "sandboxes", "tests"):
        for path in (root / folder).rglob("*.py"):
            if path == root / "replayer" / "floor" / "trajectory.py" or "fixtures" in path.parts:
                continue
            tree = ast.parse(path.read_text())
            touches = [
                n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "_native"
            ]
            assert not touches, f"{path.relative_to(root)}:{touches[0]} touches Trajectory._native"


def test_the_native_state_is_read_as_the_adapter_that_parsed_it() -> None:
    claude, codex = adapters.by_name("claude_code"), adapters.by_name("codex")
    traj = claude.parse(CLAUDE.fixture("single") / "session.jsonl")
    assert claude.native(traj).items
    with pytest.raises(TypeError, match="this claude_code trajectory keeps Native, not Native"):
        codex.native(traj)


CENTRAL = (
    "replayer/floor/divergence.py",
    "replayer/pipeline/steps.py",
    "bridges/usage.py",
    "bridges/core.py",
)
"""Modules every agent goes through: what is an agent's (its tools) or a protocol's (its usage keys) is
declared by its adapter or dialect, not named here."""


def test_no_central_module_names_an_agents_tools_or_a_protocols_usage_keys() -> None:
    declared: dict[str, str] = {}
    for adapter in adapters.all_adapters():
        declared.update({tool: f"{adapter.name}'s tool" for tool in adapter.walk_order_tools})
        keys = type(adapter.dialect()).usage_keys
        names = [keys.container, *keys.input, *keys.output]
        declared.update({key: f"{type(adapter.dialect()).__name__}'s usage key" for key in names})
    for own in Usage.model_fields:  # the replayer's own names for the counts (Anthropic's and Responses' too)
        declared.pop(own, None)
    assert {"Glob", "grep_search", "usageMetadata", "prompt_tokens"} <= set(declared)
    root = ADAPTERS.parent
    for module in CENTRAL:
        tree = ast.parse((root / module).read_text())
        strings = {
            n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        named = sorted(s for s in strings if s in declared)
        assert not named, f"{module} names {', '.join(f'{s!r} ({declared[s]})' for s in named)}"


def test_every_declared_normalizer_exists() -> None:
    for adapter in adapters.all_adapters():
        for tool in {"bash", *adapter.walk_order_tools}:
            unknown = set(adapter.normalizers(tool)) - set(NORMALIZERS)
            assert not unknown, f"{adapter.name} declares unknown normalizers {sorted(unknown)}"


def test_verify_names_no_agent_nor_its_probe() -> None:
    """`replayer verify` runs the probe each adapter declares: adding an agent touches no line of it."""
    declared: dict[str, str] = {}
    for adapter in adapters.all_adapters():
        declared[adapter.name] = "an agent"
        probe = [*adapter.probe_shell, *adapter.probe_read, *(adapter.probe_finish or ())[:1]]
        declared.update({tool: f"{adapter.name}'s probe tool" for tool in probe})
        declared.update({p: f"{adapter.name}'s recordings" for p in adapter.probe_recordings})
        if adapter.probe_native:
            declared[adapter.probe_native] = f"{adapter.name}'s native file"
        if adapter.probe_submit:
            declared[adapter.probe_submit] = f"{adapter.name}'s submit"
    assert {"gemini_cli", "run_shell_command", "finish", "session.jsonl"} <= set(declared)
    path = ADAPTERS.parent / "replayer" / "verbs" / "verify.py"
    tree = ast.parse(path.read_text())
    strings = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    named = sorted(s for s in strings if s in declared)
    assert not named, f"replayer/verbs/verify.py names {', '.join(f'{s!r} ({declared[s]})' for s in named)}"


def _outside_the_adapters() -> list[Path]:
    root = ADAPTERS.parent
    found = [*sorted((root / "replayer").rglob("*.py")), *sorted((root / "bridges").rglob("*.py"))]
    return [*found, *sorted((root / "sandboxes").rglob("*.py"))]


def _own_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.name if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else ""


SHELL_WORDS = {"bash", "read", "shell"}
"""Also what the sandbox itself runs (`bash -c`, `sh -c ... read`): not an agent's tool there."""


def test_no_module_outside_the_adapters_names_an_agent_its_tools_or_its_side_calls() -> None:
    """Which agent, which tool, which request is a side call: each is the adapter's to declare (the main
    thread's rule is `Launcher.main_thread`), so the engine, the bridges and the sandboxes name none, in a
    string or in a name of their own."""
    declared: dict[str, str] = {}
    words = {"claude", "codex", "opencode", "openhands", "gemini_cli", "mini_swe"}
    for adapter in adapters.all_adapters():
        declared[adapter.name] = "an agent"
        tools = [*adapter.walk_order_tools, *adapter.probe_shell, *adapter.probe_read]
        declared.update({t: f"{adapter.name}'s tool" for t in tools if t not in SHELL_WORDS})
    assert {"claude_code", "Bash", "run_shell_command", "terminal"} <= set(declared)
    assert all(any(w in a.name for w in words) or a.name == "pi" for a in adapters.all_adapters())
    for path in _outside_the_adapters():
        tree = ast.parse(path.read_text())
        named = sorted(
            {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
            & set(declared)
        )
        own = sorted(
            {name for name in map(_own_name, ast.walk(tree)) if any(w in name.lower() for w in words)}
        )
        where = path.relative_to(ADAPTERS.parent)
        assert not named, f"{where} names {', '.join(f'{s!r} ({declared[s]})' for s in named)}"
        assert not own, f"{where} has names of an agent: {', '.join(own)}"
