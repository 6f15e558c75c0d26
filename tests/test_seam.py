"""The container seam (sandboxes/base.py): no module of the replayer outside sandboxes/ imports an engine
module; each reaches the engine through `sandboxes.engines.chosen()` and the protocols. No Docker."""

from __future__ import annotations

from pathlib import Path

from tests.test_layers import graph, imports, modules

ENGINE_MODULES = {"replayer.sandboxes.docker", "replayer.sandboxes.podman", "replayer.sandboxes.ahead"}
"""What one engine implements (ahead.py keeps Docker containers ahead over slots)."""


def into_engines(edges: dict[str, set[str]]) -> list[str]:
    return [
        f"{m} imports {i}"
        for m, imported in sorted(edges.items())
        if not m.startswith("replayer.sandboxes.")
        for i in sorted(imported & ENGINE_MODULES)
    ]


def test_every_engine_module_is_known() -> None:
    assert set(modules()) >= ENGINE_MODULES


def test_nothing_outside_sandboxes_imports_an_engine_module() -> None:
    wrong = into_engines(graph())
    assert not wrong, "\n".join(wrong)


def test_the_guard_sees_a_planted_import(tmp_path: Path) -> None:
    """The guard itself: an engine import planted in a pipeline module (inside a function, as the old code
    had them) is found."""
    planted = tmp_path / "fork.py"
    planted.write_text("def backend():\n    from replayer.sandboxes.podman import PodmanEngine\n")
    known = {**modules(), "replayer.pipeline.fork": planted}
    edges = {**graph(), "replayer.pipeline.fork": imports(planted, "replayer.pipeline.fork", known)}
    assert into_engines(edges) == ["replayer.pipeline.fork imports replayer.sandboxes.podman"]
