"""Data flows one way: search_spaces -> optimizer -> costmodels (fed by calibration) -> results."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "costmodels": {"optimizer", "results", "calibration", "search_spaces"},
    "calibration": {"optimizer", "results", "search_spaces"},
    "search_spaces": {"optimizer", "results"},
    "results": {"optimizer", "search_spaces"},
}


def imported_subpackages(path: Path) -> set[str]:
    """The servopt subpackages (costmodels, optimizer, ...) a module imports, absolute or relative."""
    # A module's (or __init__'s) own package: what a level-1 relative import resolves against.
    package = ["servopt", *path.relative_to(ROOT).parent.parts]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        targets: list[list[str]] = []
        if isinstance(node, ast.Import):
            targets = [alias.name.split(".") for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            targets = [base + (node.module.split(".") if node.module else [])]
        for parts in targets:
            if len(parts) > 1 and parts[0] == "servopt":
                found.add(parts[1])
    return found


def test_relative_imports_resolve():
    assert "calibration" in imported_subpackages(ROOT / "optimizer" / "commands" / "plan.py")
    assert "costmodels" in imported_subpackages(ROOT / "calibration" / "registry.py")


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_imports_follow_the_data_flow(package):
    for path in sorted((ROOT / package).rglob("*.py")):
        bad = imported_subpackages(path) & FORBIDDEN[package]
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"
