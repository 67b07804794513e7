"""The hub's parts depend on each other in one direction and through public names only: no
module of hub/ reaches into another object's private attributes, and none imports another
behind TYPE_CHECKING (a cycle the type checker sees and the interpreter does not)."""

from __future__ import annotations

import ast
from pathlib import Path

import corral_server.hub

HUB = Path(corral_server.hub.__file__).parent


def _modules() -> dict[str, ast.Module]:
    return {path.stem: ast.parse(path.read_text()) for path in sorted(HUB.glob("*.py"))}


def _hub_imports(tree: ast.AST) -> set[str]:
    prefix = "corral_server.hub."
    return {
        node.module.removeprefix(prefix)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(prefix)
    }


def test_no_hub_module_touches_a_private_attribute_of_anything_but_itself() -> None:
    reached: list[str] = []
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_"):
                continue
            if node.attr.startswith("__") and node.attr.endswith("__"):
                continue  # dunders (tuple.__new__) are public protocol
            if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                continue
            reached.append(f"{name}.py:{node.lineno} .{node.attr}")
    assert reached == []


def test_no_hub_module_imports_another_behind_type_checking() -> None:
    hidden: list[str] = []
    for name, tree in _modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                hidden += [f"{name} -> {target}" for target in _hub_imports(node)]
    assert hidden == []


def test_the_hub_modules_import_each_other_without_a_cycle() -> None:
    graph = {name: _hub_imports(tree) for name, tree in _modules().items() if name != "__init__"}
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in visiting, f"import cycle: {' -> '.join((*path, name))}"
        if name in order:
            return
        visiting.add(name)
        for target in sorted(graph.get(name, ())):
            visit(target, (*path, name))
        visiting.discard(name)
        order.append(name)

    for name in sorted(graph):
        visit(name, ())
    # The subscription is below every part that acts on it; the front door is above them all.
    assert order.index("subscription") < min(
        order.index(part) for part in ("index", "fanout", "catch_up", "delivery")
    )
    assert graph["subscription"] <= {"ring"}
    assert all("event_hub" not in targets for targets in graph.values())
