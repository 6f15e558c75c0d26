"""The layers of docs/architecture.md, held on every import of the project's own modules (those inside a
function and under TYPE_CHECKING too): each goes down, never up or sideways across layers, and the
modules form no cycle. No Docker."""

from __future__ import annotations

import ast
from pathlib import Path

from replayer import adapters, bridges, sandboxes

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = {
    "replayer": ROOT / "replayer",
    "replayer.adapters": Path(adapters.__file__).parent,
    "replayer.bridges": Path(bridges.__file__).parent,
    "replayer.sandboxes": Path(sandboxes.__file__).parent,
}
LAYERS = {
    # layer -> the layers it may import (besides itself)
    "floor": set(),
    "sandboxes": {"floor"},
    "bridges": {"floor"},
    "installer": {"floor"},
    "adapters": {"floor", "sandboxes", "bridges", "installer"},
    "pipeline": {"floor", "sandboxes", "bridges", "installer", "adapters"},
    "verbs": {"floor", "sandboxes", "bridges", "installer", "adapters", "pipeline"},
    "api": {"floor", "sandboxes", "bridges", "installer", "adapters", "pipeline", "verbs"},
    "cli": {"floor", "api"},
    "package": {"floor", "api"},
}


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for namespace, folder in FOLDERS.items():
        for path in folder.rglob("*.py"):
            rel = path.relative_to(folder).with_suffix("").parts
            if "companion" in rel or (
                namespace == "replayer" and rel[0] in ("adapters", "bridges", "sandboxes")
            ):
                continue  # companions run inside the sandbox, by the agent's own interpreter
            parts = [namespace, *rel]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def layer(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "package"
    return {"floor": "floor", "pipeline": "pipeline", "verbs": "verbs", "cli": "cli", "api": "api"}.get(
        parts[1], parts[1]
    )


def imports(path: Path, module: str, known: dict[str, Path]) -> set[str]:
    """The project modules `path` imports: `from a.b import c` is a.b.c when that is a module, else a.b."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "replayer")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + [base]
                ).strip(".")
            if base.split(".")[0] != "replayer":
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in known else base)
    return {m for m in found if m in known and m != module}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: imports(p, m, known) for m, p in known.items()}


def test_every_module_has_a_layer() -> None:
    assert {layer(m) for m in graph()} <= set(LAYERS)


def test_imports_go_down_the_layers() -> None:
    wrong = [
        f"{m} ({layer(m)}) imports {i} ({layer(i)})"
        for m, imported in sorted(graph().items())
        for i in sorted(imported)
        if layer(i) != layer(m)
        and layer(i) not in LAYERS[layer(m)]
        and not (layer(i) == "package" and i == "replayer")
    ]
    assert not wrong, "\n".join(wrong)


def test_the_package_imports_nothing_but_its_version_at_import() -> None:
    tree = ast.parse((ROOT / "replayer" / "__init__.py").read_text())
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert [n.module for n in top if isinstance(n, ast.ImportFrom)] == [
        "__future__",
        "typing",
        "replayer.floor.release",
    ]


def test_no_cycle() -> None:
    edges = graph()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    assert not cycles, "\n".join(" <-> ".join(c) for c in cycles)


def test_the_layer_rules_see_a_wrong_import(tmp_path: Path) -> None:
    """The checker itself: an upward import written into a floor module is found."""
    floor = tmp_path / "limits.py"
    floor.write_text("from replayer.pipeline import engine\n")
    found = imports(floor, "replayer.floor.limits", {**modules(), "replayer.floor.limits": floor})
    assert "replayer.pipeline.engine" in found and layer("replayer.pipeline.engine") not in LAYERS["floor"]


def test_only_the_adapters_know_an_agents_package() -> None:
    """The engine, the verbs, the bridges and the sandboxes go through the registry and the `Adapter`, never
    into one agent's package: adding an agent touches none of them."""
    agents = {
        m
        for m in modules()
        if m.count(".") == 2
        and m.startswith("replayer.adapters.")
        and (FOLDERS["replayer.adapters"] / m.rsplit(".", 1)[1] / "__init__.py").is_file()
    }
    assert len(agents) >= 7
    into = [
        f"{m} imports {i}"
        for m, imported in sorted(graph().items())
        if not m.startswith("replayer.adapters")
        for i in sorted(imported)
        if any(i == a or i.startswith(a + ".") for a in agents)
    ]
    assert not into, "\n".join(into)
