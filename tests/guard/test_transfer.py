"""The sglang layer's KV transfer engine rows, against distributions and modules written in a test site."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from epstack.checkrow import Check
from epstack.guard.expected import Expected
from epstack.guard.transfer import check_nixl_import, nixl_checks
from tests.conftest import write_dist

# The shape of nixl 1.5.1's own nixl/__init__.py: it imports the CUDA build and makes its _api nixl._api.
META_INIT = """import importlib, sys
_pkg = importlib.import_module("{backend}")
sys.modules["nixl._api"] = importlib.import_module("{backend}._api")
"""
COMPONENT = "nixl._api (SGLang's import)"


@pytest.fixture(autouse=True)
def forget_nixl() -> Iterator[None]:
    """Each test imports its own nixl."""
    yield
    for name in [name for name in sys.modules if name.split(".")[0] in ("nixl", "nixl_cu12", "nixl_cu13")]:
        del sys.modules[name]


def write_nixl(site: Path, backend: str, api: str = "class nixl_agent: pass") -> None:
    """The nixl module and its `backend` build, each with its dist-info at 1.5.1."""
    (site / "nixl").mkdir()
    (site / "nixl" / "__init__.py").write_text(META_INIT.format(backend=backend))
    (site / backend).mkdir()
    (site / backend / "__init__.py").write_text("")
    (site / backend / "_api.py").write_text(f"{api}\n")
    write_dist(site, "nixl", "1.5.1", ("nixl/__init__.py",))
    write_dist(site, backend.replace("_", "-"), "1.5.1", (f"{backend}/_api.py",))


def test_the_cuda_13_build_behind_sglangs_import_passes(site: Path) -> None:
    write_nixl(site, "nixl_cu13")
    rows = nixl_checks(Expected(cuda_version="13.0.3", nixl_version="1.5.1"))
    assert [(row.component, row.found, row.verdict) for row in rows] == [
        ("nixl", "1.5.1", "ok"),
        ("nixl-cu13", "1.5.1", "ok"),
        (COMPONENT, "nixl_cu13._api", "ok"),
    ]


def test_another_version_or_the_other_cuda_build_is_a_mismatch(site: Path) -> None:
    write_nixl(site, "nixl_cu12")
    rows = nixl_checks(Expected(cuda_version="13.0.3", nixl_version="1.5.2"))
    assert [(row.component, row.expected, row.found, row.verdict) for row in rows] == [
        ("nixl", "1.5.2", "1.5.1", "mismatch"),
        ("nixl-cu13", "1.5.2", "not installed", "missing"),
        (COMPONENT, "nixl_cu13._api", "nixl_cu12._api", "mismatch"),
    ]


def test_an_import_that_fails_says_why(site: Path) -> None:
    write_nixl(site, "nixl_cu13", api="raise OSError('libnixl.so: cannot open shared object file')")
    row = check_nixl_import("nixl_cu13")
    assert (row.found, row.verdict) == ("import failed", "mismatch")
    assert row.detail == "OSError: libnixl.so: cannot open shared object file"


def test_an_api_without_the_agent_is_a_mismatch(site: Path) -> None:
    write_nixl(site, "nixl_cu13", api="")
    assert check_nixl_import("nixl_cu13").verdict == "mismatch"


def test_without_nixl_nothing_is_imported(site: Path) -> None:
    assert check_nixl_import("nixl_cu13") == Check(
        component=COMPONENT, expected="nixl_cu13._api", found="nixl not installed", verdict="missing"
    )
