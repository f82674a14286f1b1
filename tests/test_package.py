"""The package's shape: imports run one way (no cycle, TYPE_CHECKING and function-level imports
included), and only epstack.commands (and the entry points) know the command line."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "epstack"
# Beside epstack.commands and the `python -m` modules: the two processes the smoke starts on a GPU host
# (a rank, and the preflight probe), which take a few flags.
CLI_MODULES = {"epstack.smoke.worker", "epstack.smoke.preflight"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in PACKAGE.rglob("*.py")}


def _imports(path: Path) -> set[str]:
    """Every epstack module `path` imports, wherever the import statement is."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found |= {f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in MODULES}
            found.add(node.module)
    return {name for name in found if name in MODULES and name != "epstack"}


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of `graph`, as the modules along it; [] when there is none."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(module: str) -> list[str]:
        state[module] = "open"
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                return [*stack[stack.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        state[module] = "done"
        stack.pop()
        return []

    for module in sorted(graph):
        if module not in state and (found := visit(module)):
            return found
    return []


def test_the_import_graph_has_no_cycle() -> None:
    graph = {name: _imports(path) - {name} for name, path in MODULES.items()}
    # Importing a submodule runs its package's __init__; those hold no imports of their own here.
    assert not any(graph[name] for name, path in MODULES.items() if path.name == "__init__.py"), graph
    assert _cycle(graph) == []


def test_no_module_imports_an_entry_point() -> None:
    """The `python -m` modules may import up to commands/ only because nothing imports them."""
    imported = set().union(*(_imports(path) for path in MODULES.values()))
    assert {name for name in imported if name.endswith(".__main__")} == set()


def test_the_cycle_finder_finds_one() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_only_the_command_modules_know_the_command_line() -> None:
    knows = {
        name for name, path in MODULES.items() if {"argparse", "epstack.commands.common"} & _imports_any(path)
    }
    commands = {name for name in MODULES if name.startswith("epstack.commands")}
    entry_points = {name for name in MODULES if name.endswith("__main__")}
    assert knows - commands - entry_points - CLI_MODULES == set()


def _imports_any(path: Path) -> set[str]:
    """Every module name `path` imports, epstack's or not."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names
