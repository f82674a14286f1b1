"""Every file epstack ships besides its code, found through importlib.resources.

The templates (images/), the scripts the Dockerfiles COPY (scripts/image/, scripts/standin/) and the
project files the images' tool is installed from (pyproject.toml, constraints.txt) stay at the top of
the repository, where the README documents them. This package holds symlinks to them (images,
scripts/image, scripts/standin, project/): a checkout, editable or not, reads them in place, and a
wheel carries copies of their files (pyproject.toml's package-data follows the links). Render reads
them only through this module.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path

import jinja2

PACKAGE = files("epstack")
RESOURCES = files(__name__)
# The script folders the Dockerfiles COPY from (image layers and the CUDA stand-in).
CONTEXT_SCRIPTS = ("image", "standin")
# What install-epstack.sh builds the images' tool from, beside the package (in project/, where no
# module of the package takes that pyproject.toml for its own configuration).
PROJECT_FILES = ("pyproject.toml", "constraints.txt")


def template_loader() -> jinja2.BaseLoader:
    """The Jinja2 templates of images/."""
    return jinja2.PackageLoader(__name__, "images")


def context_scripts() -> dict[str, bytes]:
    """scripts/<folder>/<name> -> bytes, for each folder the Dockerfiles COPY from."""
    return {
        f"scripts/{folder}/{name}": data
        for folder in CONTEXT_SCRIPTS
        for name, data in _tree(RESOURCES / "scripts" / folder)
    }


def tool_sources() -> dict[str, bytes]:
    """The project install-epstack.sh installs in an image: the installed epstack package and the
    project files, as paths relative to that project's root."""
    project = {name: (RESOURCES / "project" / name).read_bytes() for name in PROJECT_FILES}
    return project | {f"epstack/{name}": data for name, data in _tree(PACKAGE)}


def inputs() -> list[Path]:
    """The folders render reads, links followed: epstack.output refuses to write over them. A package
    in a zip has none (nothing there can be written over)."""
    folders = [PACKAGE, RESOURCES / "images", *(RESOURCES / "scripts" / f for f in CONTEXT_SCRIPTS)]
    return [folder.resolve() for folder in folders if isinstance(folder, Path)]


def _tree(root: Traversable, prefix: str = "") -> Iterator[tuple[str, bytes]]:
    """(relative path, bytes) of every file under root, links followed, sorted, without bytecode or
    hidden files (a tool's cache)."""
    for entry in sorted(root.iterdir(), key=lambda entry: entry.name):
        if entry.name.startswith(".") or entry.name == "__pycache__":
            continue
        if entry.is_dir():
            yield from _tree(entry, f"{prefix}{entry.name}/")
        elif entry.is_file():
            yield f"{prefix}{entry.name}", entry.read_bytes()
