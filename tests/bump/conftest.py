"""The pins tests' checkout: the shipped pins.env locked against a package index on 127.0.0.1
(tests/python/localindex.py), copied for each test."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from epstack.commands.main import main
from tests.conftest import PINS
from tests.python.localindex import build_index, served, use_index


@pytest.fixture(scope="module")
def index(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with served(build_index(tmp_path_factory.mktemp("index"))) as url:
        yield url


@pytest.fixture(scope="module")
def locked(tmp_path_factory: pytest.TempPathFactory, index: str) -> Path:
    """The shipped pins.env and its locks, resolved by `epstack pins lock` against the local index."""
    root = tmp_path_factory.mktemp("checkout")
    shutil.copy(PINS, root / "pins.env")
    with pytest.MonkeyPatch.context() as monkeypatch:
        use_index(monkeypatch, index, root / "uv-cache")
        assert main(["pins", "lock", "--pins", str(root / "pins.env"), "--locks", str(root / "locks")]) == 0
    return root


@pytest.fixture
def checkout(locked: Path, tmp_path: Path, index: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the locked checkout for one test, uv pointed at the local index."""
    root = tmp_path / "checkout"
    shutil.copytree(locked, root)
    use_index(monkeypatch, index, root / "uv-cache")
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    files = [root / "pins.env", *sorted((root / "locks").iterdir())]
    return {path.name: path.read_bytes() for path in files}
