"""The composition root wires every part once: each object gets its writer and leader elector in its
constructor (app/server.py create_app), and nothing sets them afterwards (docs/architecture.md)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from app.kube.parts import KubeConnection
from app.memory import MemoryWriter
from app.server import create_app
from app.settings import Settings

APP = Path(__file__).resolve().parents[2] / "app"
PORTS = {"writer", "_writer", "elector", "_elector"}


def late_assignments(source: str, filename: str = "<source>") -> list[str]:
    """Where `source` assigns a writer or an elector to an attribute outside its owner's __init__
    (`x.writer = ...`, `setattr(x, "elector", ...)`, including `self.writer = ...` in any other method)."""
    found: list[str] = []

    def visit(node: ast.AST, function: str | None) -> None:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            function = node.name
        targets: list[ast.AST] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)):
            targets = [node.target]
        for target in targets:
            for part in ast.walk(target):
                if isinstance(part, ast.Attribute) and part.attr in PORTS and not (
                        function == "__init__" and isinstance(part.value, ast.Name) and part.value.id == "self"):
                    found.append(f"{filename}:{node.lineno}: {ast.unparse(part)} assigned")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and node.args[1].value in PORTS):
            found.append(f"{filename}:{node.lineno}: setattr(..., {node.args[1].value!r})")
        for child in ast.iter_child_nodes(node):
            visit(child, function)

    visit(ast.parse(source, filename), None)
    return found


def test_nothing_in_the_service_sets_a_writer_or_an_elector_after_construction():
    late = [hit for path in sorted(APP.rglob("*.py"))
            for hit in late_assignments(path.read_text(), str(path.relative_to(APP.parent)))]
    assert late == []


@pytest.mark.parametrize("source", [
    "state.writer = writer",                                  # what create_app did before
    "app.state.service.elector = parts.elector",
    "class A:\n    def start(self, w):\n        self.writer = w",
    "setattr(state, 'writer', w)",
])
def test_the_check_finds_a_late_assignment(source):
    assert late_assignments(source)


def test_the_check_allows_a_constructor_to_keep_its_writer():
    source = "class A:\n    def __init__(self, w):\n        self.writer = w\n        self._elector = None"
    assert late_assignments(source) == []


def test_standalone_every_part_writes_through_the_one_writer_built_from_the_engines_state():
    app = create_app(Settings(), objects=[])
    engine, state = app.state.engine, app.state.service
    assert engine.state is state and isinstance(engine.writer, MemoryWriter) and engine.writer.state is state
    assert engine.binder.writer is engine.preemptor.writer is engine.stale.writer is engine.writer
    assert app.state.native_gate.writer is engine.writer
    assert not hasattr(state, "writer") and state.elector is None and state.is_leader()
    with pytest.raises(AttributeError):
        state.elector = object()


def test_live_the_connections_writer_and_elector_are_handed_in_and_its_source_feeds_the_state():
    class Elector:
        def is_leader(self) -> bool:
            return False

    sources = []

    class Source:
        def __init__(self, sink):
            self.sink = sink
            sources.append(self)

    writer, elector = object(), Elector()
    app = create_app(Settings(kubeconfig="kubeconfig", leader_elect=True),
                     kube=lambda settings: KubeConnection(writer, elector, Source, restore=False))
    engine, state = app.state.engine, app.state.service
    assert engine.writer is writer and engine.binder.writer is writer and app.state.native_gate.writer is writer
    assert state.elector is elector and not state.is_leader()
    assert [source.sink for source in sources] == [state]
    assert state.ready() == (False, "waiting for the first full sync of the cluster")
