"""The package's floors, read from its source with `ast`: a module imports only its own floor and the
floors below it, and no two folders import each other. Every import counts, including those inside
functions and under TYPE_CHECKING."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import epstack

PACKAGE = Path(epstack.__file__).parent
GROUND = "epstack"  # the top-level modules: errors, cmd, inputs, output, document, stack, layers, ...

# Bottom to top; a folder may import its own floor and the floors below.
FLOORS: tuple[frozenset[str], ...] = tuple(
    frozenset(floor)
    for floor in (
        {GROUND, "resources"},
        {"pins"},
        {"python"},
        {"jit"},
        {"guard"},
        {"image"},
        {"aws"},
        {"smoke", "cluster", "doctor"},
        {"bump"},
        {"commands"},
    )
)
FLOOR = {folder: height for height, floor in enumerate(FLOORS) for folder in floor}

# The arrows that stay: each a `python -m` entry point (epstack, epstack.doctor, epstack.smoke) that runs the
# CLI; nothing imports a __main__ module (tests/test_package.py), so they close no import loop.
KNOWN: frozenset[tuple[str, str]] = frozenset(
    {
        (GROUND, "commands"),  # epstack.__main__ -> commands.main
        ("doctor", "commands"),  # doctor.__main__ -> commands.doctor
        ("smoke", "commands"),  # smoke.__main__ -> commands.main
    }
)


def folder_of(module: str, root: Path = PACKAGE) -> str:
    """The folder a dotted module name lives in: a subpackage of the package at `root`, or GROUND."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and (root / parts[1]).is_dir() else GROUND


def _targets(node: ast.Import | ast.ImportFrom) -> list[str]:
    """The epstack modules an import names (`from epstack import layers` names epstack.layers)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == "epstack"]
    if node.level or not node.module or node.module.split(".")[0] != "epstack":
        return []
    return [
        f"{node.module}.{alias.name}" if node.module == "epstack" else node.module for alias in node.names
    ]


def imports(root: Path = PACKAGE) -> dict[tuple[str, str], list[str]]:
    """Every import from one folder into another: (from, to) -> ["module:line -> target", ...]."""
    found: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        module = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
        statements = ast.walk(ast.parse(path.read_text(), filename=str(path)))
        for node in (node for node in statements if isinstance(node, ast.Import | ast.ImportFrom)):
            for target in _targets(node):
                pair = (folder_of(module, root), folder_of(target, root))
                if pair[0] != pair[1]:
                    found[pair].append(f"{module}:{node.lineno} -> {target}")
    return found


def upward(found: dict[tuple[str, str], list[str]]) -> list[str]:
    """The imports of a higher floor, but for the known ones."""
    return [
        line
        for (source, target), lines in sorted(found.items())
        if FLOOR[target] > FLOOR[source] and (source, target) not in KNOWN
        for line in lines
    ]


def loops(found: dict[tuple[str, str], list[str]]) -> list[str]:
    """The imports on a loop between folders (of any length), but for the known ones."""
    edges = defaultdict(set)
    for source, target in found.keys() - KNOWN:
        edges[source].add(target)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            folder = todo.pop()
            if folder == goal:
                return True
            if folder not in seen:
                seen.add(folder)
                todo.extend(edges[folder])
        return False

    return [
        line
        for (source, target), lines in sorted(found.items())
        if (source, target) not in KNOWN and reaches(target, source)
        for line in lines
    ]


def test_every_folder_has_a_floor() -> None:
    folders = {path.parent.name for path in PACKAGE.glob("*/__init__.py")}
    assert folders - FLOOR.keys() == set()


def test_no_folder_imports_a_higher_floor() -> None:
    assert upward(imports()) == []


def test_no_folders_import_each_other() -> None:
    assert loops(imports()) == []


def test_each_known_exception_is_still_there() -> None:
    """An exception removed from the code comes off the list, so the rule is strict again."""
    assert KNOWN - imports().keys() == set()


def _package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / "epstack" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "epstack" / name).write_text(text)
    return root / "epstack"


def test_an_upward_import_is_named_even_inside_a_function(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "pins/__init__.py": "",
            "pins/model.py": "def f():\n    from epstack.image.render import plan\n",
            "image/__init__.py": "",
            "image/render.py": "from epstack.pins import model\nfrom epstack import errors\n",
            "errors.py": "",
        },
    )
    assert upward(imports(package)) == ["epstack.pins.model:2 -> epstack.image.render"]


def test_a_loop_between_folders_on_one_floor_is_named(tmp_path: Path) -> None:
    package = _package(
        tmp_path,
        {
            "doctor/__init__.py": "import epstack.cluster.k8s\n",
            "cluster/__init__.py": "",
            "cluster/k8s.py": "from epstack.smoke import config\nfrom epstack import doctor\n",
            "smoke/__init__.py": "",
        },
    )
    assert loops(imports(package)) == [
        "epstack.cluster.k8s:2 -> epstack.doctor",
        "epstack.doctor:1 -> epstack.cluster.k8s",
    ]
