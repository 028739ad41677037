"""Data flows one way: search_spaces -> optimizer -> costmodels (fed by calibration) -> results.

Besides the direction between packages: a package uses another only through what that package
shows (its ``__init__`` and its public modules, never a module or name starting with ``_``), and no
module imports itself through others (an import circle), also where the import sits inside a
function or under ``TYPE_CHECKING``.
"""

import ast
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("costmodels", "calibration", "search_spaces", "optimizer", "results")
FORBIDDEN = {
    "costmodels": {"optimizer", "results", "calibration", "search_spaces"},
    "calibration": {"optimizer", "results", "search_spaces"},
    "search_spaces": {"optimizer", "results"},
    "results": {"optimizer", "search_spaces"},
}


def module_name(path: Path) -> str:
    parts = ["servopt", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def all_modules() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((ROOT / package).rglob("*.py"))}


@lru_cache(maxsize=None)
def imports(path: Path) -> list[tuple[list[str], str | None]]:
    """(dotted target, imported name or None) of every servopt import in a module, absolute or
    relative, wherever it sits (module level, inside a function, under TYPE_CHECKING)."""
    # A module's (or __init__'s) own package: what a level-1 relative import resolves against.
    package = ["servopt", *path.relative_to(ROOT).parent.parts]
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name.split("."), None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            target = base + (node.module.split(".") if node.module else [])
            found += [(target, alias.name) for alias in node.names]
    return [(target, name) for target, name in found if len(target) > 1 and target[0] == "servopt"]


def imported_subpackages(path: Path) -> set[str]:
    """The servopt subpackages (costmodels, optimizer, ...) a module imports."""
    return {target[1] for target, _ in imports(path)}


def import_graph() -> dict[str, set[str]]:
    """Module -> the servopt modules it imports (``from . import x`` names the submodule x)."""
    modules = all_modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for target, imported in imports(path):
            dotted = ".".join(target)
            sub = f"{dotted}.{imported}"
            edges.add(sub if sub in modules else dotted)
        graph[name] = {e for e in edges if e in modules and e != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return found


def test_relative_imports_resolve():
    assert "calibration" in imported_subpackages(ROOT / "optimizer" / "commands" / "plan.py")
    assert "costmodels" in imported_subpackages(ROOT / "calibration" / "registry.py")


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_follow_the_data_flow(package):
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = imported_subpackages(path) & FORBIDDEN[package]
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


@pytest.mark.parametrize("package", PACKAGES)
def test_other_packages_are_used_through_their_faces(package):
    for path in sorted((ROOT / package).rglob("*.py")):
        for target, name in imports(path):
            if target[1] == package:
                continue
            private = [part for part in [*target[2:], name or ""] if part.startswith("_")]
            assert not private, (f"{path.relative_to(ROOT)} imports {'.'.join(target)}"
                                 f"{'.' + name if name else ''}: {private[0]} is private to {target[1]}")


def test_circle_finder_finds_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [frozenset({"a", "b", "c"})]


def test_no_import_circles():
    found = circles(import_graph())
    assert not found, f"import circles: {[sorted(c) for c in found]}"
