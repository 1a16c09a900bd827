"""The npuc package's layering: no import cycle between its subpackages.

The graph is built statically: every module under npuc/ is parsed with ``ast`` and every
``import``/``from ... import`` in it counts, at module level or inside a function, relative or
absolute.  A node is a subpackage (``npuc.lower``, ``npuc.kir`` ...) or a top-level module
(``npuc.pipeline``, ``npuc.errors`` ...).  Imports guarded by ``if TYPE_CHECKING:`` are left out:
they never run, they only name a type for an annotation.
"""

from __future__ import annotations

import ast
from pathlib import Path

import npuc

PACKAGE = Path(npuc.__file__).parent


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _node(module: str) -> str | None:
    """The graph node a module belongs to: ``npuc.<subpackage>`` or ``npuc.<module>``."""
    parts = module.split(".")
    if parts[0] != "npuc" or len(parts) < 2:
        return None
    return f"npuc.{parts[1]}"


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, module: str, is_package: bool):
    """(imported module, line) for every import that runs, anywhere in the module."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")
                base = base[: len(base) - node.level + (1 if is_package else 0)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target, node.lineno
            for alias in node.names:  # ``from npuc import lower`` imports the subpackage
                yield f"{target}.{alias.name}", node.lineno
        stack.extend(ast.iter_child_nodes(node))


def import_graph() -> dict[str, dict[str, str]]:
    """node -> {imported node: "module:line" of the first import that makes the edge}."""
    graph: dict[str, dict[str, str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        src = _node(module)
        if src is None:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        edges = graph.setdefault(src, {})
        for target, line in _imports(tree, module, path.name == "__init__.py"):
            dst = _node(target)
            if dst is None or dst == src or not _exists(dst):
                continue
            edges.setdefault(dst, f"{module}:{line}")
    return graph


def _exists(node: str) -> bool:
    rel = node.split(".", 1)[1]
    return (PACKAGE / rel).is_dir() or (PACKAGE / f"{rel}.py").is_file()


def find_cycle(graph: dict[str, dict[str, str]]) -> list[str] | None:
    """One cycle of the graph as a list of nodes (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the path, 2: done
    path: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        path.append(n)
        for m in sorted(graph.get(n, {})):
            if state.get(m) == 1:
                return path[path.index(m):] + [m]
            if m not in state:
                found = visit(m)
                if found:
                    return found
        path.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            found = visit(n)
            if found:
                return found
    return None


def describe(cycle: list[str], graph: dict[str, dict[str, str]]) -> str:
    return "\n".join(f"  {a} -> {b}   ({graph[a][b]})" for a, b in zip(cycle, cycle[1:]))


def test_no_import_cycle_between_subpackages():
    graph = import_graph()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle between npuc's subpackages:\n" + describe(cycle, graph)


def test_kernel_ir_sits_below_lowering_scheduling_and_codegen():
    graph = import_graph()
    for user in ("npuc.lower", "npuc.schedule", "npuc.codegen"):
        assert "npuc.kir" in graph[user], f"{user} does not use the kernel-level IR"
    assert not set(graph["npuc.kir"]) & {"npuc.lower", "npuc.schedule", "npuc.codegen", "npuc.runtime"}
    assert "npuc.lower" not in graph["npuc.codegen"] and "npuc.codegen" not in graph["npuc.schedule"]


def test_the_cycle_finder_sees_a_cycle_and_names_the_imports():
    graph = {"npuc.a": {"npuc.b": "npuc.a.x:3"}, "npuc.b": {"npuc.c": "npuc.b.y:7"}, "npuc.c": {"npuc.a": "npuc.c:1"}}
    cycle = find_cycle(graph)
    assert cycle == ["npuc.a", "npuc.b", "npuc.c", "npuc.a"]
    assert "npuc.b.y:7" in describe(cycle, graph)
    assert find_cycle({"npuc.a": {"npuc.b": ""}, "npuc.b": {}}) is None


def test_function_local_and_relative_imports_count():
    tree = ast.parse("def f():\n    from npuc.lower import rules\nfrom . import tensor\nif TYPE_CHECKING:\n    import npuc.runtime\n")
    found = {t for t, _ in _imports(tree, "npuc.kir.text", False)}
    assert "npuc.lower" in found and "npuc.kir.tensor" in found
    assert "npuc.runtime" not in found
