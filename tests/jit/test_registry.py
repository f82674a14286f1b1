"""epstack.jit.registry: every toolchain module once in TOOLCHAINS, in the start's install order, each
with what `Toolchain` names (mypy checks the types); and the guard's rows come from it, one per
toolchain, in its scope and the registry's order."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from epstack import imagepaths
from epstack.guard.run import shipped_cache_rows
from epstack.jit import deepep, deepgemm, flashinfer, sglang, triton, tritonserve, vllmcompile
from epstack.jit.registry import EXPORTED, TOOLCHAINS
from epstack.jit.toolchain import Toolchain

JIT = Path(deepep.__file__).parent


def _defines_guard_rows(path: Path) -> bool:
    tree = ast.parse(path.read_text())
    return any(isinstance(node, ast.FunctionDef) and node.name == "guard_rows" for node in tree.body)


def test_every_toolchain_module_is_in_the_registry_once_in_the_install_order() -> None:
    modules = sorted(path.stem for path in JIT.glob("*.py") if _defines_guard_rows(path))
    in_order = (deepep, deepgemm, sglang, flashinfer, triton, tritonserve, vllmcompile)
    assert in_order == TOOLCHAINS
    assert sorted(module.__name__.rpartition(".")[2] for module in in_order) == modules
    assert set(EXPORTED.values()) <= set(TOOLCHAINS)


def test_each_toolchain_has_what_the_protocol_names_and_names_of_its_own() -> None:
    members = [*Toolchain.__annotations__, "guard_rows"]
    for chain in TOOLCHAINS:
        assert [name for name in members if not hasattr(chain, name)] == [], chain.NAME
    for member in ("NAME", "COMPONENT", "SHIPPED"):
        values = [getattr(chain, member) for chain in TOOLCHAINS]
        assert len(set(values)) == len(values), member
    assert {scope for chain in TOOLCHAINS for scope in chain.GUARD_SCOPES} == {"base", "sglang", "vllm"}


@pytest.mark.skipif(Path(imagepaths.JIT).exists(), reason="an image's own shipped caches are here")
def test_an_image_with_none_shipped_gets_one_skipped_row_per_toolchain_in_its_scope() -> None:
    rows = {scope: shipped_cache_rows(scope, ["9.0a"]) for scope in ("python", "base", "deepep", "sglang")}
    assert {scope: [row.component for row in found] for scope, found in rows.items()} == {
        "python": [],
        "base": ["JIT cache Triton launcher"],
        "deepep": [],
        "sglang": [
            "JIT cache DeepEP",
            "JIT cache DeepGEMM",
            "JIT cache SGLang",
            "JIT cache FlashInfer",
            "JIT cache Triton kernels",
        ],
    }
    assert {(row.found, row.verdict) for found in rows.values() for row in found} == {
        ("none shipped", "skipped")
    }
